//! The store's domain values: what one row of each table says, as Rust types.
//!
//! Every type here is plain data; the queries that read and write them live beside this file
//! (`checkpoints.rs`, `captures.rs`, `changes.rs`, `rewinds.rs`), and `schema/store.md` says
//! what each column means.
//!
//! Invariants:
//! - [`Actor::as_str`] and [`Kind::as_str`] are the strings stored in the database and the
//!   journal, and [`Actor::bit`] is the on-disk bit set of `captures.actors` (1 tool, 2 shell,
//!   4 external, 8 rewind): shipped stores hold them, so they never change;
//! - `parse` is total: a value this build does not know reads as the widest meaning
//!   (`External`, `Other`) instead of failing the whole query.

/// Who made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Actor {
    Tool,
    Shell,
    External,
    /// rewindfs itself, applying a rewind.
    Rewind,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Tool => "tool",
            Actor::Shell => "shell",
            Actor::External => "external",
            Actor::Rewind => "rewind",
        }
    }
    pub fn parse(s: &str) -> Actor {
        match s {
            "tool" => Actor::Tool,
            "shell" => Actor::Shell,
            "rewind" => Actor::Rewind,
            _ => Actor::External,
        }
    }
    pub fn bit(self) -> u8 {
        match self {
            Actor::Tool => 1,
            Actor::Shell => 2,
            Actor::External => 4,
            Actor::Rewind => 8,
        }
    }
}

/// What a path was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Absent,
    Other,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::Absent => "absent",
            Kind::Other => "other",
        }
    }
    pub fn parse(s: &str) -> Kind {
        match s {
            "file" => Kind::File,
            "dir" => Kind::Dir,
            "symlink" => Kind::Symlink,
            "absent" => Kind::Absent,
            _ => Kind::Other,
        }
    }
}

/// The saved state of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreImage {
    pub kind: Kind,
    pub blob: Option<String>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub target: Option<Vec<u8>>,
    /// Only the overwritten bytes were saved (in `capture_ranges`); see schema 003.
    pub partial: bool,
}

impl PreImage {
    pub fn absent() -> PreImage {
        PreImage {
            kind: Kind::Absent,
            blob: None,
            mode: 0,
            uid: 0,
            gid: 0,
            size: 0,
            target: None,
            partial: false,
        }
    }
}

/// Old bytes of a partial capture: `length` bytes at `offset`, in a blob or (small ranges)
/// held in the row itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub offset: u64,
    pub length: u64,
    pub content: RangeContent,
}

/// Where a range's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeContent {
    Blob(String),
    Inline(Vec<u8>),
}

/// A capture row.
#[derive(Debug, Clone)]
pub struct Capture {
    pub id: i64,
    pub checkpoint: i64,
    pub path: Vec<u8>,
    pub purpose: String,
    pub pre: PreImage,
    pub actor: Actor,
    pub actors: u8,
    pub op: String,
}

/// A checkpoint row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: i64,
    pub uuid: String,
    pub session_id: Option<String>,
    pub kind: String,
    pub began_at: i64,
}

/// A checkpoint with its counts, for `list_checkpoints`.
#[derive(Debug, Clone)]
pub struct CheckpointSummary {
    pub checkpoint: Checkpoint,
    pub paths_changed: i64,
    pub bytes_captured: i64,
}

/// A directory rename.
#[derive(Debug, Clone)]
pub struct Move {
    pub seq: i64,
    pub checkpoint: i64,
    pub src: Vec<u8>,
    pub dst: Vec<u8>,
    pub exchange: bool,
    /// Captures with an id up to this one happened before the rename.
    pub after_capture: i64,
    pub actor: Actor,
}

/// A change-log entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogEntry {
    pub seq: i64,
    pub at: i64,
    pub checkpoint: i64,
    pub op: String,
    pub path: Vec<u8>,
    pub path2: Option<Vec<u8>>,
    pub actor: String,
    pub pid: u32,
    pub process: String,
    pub tool_use_id: Option<String>,
}

/// A file a tool changed in a session.
#[derive(Debug, Clone)]
pub struct Tracked {
    pub path: Vec<u8>,
    pub checkpoint: i64,
    pub capture: Option<i64>,
}

/// A rewind journal row.
#[derive(Debug, Clone)]
pub struct RewindRow {
    pub id: String,
    pub checkpoint: i64,
    pub target: String,
    pub scope: String,
    pub state: String,
    pub plan: String,
}
