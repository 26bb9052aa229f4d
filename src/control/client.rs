//! A blocking client for the control socket (used by the CLI subcommands and `rewindfs hook`).

use std::io::{self, BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::cmd::Command;
use super::protocol::{CONTROL_REQUEST, RequestFrame, Response, ResponseFrame};

/// Errors talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No socket could be found.
    #[error("no rewindfs daemon found: {0}")]
    NotFound(String),
    /// No daemon answers at the socket.
    #[error(
        "no rewindfs daemon answers at {path} ({err}): is its directory mounted? `rewindfs mount \
         DIR` starts one; `rewindfs umount DIR` clears a mount whose daemon died"
    )]
    Connect { path: String, err: io::Error },
    /// Talking to the daemon failed.
    #[error("control socket {path}")]
    Io { path: String, source: io::Error },
    /// The daemon answered with an error (its exact message), and the errno of the system
    /// call that failed when that is what stopped the request.
    #[error("{0}")]
    Daemon(String, Option<i32>),
    /// The daemon's answer was not what the protocol says.
    #[error("unexpected response from the daemon: {0}")]
    Protocol(String),
}

/// Finds the socket: `explicit`, else `$REWINDFS_SOCKET`, else the mount containing the
/// current directory (see `schema/protocol.md`).
///
/// # Errors
/// [`ClientError::NotFound`] with what to do.
pub fn find_socket(explicit: Option<&Path>) -> Result<PathBuf, ClientError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("REWINDFS_SOCKET").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let cwd = std::env::current_dir()
        .map_err(|e| ClientError::NotFound(format!("current directory: {e}")))?;
    match crate::host::mounts::containing(&cwd) {
        Ok(Some(m)) => Ok(m.source.join(crate::store::layout::SOCKET)),
        _ => Err(ClientError::NotFound(format!(
            "{} is not inside a rewindfs mount; run this inside the workspace, or pass --socket / set REWINDFS_SOCKET",
            cwd.display()
        ))),
    }
}

/// One connection to the daemon.
pub struct Client {
    path: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next: u64,
}

impl Client {
    /// The socket this client is connected to.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Connects to the socket at `path`.
    ///
    /// # Errors
    /// [`ClientError::Io`] naming the socket.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let io_err = |source| ClientError::Io {
            path: path.display().to_string(),
            source,
        };
        let s = UnixStream::connect(path).map_err(|err| ClientError::Connect {
            path: path.display().to_string(),
            err,
        })?;
        s.set_read_timeout(Some(Duration::from_secs(600)))
            .map_err(io_err)?;
        let r = s.try_clone().map_err(io_err)?;
        Ok(Client {
            path: path.to_path_buf(),
            writer: s,
            reader: BufReader::new(r),
            next: 1,
        })
    }

    /// Bounds how long [`request`](Self::request) waits for an answer (default 600 s).
    ///
    /// # Errors
    /// The socket refuses the setting.
    pub fn set_timeout(&mut self, d: Duration) -> std::io::Result<()> {
        self.writer.set_read_timeout(Some(d))
    }

    /// Sends one request, given as its subtype and fields, and returns the success payload
    /// as it came (tests and raw use; the CLI sends typed requests with [`call`](Self::call)).
    ///
    /// # Errors
    /// [`ClientError::Daemon`] with the daemon's message for an `error` response.
    pub fn request(&mut self, subtype: &str, fields: Value) -> Result<Value, ClientError> {
        let id = format!("c{}", self.next);
        self.next += 1;
        let mut req = Map::new();
        req.insert("subtype".into(), json!(subtype));
        if let Value::Object(m) = fields {
            req.extend(m);
        }
        let line = RequestFrame {
            kind: CONTROL_REQUEST.into(),
            request_id: id,
            request: req,
        };
        let io_err = |source| ClientError::Io {
            path: self.path.display().to_string(),
            source,
        };
        let mut bytes =
            serde_json::to_vec(&line).map_err(|e| ClientError::Protocol(e.to_string()))?;
        bytes.push(b'\n');
        // If the daemon refused us it has already said why and hung up: read that first.
        let written = crate::sys::send_all(std::os::fd::AsFd::as_fd(&self.writer), &bytes);
        let mut resp = String::new();
        let n = self
            .reader
            .read_line(&mut resp)
            .map_err(|source| ClientError::Io {
                path: self.path.display().to_string(),
                source,
            })?;
        if n == 0 {
            written.map_err(io_err)?;
            return Err(ClientError::Protocol(
                "the daemon closed the connection".into(),
            ));
        }
        let frame: ResponseFrame = serde_json::from_str(&resp)
            .map_err(|e| ClientError::Protocol(format!("{e}: {resp}")))?;
        match frame.response {
            Response::Success { response, .. } => Ok(response),
            Response::Error { error, errno, .. } => Err(ClientError::Daemon(error, errno)),
        }
    }

    /// Sends a typed request and returns its typed reply.
    ///
    /// # Errors
    /// As [`request`](Self::request), and [`ClientError::Protocol`] for a reply of another
    /// shape.
    pub fn call<C: Command>(&mut self, cmd: &C) -> Result<C::Reply, ClientError> {
        let fields = serde_json::to_value(cmd).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let v = self.request(C::SUBTYPE, fields)?;
        serde_json::from_value(v.clone())
            .map_err(|e| ClientError::Protocol(format!("{} reply {v}: {e}", C::SUBTYPE)))
    }
}
