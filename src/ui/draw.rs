//! Drawing `rewindfs ui`: the timeline on the left, the selected checkpoint's paths and the
//! selected path's diff on the right, the keys at the bottom. Colours only without `NO_COLOR`.

use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph, Wrap};

use super::app::{App, DiffMode, Modal, Pane};
use crate::store::Actor;

/// The keys, as the bottom line shows them.
pub const KEYS: &str = "↑↓ move  Tab pane  d dry run  r rewind  u undo  U redo  f fork  s file/diff  t turn/now  ? help  q quit";

/// Where the panes were drawn last (for the mouse).
#[derive(Debug, Default, Clone, Copy)]
pub struct Areas {
    pub timeline: Rect,
    pub paths: Rect,
    pub detail: Rect,
    /// The first row shown in each list.
    pub timeline_offset: usize,
    pub paths_offset: usize,
}

/// Colours, or none.
#[derive(Debug, Clone, Copy)]
pub struct Palette {
    pub color: bool,
}

impl Palette {
    /// `NO_COLOR` set (to anything but empty) turns colours off.
    pub fn from_env() -> Palette {
        Palette {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }
    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }
    fn actor(self, a: Actor) -> Style {
        self.fg(match a {
            Actor::Tool => Color::Cyan,
            Actor::Shell => Color::Yellow,
            Actor::External => Color::Magenta,
            Actor::Rewind => Color::Green,
        })
    }
    fn selected(self, focused: bool) -> Style {
        let s = Style::default().add_modifier(Modifier::REVERSED);
        if focused {
            s.add_modifier(Modifier::BOLD)
        } else {
            s
        }
    }
}

/// Draws the whole window.
pub fn draw(f: &mut Frame, app: &App, pal: Palette, areas: &mut Areas) {
    let outer = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(1),
            Constraint::Length(1),
        ])
        .split(f.area());
    let header = format!(
        " rewindfs ui — {} — {} checkpoint(s), {} session(s)",
        app.source.describe(),
        app.timeline.rows.len(),
        app.timeline
            .sessions()
            .iter()
            .filter(|s| s.is_some())
            .count()
    );
    f.render_widget(
        Paragraph::new(header).style(pal.fg(Color::White).add_modifier(Modifier::BOLD)),
        outer[0],
    );
    let body = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Percentage(50), Constraint::Percentage(50)])
        .split(outer[1]);
    let right = Layout::default()
        .direction(Direction::Vertical)
        .constraints([Constraint::Percentage(35), Constraint::Percentage(65)])
        .split(body[1]);
    areas.timeline = body[0];
    areas.paths = right[0];
    areas.detail = right[1];
    areas.timeline_offset = timeline(f, app, pal, body[0]);
    areas.paths_offset = paths(f, app, pal, right[0]);
    detail(f, app, pal, right[1]);
    f.render_widget(
        Paragraph::new(format!(" {}", app.status)).style(pal.fg(Color::Green)),
        outer[2],
    );
    f.render_widget(
        Paragraph::new(format!(" {KEYS}")).style(pal.fg(Color::DarkGray)),
        outer[3],
    );
    if let Some(m) = &app.modal {
        modal(f, m, pal, app.source.workspace());
    }
}

fn block(title: String, focused: bool, pal: Palette) -> Block<'static> {
    let b = Block::default().borders(Borders::ALL).title(title);
    if focused {
        b.border_style(pal.fg(Color::Cyan).add_modifier(Modifier::BOLD))
    } else {
        b
    }
}

/// The checkpoints, oldest first: session, label, who changed how many paths.
fn timeline(f: &mut Frame, app: &App, pal: Palette, area: Rect) -> usize {
    let sessions = app.timeline.sessions();
    let items: Vec<ListItem> = app
        .timeline
        .rows
        .iter()
        .map(|r| {
            let s = sessions
                .iter()
                .position(|x| *x == r.info.session_id.as_deref())
                .unwrap_or(0);
            let tag = match r.info.session_id.as_deref() {
                Some(id) => format!("{:<8} ", id.get(..8).unwrap_or(id)),
                None => "-        ".into(),
            };
            let tag_style =
                pal.fg([Color::Blue, Color::Cyan, Color::Yellow, Color::Magenta][s % 4]);
            // Two lines: the turn as everywhere (`#2 (14:03:11) "prompt"`), then who changed
            // how many paths, so a narrow window cuts the prompt, never the counts.
            let first = Line::from(vec![Span::styled(tag, tag_style), Span::raw(r.label())]);
            let mut second = vec![Span::raw("         ")];
            let counts = r.counts();
            if counts.is_empty() {
                second.push(Span::styled("no changes", pal.fg(Color::DarkGray)));
            }
            for (i, (a, n)) in counts.into_iter().enumerate() {
                if i > 0 {
                    second.push(Span::raw("  "));
                }
                second.push(Span::styled(format!("{} {n}", a.as_str()), pal.actor(a)));
            }
            ListItem::new(Text::from(vec![first, Line::from(second)]))
        })
        .collect();
    let focused = app.focus == Pane::Timeline;
    let list = List::new(items)
        .block(block(
            " Timeline: session, turn, time, prompt; who changed how many paths ".into(),
            focused,
            pal,
        ))
        .highlight_style(pal.selected(focused))
        .highlight_symbol("▶ ");
    let mut state = ListState::default().with_selected(Some(app.selected));
    f.render_stateful_widget(list, area, &mut state);
    state.offset()
}

/// The selected checkpoint's paths, each with who changed it.
fn paths(f: &mut Frame, app: &App, pal: Palette, area: Rect) -> usize {
    let (title, items): (String, Vec<ListItem>) = match app.row() {
        Some(r) => (
            format!(" Changed in {} — {} ", r.label(), r.who()),
            r.paths
                .iter()
                .map(|(p, who)| {
                    let mut spans: Vec<Span> = Vec::new();
                    for a in who {
                        spans.push(Span::styled(
                            format!("{:<9}", a.actor().as_str()),
                            pal.actor(a.actor()),
                        ));
                    }
                    spans.push(Span::raw(p.clone()));
                    ListItem::new(Line::from(spans))
                })
                .collect(),
        ),
        None => (" Paths ".into(), Vec::new()),
    };
    let focused = app.focus == Pane::Paths;
    let list = List::new(items)
        .block(block(title, focused, pal))
        .highlight_style(pal.selected(focused))
        .highlight_symbol("▶ ");
    let mut state = ListState::default().with_selected(Some(app.path));
    f.render_stateful_widget(list, area, &mut state);
    state.offset()
}

/// The diff (or the file as it was), coloured by line.
fn detail(f: &mut Frame, app: &App, pal: Palette, area: Rect) {
    let (title, text) = &app.detail;
    let lines: Vec<Line> = text
        .lines()
        .map(|l| {
            let style = if app.show_file {
                Style::default()
            } else if l.starts_with("+++") || l.starts_with("---") {
                pal.fg(Color::White).add_modifier(Modifier::BOLD)
            } else if l.starts_with('+') {
                pal.fg(Color::Green)
            } else if l.starts_with('-') {
                pal.fg(Color::Red)
            } else if l.starts_with("@@") {
                pal.fg(Color::Cyan)
            } else {
                Style::default()
            };
            Line::styled(l.to_string(), style)
        })
        .collect();
    let mode = match (app.show_file, app.mode) {
        (true, _) => "file",
        (false, DiffMode::Turn) => "turn",
        (false, DiffMode::Now) => "now",
    };
    let focused = app.focus == Pane::Detail;
    f.render_widget(
        Paragraph::new(Text::from(lines))
            .block(block(format!(" [{mode}] {title} "), focused, pal))
            .scroll((app.scroll, 0)),
        area,
    );
}

fn modal(f: &mut Frame, m: &Modal, pal: Palette, ws: Option<&std::path::Path>) {
    let (title, text) = match m {
        Modal::ChooseScope { label, options, .. } => {
            let mut t = String::new();
            for (scope, r) in options {
                let key = match scope {
                    crate::rewind::Scope::Agent => 'a',
                    crate::rewind::Scope::Tool => 't',
                    crate::rewind::Scope::All => 'e',
                };
                t.push_str(&format!(
                    "[{key}] {}\n",
                    super::app::describe(*scope, r, ws)
                ));
            }
            t.push_str("\nEsc: cancel");
            (format!(" Rewind to the start of {label}: which scope? "), t)
        }
        Modal::Confirm {
            label,
            scope,
            count,
            ..
        } => (
            " Rewind? ".to_string(),
            format!(
                "Rewind {count} path(s) to the start of {label} in {} scope?\n\n[y] yes, rewind   [n] no\n\n(u undoes it afterwards)",
                scope.as_str()
            ),
        ),
        Modal::ForkDir { label, dir, .. } => (
            format!(" Fork the tree at the start of {label} into: "),
            format!("{dir}▏\n\nEnter: fork   Esc: cancel"),
        ),
        Modal::Message { title, text } => (format!(" {title} "), format!("{text}\n\n(any key)")),
        Modal::Help => (" Keys ".into(), HELP.into()),
    };
    let area = centered(f.area(), 80, 60);
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(text).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(title)
                .border_style(pal.fg(Color::Yellow)),
        ),
        area,
    );
}

/// What each key does (`?`).
pub const HELP: &str = "\
↑/↓ or k/j     move in the focused pane (PgUp/PgDn: by ten)
Tab / ←→       focus the timeline, the paths, or the diff
mouse          click to select, wheel to scroll
d              dry run: what a rewind to the selected checkpoint would change, in each scope
r              rewind to the selected checkpoint (choose the scope; a confirmation names it and the count)
u / U          undo the last rewind / redo the last undo
f              fork the tree at the selected checkpoint into a new directory
s              show the selected file as it was (again: back to the diff)
t              diff: what the turn changed / from now to the checkpoint (what a rewind does)
g              read the history again now (it follows the mount by itself every second)
Esc            close a window
q              quit";

fn centered(r: Rect, w: u16, h: u16) -> Rect {
    let v = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Percentage((100 - h) / 2),
            Constraint::Percentage(h),
            Constraint::Percentage((100 - h) / 2),
        ])
        .split(r);
    Layout::default()
        .direction(Direction::Horizontal)
        .constraints([
            Constraint::Percentage((100 - w) / 2),
            Constraint::Percentage(w),
            Constraint::Percentage((100 - w) / 2),
        ])
        .split(v[1])[1]
}
