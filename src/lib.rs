//! rewindfs: a FUSE filesystem that makes a coding agent's work on a project rewindable.
//!
//! # Layout
//! Layers, top to bottom; a layer never reaches up:
//! - `cli` (clap) → `config` (the validated `MountConfig`); `daemon` wires everything and owns
//!   the lifetime; `hook` is the Claude Code hook command;
//! - `control` (Unix socket server) and `fs` (FUSE adapter over a passthrough core);
//! - `rewind` (plan and apply) and `capture` (pre-images before every change);
//! - `store` (SQLite and content-addressed blobs);
//! - `sys` (raw system calls, relative to a directory fd; /proc), `locks` (taking a lock, one
//!   way: a poisoned one fails closed), `faults` (test-only fault injection); beside the layers, `mounts` (the mount table), `procs` (processes left
//!   underneath a mount, from /proc) and `remote` (push and pull history to an S3-compatible
//!   store), used by the CLI; `wspath` (the workspace path type, which only a path inside the
//!   workspace can be), used by every layer.
//!
//! The binary (`main.rs`) parses the command line and calls one function per command, in
//! `src/commands/` (a module of the binary, not of this library).

pub(crate) mod capture;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub(crate) mod faults;
pub(crate) mod fs;
pub mod hook;
pub(crate) mod locks;
pub(crate) mod mounts;
pub mod procs;
pub mod remote;
pub mod rewind;
pub mod setup;
pub mod store;
pub mod sys;
pub(crate) mod transcript;
pub mod turns;
pub mod wspath;
