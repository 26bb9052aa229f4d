//! rewindfs: a FUSE filesystem that makes a coding agent's work on a project rewindable.
//!
//! # Layout
//! Layers, top to bottom; a layer never reaches up:
//! - `cli` → validated `Config`; `daemon` wires everything and owns the lifetime;
//! - `control` (Unix socket server) and `fs` (FUSE adapter over a passthrough core);
//! - `rewind` (plan and apply) and `capture` (pre-images before every change);
//! - `store` (SQLite and content-addressed blobs);
//! - `sys` (raw system calls, relative to a directory fd);
//! - beside them, `remote` (push and pull history to an S3-compatible store), used by the CLI.

pub mod capture;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod fs;
pub mod hook;
pub mod mounts;
pub mod remote;
pub mod rewind;
pub mod store;
pub mod sys;
