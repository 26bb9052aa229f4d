//! The names of the files in a store directory (drawn in the module doc of `store`), in one
//! place for the daemon that creates them and the clients that find them.

/// The SQLite database.
pub const DB: &str = "rewindfs.db";
/// `flock`ed by the daemon: one daemon per store.
pub const LOCK: &str = "lock";
/// The daemon's pid.
pub const PID: &str = "daemon.pid";
/// The detached daemon's stdout and stderr.
pub const LOG: &str = "daemon.log";
/// The control socket.
pub const SOCKET: &str = "control.sock";
