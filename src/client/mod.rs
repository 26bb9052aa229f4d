//! What the CLI does beside the daemon, on the client's side: the agents' hook command
//! (`hook.rs`), setting an agent up to call it (`setup.rs`), and pushing and pulling history to
//! an S3-compatible store (`remote.rs`). The daemon never reaches in here.

pub mod codex_trust;
pub mod hook;
pub mod mcp;
pub mod remote;
pub mod setup;
pub mod setup_mcp;
