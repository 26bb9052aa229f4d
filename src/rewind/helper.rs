//! The process a live rewind changes the mount through.
//!
//! The daemon cannot make requests to its own mount from one of its own threads: killed while
//! that thread waits for an answer, it would never exit. The kernel ends a FUSE request whose
//! daemon died only once the connection is torn down, and with FUSE over io_uring that waits
//! for the whole thread group to go — which the waiting thread belongs to. So the daemon runs
//! `rewindfs __apply-rewind`, a helper process of its own (a process like any other writer:
//! the daemon's death aborts the connection, which ends the helper's request), and the helper
//! applies the plan (`live.rs`) and reports what it left alone.
//!
//! The protocol is one JSON object a line: the daemon writes the job ([`Job`]) to the helper's
//! stdin; the helper writes [`Message`]s to its stdout — a question, whether someone else
//! changed a path since the rewind began (the daemon answers `true` or `false` on a line of
//! its own: only the daemon's FUSE core saw the changes), and at the end what it did. The
//! helper's stderr is the daemon's log.
//!
//! Invariants:
//! - the helper is one thread, so its requests carry its pid, which the daemon names as the
//!   rewind's ([`Watch::apply_here_for`]) before it sends the job: every request it makes is
//!   the rewind's, refused where others changed the path meanwhile;
//! - it is this very binary (`/proc/self/exe`: the image the daemon runs, even once an upgrade
//!   has replaced or removed the file it was started from), and applies only through the mount
//!   the daemon serves (the job carries the mount's device; a mount made over it since is not
//!   written to);
//! - it holds no fd it did not open (everything it inherited past stderr is closed first), and
//!   dies with the daemon (`PR_SET_PDEATHSIG`);
//! - it says something at least every [`PROGRESS_EVERY`] while it gets on; a helper silent for
//!   [`SILENCE`] is stuck (a request that never ends): the daemon kills it and fails the rewind,
//!   which stays journalled for the next mount to finish.

use std::cell::{Cell, RefCell};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::apply::{Applied, Meanwhile, Tree};
use super::{Planned, RewindError, Rewinder, live};
use crate::capture::Watch;
use crate::store::Blobs;
use crate::sys;
use crate::wspath::WsPath;

/// The hidden subcommand that runs [`run_helper`].
pub const SUBCOMMAND: &str = "__apply-rewind";

/// How often at most the helper says it is getting on.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How long the daemon waits for a word from the helper before it takes it for stuck.
const SILENCE: Duration = Duration::from_secs(60);

/// What the helper is to do.
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    /// The mount's root (the workspace's path).
    mount: PathBuf,
    /// The mount's device (major, minor), as the daemon read it when it mounted: the helper
    /// applies nothing through another file system mounted there since.
    dev: (u32, u32),
    /// The store's blob directory, which the targets' contents are read from.
    blobs: PathBuf,
    /// The rewind's id (its temp names).
    id: String,
    /// The plan: each target with what planning saw differ at it and, where small enough,
    /// its content as planning read and verified it (the helper checks its hash again before
    /// it writes it).
    planned: Vec<Planned>,
}

/// A line from the helper.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Message {
    /// Did someone else change this path (or, with `beneath`, something below it) since the
    /// rewind began?
    Changed { path: Vec<u8>, beneath: bool },
    /// Getting on: this many targets done or left so far (no answer).
    Progress { steps: u64 },
    /// Applied; these were left alone (`partial`: partly restored, see [`Applied`]).
    Done {
        skipped: Vec<WsPath>,
        untouched: Vec<WsPath>,
        meanwhile: Vec<WsPath>,
        #[serde(default)]
        partial: Vec<WsPath>,
        /// Scope `tool`: failed, and held (see [`Applied`]).
        #[serde(default)]
        failed: Vec<WsPath>,
        #[serde(default)]
        held: Vec<WsPath>,
    },
    /// Stopped at this failure (the paths before it are done), with its errno when a system
    /// call failed.
    Failed {
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        errno: Option<i32>,
    },
}

impl Rewinder {
    /// Applies `targets` through the mount, from a helper process (see the module doc), which
    /// `watch` names as the rewind's.
    pub(super) fn apply_through_mount(
        &self,
        watch: &Watch<'_>,
        todo: &[&Planned],
        id: &str,
    ) -> Result<Applied, RewindError> {
        let failed = |what: &str, e: io::Error| {
            RewindError::Io(sys::ctx(e, format!("the rewind's helper process: {what}")))
        };
        let mount = self.g.workspace.clone();
        let dev = *self.g.mount_dev.get().ok_or_else(|| {
            RewindError::Failed("the mount's device is not known (see the log at mount)".into())
        })?;
        let job = Job {
            mount,
            dev,
            blobs: self.g.store.blobs.dir().to_path_buf(),
            id: id.to_string(),
            planned: todo.iter().map(|p| (*p).clone()).collect(),
        };
        // This process's own image: after an upgrade, `current_exe()` names a file that is
        // gone ("… (deleted)") or holds another version.
        let mut child = Command::new("/proc/self/exe")
            .arg(SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| failed("starting it", e))?;
        let _me = watch.apply_here_for(child.id());
        let (Some(mut to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(RewindError::Failed(
                "the rewind's helper has no pipes".into(),
            ));
        };
        let silence = crate::faults::helper_silence().unwrap_or(SILENCE);
        let outcome = (|| {
            let mut line = serde_json::to_vec(&job).map_err(io::Error::other)?;
            line.push(b'\n');
            to.write_all(&line)?;
            let mut from = BufReader::new(from);
            let mut buf = String::new();
            loop {
                buf.clear();
                if from.buffer().is_empty() && !sys::wait_readable(from.get_ref().as_fd(), silence)?
                {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "it made no progress for {} s (a request to the mount that never \
                             ends?) and was stopped; the rewind stays journalled and is \
                             finished at the next mount",
                            silence.as_secs_f32()
                        ),
                    ));
                }
                if from.read_line(&mut buf)? == 0 {
                    return Err(io::Error::other("it ended without a word (see the log)"));
                }
                match serde_json::from_str::<Message>(&buf).map_err(io::Error::other)? {
                    Message::Changed { path, beneath } => {
                        let yes = watch.changed(&path, beneath);
                        to.write_all(if yes { b"true\n" } else { b"false\n" })?;
                    }
                    Message::Progress { .. } => {}
                    Message::Done {
                        skipped,
                        untouched,
                        meanwhile,
                        partial,
                        failed,
                        held,
                    } => {
                        return Ok(Ok(Applied {
                            skipped: skipped.into_iter().collect(),
                            untouched: untouched.into_iter().collect(),
                            meanwhile: meanwhile.into_iter().collect(),
                            partial: partial.into_iter().collect(),
                            failed,
                            held,
                        }));
                    }
                    Message::Failed { error, errno } => return Ok(Err((error, errno))),
                }
            }
        })();
        drop(to);
        if matches!(&outcome, Err(e) if e.kind() == io::ErrorKind::TimedOut) {
            tracing::error!(
                "the rewind's helper (pid {}) is stuck: killing it",
                child.id()
            );
            let _ = child.kill();
        }
        let _ = child.wait();
        match outcome {
            Ok(Ok(applied)) => Ok(applied),
            // The helper's message already says what failed; the errno comes with it.
            Ok(Err((error, Some(code)))) => Err(RewindError::Io(sys::coded(code, error))),
            Ok(Err((error, None))) => Err(RewindError::Failed(error)),
            Err(e) => Err(failed("talking to it", e)),
        }
    }
}

/// The daemon's answers to the helper's questions, over its stdin and stdout.
struct Asker<'a> {
    from: RefCell<&'a mut dyn BufRead>,
    to: RefCell<&'a mut dyn Write>,
    /// Targets done or left so far.
    steps: Cell<u64>,
    /// When the helper last said something.
    said: Cell<Instant>,
}

impl Meanwhile for Asker<'_> {
    fn step(&self) {
        self.steps.set(self.steps.get() + 1);
        if self.said.get().elapsed() >= PROGRESS_EVERY {
            self.said.set(Instant::now());
            let steps = self.steps.get();
            // A progress line that cannot be sent is the daemon gone: the next question says so.
            let _ = send(&mut **self.to.borrow_mut(), &Message::Progress { steps });
        }
    }

    fn changed(&self, path: &[u8], beneath: bool) -> bool {
        let ask = || -> io::Result<bool> {
            let mut to = self.to.borrow_mut();
            send(
                &mut **to,
                &Message::Changed {
                    path: path.to_vec(),
                    beneath,
                },
            )?;
            let mut line = String::new();
            self.from.borrow_mut().read_line(&mut line)?;
            Ok(line.trim() == "true")
        };
        // Not knowing, the step's failure stays a failure.
        ask().unwrap_or(false)
    }
}

fn send(to: &mut dyn Write, m: &Message) -> io::Result<()> {
    let mut line = serde_json::to_vec(m).map_err(io::Error::other)?;
    line.push(b'\n');
    to.write_all(&line)?;
    to.flush()
}

/// `rewindfs __apply-rewind`: the helper's side (see the module doc).
///
/// # Errors
/// The job cannot be read or the answer written; a failure to apply is answered instead.
pub fn run_helper() -> io::Result<()> {
    sys::close_fds_from(3)?;
    sys::die_with_parent()?;
    let stdin = io::stdin();
    let mut from = stdin.lock();
    let mut out = io::stdout().lock();
    let mut line = String::new();
    from.read_line(&mut line)?;
    let job: Job = serde_json::from_str(&line).map_err(io::Error::other)?;
    let result = apply_job(&job, &mut from, &mut out);
    let m = match result {
        Ok(a) => Message::Done {
            skipped: a.skipped.into_iter().collect(),
            untouched: a.untouched.into_iter().collect(),
            meanwhile: a.meanwhile.into_vec(),
            partial: a.partial.into_vec(),
            failed: a.failed,
            held: a.held,
        },
        Err(e) => Message::Failed {
            error: e.to_string(),
            errno: sys::known_errno(&e),
        },
    };
    send(&mut out, &m)
}

fn apply_job(job: &Job, from: &mut dyn BufRead, to: &mut dyn Write) -> io::Result<Applied> {
    let mount = sys::open_dir_path(&job.mount)
        .map_err(|e| sys::ctx(e, format!("opening the mount {}", job.mount.display())))?;
    let dev = sys::fstat(mount.as_fd())
        .map(|st| (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev)))
        .ok();
    if !sys::is_fuse_root(mount.as_fd()) || dev != Some(job.dev) {
        return Err(io::Error::other(format!(
            "{} is not the root of this rewindfs mount (device {}:{}, found {}): something was \
             mounted over it; nothing was changed",
            job.mount.display(),
            job.dev.0,
            job.dev.1,
            dev.map_or("none".into(), |(a, b)| format!("{a}:{b}")),
        )));
    }
    let blobs = Blobs::at(&job.blobs);
    let asker = Asker {
        from: RefCell::new(from),
        to: RefCell::new(to),
        steps: Cell::new(0),
        said: Cell::new(Instant::now()),
    };
    let tree = Tree::mount(mount.as_fd(), &asker);
    let planned: Vec<&Planned> = job.planned.iter().collect();
    live::apply(tree, &blobs, &planned, &job.id)
}
