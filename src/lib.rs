//! rewindfs: a FUSE filesystem that makes a coding agent's work on a project rewindable.
//!
//! # Layout
//! Layers, top to bottom; a layer never reaches up:
//! - `cli` (clap) → `config` (the validated `MountConfig`); `daemon` wires everything and owns
//!   the lifetime; `client` is what the CLI does beside the daemon (the agents' hook command,
//!   `setup`, push and pull to a remote);
//! - `control` (Unix socket server) and `fs` (FUSE adapter over a passthrough core);
//! - `rewind` (the rewinder and the views of the past), `turns` (the session and turn
//!   bookkeeping) and `capture` (pre-images before every change);
//! - `store` (SQLite and content-addressed blobs);
//! - `host` (facts of this machine outside the mount: the mount table, processes from /proc,
//!   the agents' transcripts), used by the daemon and the client alike;
//! - `sys` (raw system calls, relative to a directory fd; /proc), `locks` (taking a lock, one
//!   way: a poisoned one fails closed), `faults` (test-only fault injection); `wspath` (the
//!   workspace path type, which only a path inside the workspace can be), `retention` (the
//!   store's limits, one type) and `units` (sizes and ages for people), used by every layer.
//!
//! The binary (`main.rs`) parses the command line and calls one function per command, in
//! `src/commands/` (a module of the binary, not of this library).

pub(crate) mod capture;
pub mod cli;
pub mod client;
pub mod config;
pub mod control;
pub mod daemon;
pub(crate) mod faults;
pub(crate) mod fs;
pub mod host;
pub(crate) mod locks;
pub mod retention;
pub mod rewind;
pub mod store;
pub mod sys;
pub mod timeline;
pub mod turns;
pub mod ui;
pub mod units;
pub mod wire_path;
pub mod wspath;
