//! The commands of the binary, one topic per file: `workspace.rs` (mount, exec, setup, gc,
//! fsck, the hook), `history.rs` (log, status, rewind, undo, redo), `travel.rs` (show, ls,
//! diff, fork, export, import, push, pull), `print.rs` (replies for people). Each function is
//! one command: it sends typed requests and prints the typed replies (`--json`: the socket's
//! answer as is). Shared here: reaching the daemon, and paths given on the command line.

pub(crate) mod history;
pub(crate) mod print;
pub(crate) mod progress;
pub(crate) mod travel;
pub(crate) mod workspace;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rewindfs::cli::SocketArgs;
use rewindfs::control::client::{Client, find_socket};
use rewindfs::control::cmd::Status;
use serde::Serialize;

pub(crate) fn connect(s: &SocketArgs) -> anyhow::Result<Client> {
    let path = find_socket(s.socket.as_deref())?;
    Ok(Client::connect(&path)?)
}

/// A path given on the command line, made relative to the workspace root.
pub(crate) fn workspace_rel(client: &mut Client, p: &Path) -> anyhow::Result<String> {
    let ws = client.call(&Status {})?.workspace;
    let abs = std::path::absolute(p)?;
    let mut norm = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                norm.pop();
            }
            std::path::Component::CurDir => {}
            c => norm.push(c),
        }
    }
    let rel = norm.strip_prefix(&ws).with_context(|| {
        format!(
            "{} is not inside the workspace {}",
            p.display(),
            ws.display()
        )
    })?;
    // Its wire form: a name that is not UTF-8 goes quoted, exactly (`wire_path.rs`).
    Ok(rewindfs::wire_path::encode(rel.as_os_str().as_bytes()))
}

/// Like `workspace_rel`, but globs are taken as workspace-relative as they are.
pub(crate) fn workspace_rel_glob(
    client: &mut Client,
    p: impl AsRef<std::ffi::OsStr>,
) -> anyhow::Result<String> {
    match p.as_ref().to_str() {
        Some(g) if g.contains(['*', '?', '[', '{']) => Ok(g.trim_start_matches("./").to_string()),
        _ => workspace_rel(client, Path::new(p.as_ref())),
    }
}

/// `--json` prints the socket's answer as is; otherwise `lines` prints it for people.
pub(crate) fn print_json_or<R: Serialize>(
    json: bool,
    r: &R,
    lines: impl FnOnce(&R),
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        lines(r);
    }
    Ok(())
}
