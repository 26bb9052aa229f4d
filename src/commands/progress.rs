//! Progress on long work, on stderr at a terminal (indicatif): export, import, push, pull,
//! fork, rewind, undo, redo, gc, fsck.
//!
//! A meter appears only once the work has taken longer than [`SHOW_AFTER`] (short commands
//! stay as they were), never when stderr is not a terminal or with `--json`, and is cleared
//! before the command prints its answer. Most of this work is done by the daemon in one
//! request, so the meter reads what can be seen from here while it runs ([`Reading`]): the
//! bytes of a file being written, the daemon's position in a bundle it reads, the change log
//! growing as a rewind applies.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before its meter appears (`REWINDFS_PROGRESS_AFTER_MS` sets another
/// time: 0 shows every meter at once, as the terminal tests do).
const SHOW_AFTER: Duration = Duration::from_millis(500);

fn show_after() -> Duration {
    std::env::var("REWINDFS_PROGRESS_AFTER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(SHOW_AFTER, Duration::from_millis)
}
/// How often the meter reads.
const EVERY: Duration = Duration::from_millis(200);

/// What the meter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Bytes,
    /// Paths, blobs: `what` names them.
    Items(&'static str),
    /// Nothing to count: a spinner and the time.
    Time,
}

/// A meter on stderr, or nothing.
pub(crate) struct Meter {
    bar: Option<ProgressBar>,
    started: Instant,
    after: Duration,
    shown: AtomicBool,
    unit: Unit,
}

impl Meter {
    /// A meter for `what` (e.g. "exporting"), unless `quiet` or stderr is not a terminal.
    pub(crate) fn new(what: &str, unit: Unit, total: Option<u64>, quiet: bool) -> Meter {
        let bar = can_show(quiet).then(|| {
            let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
            let template = match (unit, total) {
                (Unit::Bytes, Some(_)) => {
                    "{spinner} {msg} {bytes}/{total_bytes} ({bytes_per_sec}, {elapsed})"
                }
                (Unit::Bytes, None) => "{spinner} {msg} {bytes} ({bytes_per_sec}, {elapsed})",
                (Unit::Items(_), Some(_)) => "{spinner} {msg} {pos}/{len} ({per_sec}, {elapsed})",
                (Unit::Items(_), None) => "{spinner} {msg} {pos} ({per_sec}, {elapsed})",
                (Unit::Time, _) => "{spinner} {msg} ({elapsed})",
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            let msg = match unit {
                Unit::Items(name) => format!("{what} {name}"),
                _ => what.to_string(),
            };
            bar.set_message(msg);
            bar
        });
        Meter {
            bar,
            started: Instant::now(),
            after: show_after(),
            shown: AtomicBool::new(false),
            unit,
        }
    }

    /// Whether anything will be drawn.
    pub(crate) fn is_on(&self) -> bool {
        self.bar.is_some()
    }

    /// `done` so far (of the total given, or now known).
    pub(crate) fn set(&self, done: u64, total: Option<u64>) {
        let Some(bar) = &self.bar else { return };
        if let Some(t) = total {
            bar.set_length(t);
        }
        bar.set_position(done);
        self.tick();
    }

    /// Shows the meter once the work has run long enough; moves the spinner.
    pub(crate) fn tick(&self) {
        let Some(bar) = &self.bar else { return };
        if !self.shown.load(Ordering::Relaxed) && self.started.elapsed() >= self.after {
            self.shown.store(true, Ordering::Relaxed);
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(120));
        }
        if self.unit == Unit::Time {
            bar.tick();
        }
    }

    /// Clears the meter (the answer is printed next).
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Whether a meter can show: not `quiet`, and stderr is a terminal. Work that costs something
/// only to feed a meter (a second connection, a count of the change log) asks this first.
pub(crate) fn can_show(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A reading of the work's progress: how much is done, and the total when it is known.
pub(crate) type Reading = Option<(u64, Option<u64>)>;

/// Runs `work` with a meter fed by `read` every [`EVERY`] on a thread of its own.
pub(crate) fn metered<T>(
    what: &str,
    unit: Unit,
    quiet: bool,
    read: impl FnMut() -> Reading + Send,
    work: impl FnOnce() -> T,
) -> T {
    let meter = Meter::new(what, unit, None, quiet);
    if !meter.is_on() {
        return work();
    }
    let stop = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let (meter, stop) = (&meter, &stop);
        let mut read = read;
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match read() {
                    Some((done, total)) => meter.set(done, total),
                    None => meter.tick(),
                }
                // In small steps, so the command never waits for the meter.
                let next = Instant::now() + EVERY;
                while !stop.load(Ordering::Relaxed) && Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        });
        let out = work();
        stop.store(true, Ordering::Relaxed);
        out
    });
    meter.finish();
    out
}

/// The size of `path` now (a file being written).
pub(crate) fn file_size(path: &Path) -> Reading {
    std::fs::metadata(path).ok().map(|m| (m.len(), None))
}

/// The bytes of the regular files under `dir` (a tree being written).
pub(crate) fn tree_bytes(dir: &Path) -> Reading {
    fn walk(d: &Path, n: &mut u64) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(&e.path(), n),
                Ok(t) if t.is_file() => *n += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    let mut n = 0;
    walk(dir, &mut n);
    Some((n, None))
}

/// How far process `pid` has read `file` (its open file's offset, from /proc), of the file's
/// size: a daemon importing a bundle.
pub(crate) fn read_position(pid: u32, file: &Path) -> Reading {
    let size = std::fs::metadata(file).ok()?.len();
    let file = std::fs::canonicalize(file).ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    for fd in fds.flatten() {
        if std::fs::read_link(fd.path()).ok().as_deref() != Some(file.as_path()) {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .ok()?;
        let pos = info
            .lines()
            .find_map(|l| l.strip_prefix("pos:"))
            .and_then(|p| p.trim().parse().ok())?;
        return Some((pos, Some(size)));
    }
    // Not open (yet, or any more): nothing to add.
    None
}
