//! Facts of this machine outside the mount, read where they are kept: the mount table
//! (`mounts.rs`), the processes left underneath a mount (`procs.rs`, from /proc), and the agents'
//! session transcripts (`transcript.rs`). Used by the daemon and the client alike; reaches no
//! other layer but `sys`.

pub(crate) mod mounts;
pub mod procs;
pub(crate) mod transcript;
