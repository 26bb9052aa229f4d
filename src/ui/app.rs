//! The state of `rewindfs ui` and what each key does to it. Drawing is `draw.rs`'s; the
//! requests go through [`Source`].
//!
//! Nothing changes the workspace without a confirmation that names the scope and the count,
//! and a rewind's numbers come from its own dry run, made when the key was pressed.

use std::path::PathBuf;

use crate::control::cmd::{Diff, RewindFiles, RewindReply, Show};
use crate::rewind::Scope;
use crate::store::Kind;
use crate::timeline::{Row, Timeline};

use super::source::Source;

/// The pane keys act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Timeline,
    Paths,
    Detail,
}

/// What the detail pane compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffMode {
    /// The selected turn's own change: from when it began to when the next checkpoint began
    /// (to now for the newest).
    Turn,
    /// From now to as it was when the checkpoint began: what a rewind would do.
    Now,
}

/// A window over the panes, waiting for an answer.
#[derive(Debug, Clone)]
pub enum Modal {
    /// Which scope to rewind in, with what each one's dry run said.
    ChooseScope {
        uuid: String,
        label: String,
        options: Vec<(Scope, RewindReply)>,
    },
    /// The last word before a rewind.
    Confirm {
        uuid: String,
        label: String,
        scope: Scope,
        count: usize,
    },
    /// Where to fork to (edited in place).
    ForkDir {
        uuid: String,
        label: String,
        dir: String,
    },
    /// A result or an error, until any key.
    Message { title: String, text: String },
    /// The keys.
    Help,
}

/// The whole state.
pub struct App {
    pub source: Source,
    pub timeline: Timeline,
    /// Index into `timeline.rows`.
    pub selected: usize,
    /// Index into the selected row's paths.
    pub path: usize,
    pub focus: Pane,
    pub mode: DiffMode,
    /// What the detail pane shows: its title and lines.
    pub detail: (String, String),
    /// Lines scrolled off the top of the detail pane.
    pub scroll: u16,
    pub modal: Option<Modal>,
    /// The last thing done, shown above the keys.
    pub status: String,
    pub quit: bool,
    /// Whether the detail pane is for the selection as it is (else it is read again).
    detail_for: Option<(String, Option<String>, DiffMode, bool)>,
    /// Show the file as it was instead of a diff.
    pub show_file: bool,
}

impl App {
    /// The window over `source`, its timeline read, the newest checkpoint selected.
    pub fn new(mut source: Source) -> App {
        let (timeline, status) = match source.timeline(true) {
            Ok(t) => (t.unwrap_or_default(), String::new()),
            Err(e) => (Timeline::default(), format!("{e:#}")),
        };
        let selected = timeline.rows.len().saturating_sub(1);
        let mut app = App {
            source,
            timeline,
            selected,
            path: 0,
            focus: Pane::Timeline,
            mode: DiffMode::Turn,
            detail: (String::new(), String::new()),
            scroll: 0,
            modal: None,
            status,
            quit: false,
            detail_for: None,
            show_file: false,
        };
        app.refresh_detail();
        app
    }

    /// The selected checkpoint.
    pub fn row(&self) -> Option<&Row> {
        self.timeline.rows.get(self.selected)
    }

    /// The selected path of the selected checkpoint.
    pub fn path_name(&self) -> Option<&str> {
        self.row()
            .and_then(|r| r.paths.keys().nth(self.path))
            .map(String::as_str)
    }

    /// Reads the history again (every second): new turns and changes appear; the selection
    /// stays on the same checkpoint and path.
    pub fn reload(&mut self, force: bool) {
        let keep = self.row().map(|r| r.info.uuid.clone());
        let keep_path = self.path_name().map(str::to_owned);
        match self.source.timeline(force) {
            Ok(Some(t)) => {
                self.timeline = t;
                if let Some(i) =
                    keep.and_then(|u| self.timeline.rows.iter().position(|r| r.info.uuid == u))
                {
                    self.selected = i;
                } else {
                    self.selected = self
                        .selected
                        .min(self.timeline.rows.len().saturating_sub(1));
                }
                self.path = keep_path
                    .and_then(|p| {
                        self.row()
                            .and_then(|r| r.paths.keys().position(|k| *k == p))
                    })
                    .unwrap_or(0);
                self.refresh_detail();
            }
            Ok(None) => {}
            Err(e) => self.status = format!("reading the history: {e:#}"),
        }
    }

    /// Reads the detail pane again if the selection, the mode or the history changed.
    pub fn refresh_detail(&mut self) {
        let Some(row) = self.row() else {
            self.detail = ("".into(), "No checkpoints yet: they begin with each prompt (`rewindfs setup <agent>` wires the hooks), or with `rewindfs checkpoint`.".into());
            return;
        };
        let (uuid, label, who) = (row.info.uuid.clone(), row.label(), row.who());
        let path = self.path_name().map(str::to_owned);
        let key = (uuid.clone(), path.clone(), self.mode, self.show_file);
        if self.detail_for.as_ref() == Some(&key) {
            return;
        }
        self.scroll = 0;
        self.detail_for = Some(key);
        let Some(path) = path else {
            self.detail = (
                label,
                format!("{who}\n\nNothing changed while this checkpoint was current."),
            );
            return;
        };
        self.detail = if self.show_file {
            self.file_as_it_was(&uuid, &label, &path)
        } else {
            self.diff_of(&uuid, &label, &path)
        };
    }

    fn diff_of(&mut self, uuid: &str, label: &str, path: &str) -> (String, String) {
        let next = self
            .timeline
            .rows
            .get(self.selected + 1)
            .map(|r| r.info.uuid.clone());
        let (to, title) = match (self.mode, next) {
            (DiffMode::Turn, Some(next)) => (
                Some(next),
                format!("{path}: what changed in {label} (a/ its start, b/ its end)"),
            ),
            _ => (
                None,
                format!("{path}: now (a/) → at the start of {label} (b/), what a rewind does"),
            ),
        };
        let turn_order = to.is_some();
        let req = Diff {
            // Between two checkpoints: from the tree when A began to the tree when B began.
            user_message_id: uuid.to_string(),
            to_message_id: to,
            fork_dir: None,
            path: Some(path.to_string()),
            scope: Scope::All,
            session_id: None,
        };
        let text = match self.source.diff(&req) {
            Ok(r) if r.diff.is_empty() && turn_order => {
                "No difference between its start and its end (changed, then changed back).".into()
            }
            Ok(r) if r.diff.is_empty() => "As it is now: a rewind would leave it as it is.".into(),
            Ok(r) => r.diff,
            Err(e) => format!("{e:#}"),
        };
        (title, text)
    }

    fn file_as_it_was(&mut self, uuid: &str, label: &str, path: &str) -> (String, String) {
        let title = format!("{path} as it was at the start of {label}");
        let text = match self.source.show(&Show {
            user_message_id: uuid.to_string(),
            path: path.to_string(),
            content: true,
            offset: 0,
            length: Some(1 << 20),
        }) {
            Ok(r) => match (r.kind, r.content) {
                (Kind::File, Some(c)) => match String::from_utf8(c) {
                    Ok(t) => t,
                    Err(e) => format!("(binary, {} bytes)", e.as_bytes().len()),
                },
                (Kind::Symlink, _) => format!("symlink -> {}", r.target.unwrap_or_default()),
                (kind, _) => format!("{} (mode {:04o})", kind.as_str(), r.mode),
            },
            Err(e) => format!("{e:#}"),
        };
        (title, text)
    }

    /// Moves the selection of the focused pane by `by` (negative: up).
    pub fn step(&mut self, by: isize) {
        match self.focus {
            Pane::Timeline => {
                let n = self.timeline.rows.len();
                self.selected = clamp(self.selected, by, n);
                self.path = 0;
            }
            Pane::Paths => {
                let n = self.row().map_or(0, |r| r.paths.len());
                self.path = clamp(self.path, by, n);
            }
            Pane::Detail => {
                self.scroll = if by < 0 {
                    self.scroll.saturating_sub(by.unsigned_abs() as u16)
                } else {
                    self.scroll.saturating_add(by as u16)
                };
                return;
            }
        }
        self.refresh_detail();
    }

    /// `d`: what a rewind to the selected checkpoint would change, in each scope.
    pub fn dry_run(&mut self) {
        let Some(row) = self.row() else { return };
        let (uuid, label) = (row.info.uuid.clone(), row.label());
        let options = self.dry_runs(&uuid);
        let mut text = String::new();
        for (scope, r) in &options {
            text.push_str(&describe(*scope, r, self.source.workspace()));
            text.push('\n');
        }
        self.modal = Some(Modal::Message {
            title: format!("Dry run: rewind to the start of {label}"),
            text,
        });
    }

    fn dry_runs(&mut self, uuid: &str) -> Vec<(Scope, RewindReply)> {
        let mut out = Vec::new();
        for scope in [Scope::Agent, Scope::Tool, Scope::All] {
            let req = RewindFiles {
                dry_run: true,
                ..RewindFiles::to(uuid, scope)
            };
            let r = match self.source.rewind(&req) {
                Ok(r) => r,
                Err(e) => RewindReply {
                    can_rewind: false,
                    error: Some(format!("{e:#}")),
                    ..Default::default()
                },
            };
            out.push((scope, r));
        }
        out
    }

    /// `r`: choose a scope (each with its dry run's count), then confirm.
    pub fn begin_rewind(&mut self) {
        let Some(row) = self.row() else { return };
        let (uuid, label) = (row.info.uuid.clone(), row.label());
        if !self.source.is_live() {
            self.message("Rewind", super::source::READ_ONLY.into());
            return;
        }
        let options = self.dry_runs(&uuid);
        self.modal = Some(Modal::ChooseScope {
            uuid,
            label,
            options,
        });
    }

    /// The scope chosen: a confirmation naming it and the count, or why it cannot be done.
    pub fn choose(&mut self, scope: Scope) {
        let Some(Modal::ChooseScope {
            uuid,
            label,
            options,
        }) = self.modal.take()
        else {
            return;
        };
        let Some((_, r)) = options.iter().find(|(s, _)| *s == scope) else {
            return;
        };
        if !r.can_rewind || r.files_changed.is_empty() {
            let text = describe(scope, r, self.source.workspace());
            self.message(&format!("Cannot rewind to {label}"), text);
            return;
        }
        self.modal = Some(Modal::Confirm {
            uuid,
            label,
            scope,
            count: r.files_changed.len(),
        });
    }

    /// `y` on the confirmation.
    pub fn confirm(&mut self) {
        let Some(Modal::Confirm {
            uuid, label, scope, ..
        }) = self.modal.take()
        else {
            return;
        };
        let r = self.source.rewind(&RewindFiles::to(&uuid, scope));
        self.after_change(&format!("Rewind to {label} ({} scope)", scope.as_str()), r);
    }

    /// `u` / `U`.
    pub fn undo(&mut self, redo: bool) {
        let r = if redo {
            self.source.redo()
        } else {
            self.source.undo()
        };
        self.after_change(if redo { "Redo" } else { "Undo" }, r);
    }

    fn after_change(&mut self, what: &str, r: anyhow::Result<RewindReply>) {
        match r {
            Ok(r) if r.error.is_none() => {
                let ws = self.source.workspace().map(PathBuf::from);
                let n = r.files_changed.len();
                self.status = format!(
                    "{what}: {n} path(s) changed{}",
                    if what.starts_with("Rewind") {
                        "; u undoes it"
                    } else {
                        ""
                    }
                );
                let text = describe_done(&r, ws.as_deref());
                self.message(&format!("{what}: done"), text);
            }
            Ok(r) => self.message(what, r.error.unwrap_or_default()),
            Err(e) => self.message(what, format!("{e:#}")),
        }
        self.detail_for = None;
        self.reload(true);
    }

    /// `f`: where to fork the selected checkpoint's tree to.
    pub fn begin_fork(&mut self) {
        let Some(row) = self.row() else { return };
        let (uuid, label) = (row.info.uuid.clone(), row.label());
        let Some(ws) = self.source.workspace() else {
            self.message("Fork", super::source::READ_ONLY.into());
            return;
        };
        let n = row.turn.map_or_else(
            || row.info.uuid[..8.min(row.info.uuid.len())].to_string(),
            |n| format!("turn{n}"),
        );
        let dir = format!("{}-{n}", ws.display());
        self.modal = Some(Modal::ForkDir { uuid, label, dir });
    }

    /// Enter on the fork's directory.
    pub fn fork(&mut self) {
        let Some(Modal::ForkDir { uuid, label, dir }) = self.modal.take() else {
            return;
        };
        match self.source.fork(&uuid, std::path::Path::new(&dir)) {
            Ok(r) => {
                self.status = format!("Forked {label} into {}", r.dir.display());
                self.message(
                    "Fork: done",
                    format!(
                        "The tree at the start of {label} is in {}:\n{} file(s), {} director(ies), {} symlink(s).\n`rewindfs mount {}` gives it a history of its own.",
                        r.dir.display(),
                        r.files,
                        r.dirs,
                        r.symlinks,
                        r.dir.display()
                    ),
                );
            }
            Err(e) => self.message("Fork", format!("{e:#}")),
        }
    }

    fn message(&mut self, title: &str, text: String) {
        self.modal = Some(Modal::Message {
            title: title.to_string(),
            text,
        });
    }
}

fn clamp(at: usize, by: isize, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    at.saturating_add_signed(by).min(n - 1)
}

/// A path of a reply, relative to the workspace.
fn rel(p: &str, ws: Option<&std::path::Path>) -> String {
    ws.and_then(|w| std::path::Path::new(p).strip_prefix(w).ok())
        .map_or_else(|| p.to_string(), |r| r.display().to_string())
}

/// Paths, the first few, then how many more.
fn some_paths(paths: &[String], ws: Option<&std::path::Path>) -> String {
    const SHOWN: usize = 8;
    let mut out: Vec<String> = paths.iter().take(SHOWN).map(|p| rel(p, ws)).collect();
    if paths.len() > SHOWN {
        out.push(format!("… and {} more", paths.len() - SHOWN));
    }
    out.join(", ")
}

/// One scope's dry run, in a line or two: what it would restore, conflicts and who made them.
pub fn describe(scope: Scope, r: &RewindReply, ws: Option<&std::path::Path>) -> String {
    let name = scope.as_str();
    if let Some(e) = &r.error {
        return format!("{name} scope: cannot rewind: {e}");
    }
    let mut out = if r.files_changed.is_empty() {
        format!("{name} scope: nothing to restore")
    } else {
        format!(
            "{name} scope: would restore {} path(s) (+{} -{} lines): {}",
            r.files_changed.len(),
            r.insertions,
            r.deletions,
            some_paths(&r.files_changed, ws)
        )
    };
    if !r.conflicts.is_empty() {
        let named: Vec<String> = r
            .conflicts
            .iter()
            .map(|p| {
                let p = rel(p, ws);
                match r.conflicts_by.get(&p) {
                    Some(by) => format!("{p} ({})", by.join(", ")),
                    None => p,
                }
            })
            .collect();
        out.push_str(&format!(
            "\n  conflicts (changed since by someone else; refused unless forced at a shell): {}",
            named.join(", ")
        ));
    }
    out
}

/// What a rewind, undo or redo changed.
fn describe_done(r: &RewindReply, ws: Option<&std::path::Path>) -> String {
    let mut out = format!(
        "{} path(s) changed: {}",
        r.files_changed.len(),
        some_paths(&r.files_changed, ws)
    );
    if let Some(n) = r.undoable {
        out.push_str(&format!("\n{n} rewind(s) can be undone (u)"));
    }
    if let Some(n) = r.redoable.filter(|n| *n > 0) {
        out.push_str(&format!(", {n} redone (U)"));
    }
    out
}
