//! `rewindfs ui`: a terminal timeline of what the agent did, turn by turn, with a dry run,
//! rewind, undo, redo and fork one key away (ratatui over crossterm).
//!
//! `source.rs` reaches the daemon (or reads a store read-only), `app.rs` holds the state and
//! what each key does, `draw.rs` draws it. The loop here reads keys and the mouse, and reads
//! the history again every second, so a live mount's new turns and changes appear by
//! themselves. The terminal is given back as it was on every way out, a panic included.

mod app;
mod draw;
pub mod source;

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event, KeyCode, KeyEvent, KeyEventKind,
    KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use ratatui::crossterm::execute;
use ratatui::layout::Rect;

use self::app::{App, DiffMode, Modal, Pane};
use self::draw::{Areas, Palette};
pub use self::source::Source;
use crate::rewind::Scope;

/// How often the history is read again.
const REFRESH: Duration = Duration::from_secs(1);

/// Runs the window over `source` until `q`.
///
/// # Errors
/// The terminal cannot be set up or drawn to.
pub fn run(source: Source) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let _ = execute!(std::io::stdout(), EnableMouseCapture);
    let result = event_loop(&mut terminal, App::new(source));
    let _ = execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::try_restore()?;
    result
}

fn event_loop(terminal: &mut ratatui::DefaultTerminal, mut app: App) -> anyhow::Result<()> {
    let pal = Palette::from_env();
    let mut areas = Areas::default();
    let mut last = Instant::now();
    while !app.quit {
        terminal.draw(|f| draw::draw(f, &app, pal, &mut areas))?;
        let wait = REFRESH.saturating_sub(last.elapsed());
        if event::poll(wait)? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => key(&mut app, k),
                Event::Mouse(m) => mouse(&mut app, m, &areas),
                // Resizing: the next draw fits the new size.
                _ => {}
            }
        }
        if last.elapsed() >= REFRESH {
            if app.modal.is_none() {
                app.reload(false);
            }
            last = Instant::now();
        }
    }
    Ok(())
}

fn key(app: &mut App, k: KeyEvent) {
    let ctrl_c = k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c');
    if ctrl_c {
        app.quit = true;
        return;
    }
    match app.modal.clone() {
        Some(Modal::ChooseScope { .. }) => match k.code {
            KeyCode::Char('a') => app.choose(Scope::Agent),
            KeyCode::Char('t') => app.choose(Scope::Tool),
            KeyCode::Char('e') => app.choose(Scope::All),
            KeyCode::Esc | KeyCode::Char('n' | 'q') => app.modal = None,
            _ => {}
        },
        Some(Modal::Confirm { .. }) => match k.code {
            KeyCode::Char('y') => app.confirm(),
            KeyCode::Esc | KeyCode::Char('n' | 'q') => {
                app.modal = None;
                app.status = "Not rewound.".into();
            }
            _ => {}
        },
        Some(Modal::ForkDir {
            uuid,
            label,
            mut dir,
        }) => match k.code {
            KeyCode::Enter => app.fork(),
            KeyCode::Esc => app.modal = None,
            KeyCode::Backspace => {
                dir.pop();
                app.modal = Some(Modal::ForkDir { uuid, label, dir });
            }
            KeyCode::Char(c) => {
                dir.push(c);
                app.modal = Some(Modal::ForkDir { uuid, label, dir });
            }
            _ => {}
        },
        Some(Modal::Message { .. } | Modal::Help) => app.modal = None,
        None => plain_key(app, k.code),
    }
}

fn plain_key(app: &mut App, code: KeyCode) {
    match code {
        // Esc only closes windows: pressed once too often, it must not end the session.
        KeyCode::Char('q') => app.quit = true,
        KeyCode::Up | KeyCode::Char('k') => app.step(-1),
        KeyCode::Down | KeyCode::Char('j') => app.step(1),
        KeyCode::PageUp => app.step(-10),
        KeyCode::PageDown => app.step(10),
        KeyCode::Home => app.step(-(1 << 30)),
        KeyCode::End => app.step(1 << 30),
        KeyCode::Tab | KeyCode::Right | KeyCode::Char('l') => {
            app.focus = match app.focus {
                Pane::Timeline => Pane::Paths,
                Pane::Paths => Pane::Detail,
                Pane::Detail => Pane::Timeline,
            }
        }
        KeyCode::BackTab | KeyCode::Left | KeyCode::Char('h') => {
            app.focus = match app.focus {
                Pane::Timeline => Pane::Detail,
                Pane::Paths => Pane::Timeline,
                Pane::Detail => Pane::Paths,
            }
        }
        KeyCode::Char('d') => app.dry_run(),
        KeyCode::Char('r') => app.begin_rewind(),
        KeyCode::Char('u') => app.undo(false),
        KeyCode::Char('U') => app.undo(true),
        KeyCode::Char('f') => app.begin_fork(),
        KeyCode::Char('s') => {
            app.show_file = !app.show_file;
            app.refresh_detail();
        }
        KeyCode::Char('t') => {
            app.mode = match app.mode {
                DiffMode::Turn => DiffMode::Now,
                DiffMode::Now => DiffMode::Turn,
            };
            app.show_file = false;
            app.refresh_detail();
        }
        KeyCode::Char('g') => app.reload(true),
        KeyCode::Char('?') => app.modal = Some(Modal::Help),
        _ => {}
    }
}

fn mouse(app: &mut App, m: MouseEvent, areas: &Areas) {
    if app.modal.is_some() {
        if let MouseEventKind::Down(_) = m.kind {
            if matches!(app.modal, Some(Modal::Message { .. } | Modal::Help)) {
                app.modal = None;
            }
        }
        return;
    }
    let inside = |r: Rect| {
        m.column >= r.x && m.column < r.x + r.width && m.row >= r.y && m.row < r.y + r.height
    };
    let pane = if inside(areas.timeline) {
        Pane::Timeline
    } else if inside(areas.paths) {
        Pane::Paths
    } else if inside(areas.detail) {
        Pane::Detail
    } else {
        return;
    };
    match m.kind {
        MouseEventKind::Down(MouseButton::Left) => {
            app.focus = pane;
            // Item `n` of a bordered list starts at y + 1 + n × its height.
            let (r, offset, at, height) = match pane {
                Pane::Timeline => (areas.timeline, areas.timeline_offset, app.selected, 2),
                Pane::Paths => (areas.paths, areas.paths_offset, app.path, 1),
                Pane::Detail => return,
            };
            if m.row > r.y {
                let want = offset + usize::from(m.row - r.y - 1) / height;
                app.step(want as isize - at as isize);
            }
        }
        MouseEventKind::ScrollUp => {
            app.focus = pane;
            app.step(-3);
        }
        MouseEventKind::ScrollDown => {
            app.focus = pane;
            app.step(3);
        }
        _ => {}
    }
}
