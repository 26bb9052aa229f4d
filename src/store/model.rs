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
//!   (`External`, `Other`) instead of failing the whole query;
//! - the serde forms of [`Kind`], [`Scope`], [`BlobRef`], [`Xattrs`] and [`PlanTarget`] are
//!   the rewind plans journalled in `rewinds.plan` (recovery and gc read them back): they never
//!   change;
//! - [`Xattrs::encode`] is the form of `captures.xattrs` and of the journal's capture records:
//!   it never changes either.

use crate::wspath::{Node, WsPath};
use serde::{Deserialize, Serialize};

/// Who made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Actor {
    Tool,
    Shell,
    #[default]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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

/// Where a pre-image's bytes are: a content blob named by its BLAKE3 hash, or an adopted
/// file not yet hashed, named by its key under `blobs/pending/` (see `blobs/adopt.rs`). Stored
/// (in rows, the journal, a plan) as one string: the hash, or the key, which begins
/// `pending/` — read back by [`BlobRef::from_stored`], the one place that tells them apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlobRef {
    /// Content by its BLAKE3 hash (hex).
    Hash(String),
    /// An adopted file not yet hashed, by its key (`pending/…`).
    Pending(String),
}

impl BlobRef {
    /// The blob whose hash (hex) is `h`.
    pub fn hash(h: impl Into<String>) -> BlobRef {
        BlobRef::Hash(h.into())
    }
    /// A reference as stored in a row or the journal (a hash or a `pending/…` key).
    pub fn from_stored(s: impl Into<String>) -> BlobRef {
        let s = s.into();
        if super::blobs::is_pending(&s) {
            BlobRef::Pending(s)
        } else {
            BlobRef::Hash(s)
        }
    }
    /// An adopted file not yet hashed.
    pub fn is_pending(&self) -> bool {
        matches!(self, BlobRef::Pending(_))
    }
    /// The hash, if the content has one yet.
    pub fn content_hash(&self) -> Option<&str> {
        match self {
            BlobRef::Hash(h) => Some(h),
            BlobRef::Pending(_) => None,
        }
    }
    /// The hash, or the pending key, as stored (and as the blob store names the file).
    pub fn as_str(&self) -> &str {
        match self {
            BlobRef::Hash(s) | BlobRef::Pending(s) => s,
        }
    }
}

impl Serialize for BlobRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for BlobRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(BlobRef::from_stored)
    }
}

impl std::fmt::Display for BlobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The saved state of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreImage {
    pub kind: Kind,
    pub blob: Option<BlobRef>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub target: Option<Vec<u8>>,
    /// Only the overwritten bytes were saved (in `capture_ranges`); see schema 003.
    pub partial: bool,
    /// The extended attributes; `None`: not recorded (an absent path, a symlink, or a capture
    /// taken by a rewindfs older than schema `*_xattrs.sql`), so a rewind leaves them alone.
    pub xattrs: Option<Xattrs>,
    /// The pre-image came from elsewhere (a checkpoint an import or pull added: schema
    /// `009_imported.sql`): someone else's word, applied without privileges unless trusted
    /// (`rewind/privileges.rs`). Never set for this daemon's own captures.
    pub imported: bool,
}

impl PreImage {
    pub fn absent() -> PreImage {
        PreImage {
            imported: false,
            kind: Kind::Absent,
            blob: None,
            mode: 0,
            uid: 0,
            gid: 0,
            size: 0,
            target: None,
            partial: false,
            xattrs: None,
        }
    }
}

/// The extended attributes of a file, directory or special file: (name, value) pairs, sorted
/// by name, names unique. (Symlinks have none here: the mount neither lists nor sets them.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Xattrs(Vec<(Vec<u8>, Vec<u8>)>);

impl Xattrs {
    /// The attributes given, in name order (a repeated name keeps its last value).
    pub fn new(mut pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Xattrs {
        pairs.reverse();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|a, b| a.0 == b.0);
        Xattrs(pairs)
    }

    /// (name, value), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.0.iter().map(|(n, v)| (n.as_slice(), v.as_slice()))
    }

    /// The value of `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.0
            .binary_search_by(|(n, _)| n.as_slice().cmp(name))
            .ok()
            .map(|i| self.0[i].1.as_slice())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The stored form (`captures.xattrs`, the journal): for each attribute, in name order, its
    /// name and its value, each as a `u32` LE length and the bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, v) in &self.0 {
            for b in [n, v] {
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
        out
    }

    /// Reads [`Xattrs::encode`]'s form; `None` if it is cut short.
    pub fn decode(mut b: &[u8]) -> Option<Xattrs> {
        let mut take = || -> Option<Vec<u8>> {
            let n = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
            let v = b.get(4..4 + n)?.to_vec();
            b = &b[4 + n..];
            Some(v)
        };
        let mut pairs = Vec::new();
        while let Some(name) = take() {
            pairs.push((name, take()?));
        }
        // Whatever is left was not a whole length: a damaged value.
        b.is_empty().then(|| Xattrs::new(pairs))
    }
}

/// In a plan: a list of `[name, value]`, each a string when it is UTF-8, else an array of
/// bytes (as paths are).
impl Serialize for Xattrs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let pairs: Vec<Pair<'_>> = self.0.iter().map(|(n, v)| Pair(n, v)).collect();
        pairs.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Xattrs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Xattrs, D::Error> {
        let pairs: Vec<OwnedPair> = Vec::deserialize(d)?;
        Ok(Xattrs::new(pairs.into_iter().map(|p| (p.0, p.1)).collect()))
    }
}

#[derive(Serialize)]
struct Pair<'a>(
    #[serde(with = "path_bytes")] &'a Vec<u8>,
    #[serde(with = "path_bytes")] &'a Vec<u8>,
);

#[derive(Deserialize)]
struct OwnedPair(
    #[serde(with = "path_bytes")] Vec<u8>,
    #[serde(with = "path_bytes")] Vec<u8>,
);

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
    Blob(BlobRef),
    Inline(Vec<u8>),
}

/// A capture row.
#[derive(Debug, Clone)]
pub struct Capture {
    pub id: i64,
    pub checkpoint: i64,
    pub path: Node,
    pub purpose: Purpose,
    pub pre: PreImage,
    pub actor: Actor,
    pub actors: u8,
    pub op: Op,
}

/// Why a capture was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The first change to the path in its checkpoint: the state at the checkpoint's start.
    Checkpoint,
    /// A tool's first change to the path in the session: the state just before it (`tracked`).
    Tool,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Checkpoint => "checkpoint",
            Purpose::Tool => "tool",
        }
    }
    /// Total: an unknown value reads as `Checkpoint`.
    pub fn parse(s: &str) -> Purpose {
        if s == "tool" {
            Purpose::Tool
        } else {
            Purpose::Checkpoint
        }
    }
}

/// What kind of change happened (or is about to). On the wire, [`Op::as_str`]'s names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    #[default]
    Write,
    Truncate,
    Create,
    Mkdir,
    Symlink,
    Link,
    Unlink,
    Rmdir,
    Rename,
    /// `RENAME_EXCHANGE`: both paths swap.
    Exchange,
    Chmod,
    Chown,
    Utimes,
    Setxattr,
    Fallocate,
}

impl Op {
    const ALL: [Op; 15] = [
        Op::Write,
        Op::Truncate,
        Op::Create,
        Op::Mkdir,
        Op::Symlink,
        Op::Link,
        Op::Unlink,
        Op::Rmdir,
        Op::Rename,
        Op::Exchange,
        Op::Chmod,
        Op::Chown,
        Op::Utimes,
        Op::Setxattr,
        Op::Fallocate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Truncate => "truncate",
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Symlink => "symlink",
            Op::Link => "link",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Rename => "rename",
            Op::Exchange => "exchange",
            Op::Chmod => "chmod",
            Op::Chown => "chown",
            Op::Utimes => "utimes",
            Op::Setxattr => "setxattr",
            Op::Fallocate => "fallocate",
        }
    }

    /// Total: an unknown value (a newer build's) reads as `Write`, a change to content.
    pub fn parse(s: &str) -> Op {
        Op::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .unwrap_or(Op::Write)
    }
}

/// What began a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointKind {
    /// The mount itself: the state at mount time.
    Mount,
    /// A user message (`begin_message`).
    Message,
    /// A rewind or undo: what it overwrote, so it can be undone.
    Rewind,
}

impl CheckpointKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Mount => "mount",
            CheckpointKind::Message => "message",
            CheckpointKind::Rewind => "rewind",
        }
    }
    /// Total: an unknown value reads as `Message`.
    pub fn parse(s: &str) -> CheckpointKind {
        match s {
            "mount" => CheckpointKind::Mount,
            "rewind" => CheckpointKind::Rewind,
            _ => CheckpointKind::Message,
        }
    }
}

/// Which paths a rewind restores (docs/design.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Files a tool (Write/Edit/NotebookEdit) changed in the session: the SDK's behaviour.
    Tool,
    /// Everything the agent did (tool and shell).
    Agent,
    /// Everything changed through the mount.
    All,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "tool" => Some(Scope::Tool),
            "agent" => Some(Scope::Agent),
            "all" => Some(Scope::All),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Tool => "tool",
            Scope::Agent => "agent",
            Scope::All => "all",
        }
    }
}

/// What a rewind row restored (`rewinds.scope`): a rewind of a scope, or an undo or redo of
/// an earlier rewind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindScope {
    Scope(Scope),
    Undo,
    Redo,
}

impl RewindScope {
    pub fn as_str(self) -> &'static str {
        match self {
            RewindScope::Scope(s) => s.as_str(),
            RewindScope::Undo => "undo",
            RewindScope::Redo => "redo",
        }
    }
    /// Total: an unknown value reads as a rewind of scope `all`.
    pub fn parse(s: &str) -> RewindScope {
        match s {
            "undo" => RewindScope::Undo,
            "redo" => RewindScope::Redo,
            s => RewindScope::Scope(Scope::parse(s).unwrap_or(Scope::All)),
        }
    }
}

/// Where a rewind is in its life (`rewinds.state`). On the wire, [`RewindState::as_str`]'s
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RewindState {
    /// Its plan is journalled and being applied (or a crash interrupted it: the next mount
    /// finishes it). Its plan's blobs must stay.
    Applying,
    /// Applied.
    Done,
    /// Applied, then undone.
    Undone,
}

impl RewindState {
    pub fn as_str(self) -> &'static str {
        match self {
            RewindState::Applying => "applying",
            RewindState::Done => "done",
            RewindState::Undone => "undone",
        }
    }
    /// Total: an unknown value reads as `Applying` (its plan's blobs are kept).
    pub fn parse(s: &str) -> RewindState {
        match s {
            "done" => RewindState::Done,
            "undone" => RewindState::Undone,
            _ => RewindState::Applying,
        }
    }
}

/// One path of a rewind's plan, with the state it is given. A plan is journalled in
/// `rewinds.plan` as a JSON array of these before it is applied: recovery applies it again
/// after a crash, and gc keeps every blob it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanTarget {
    /// The path restored: inside the workspace, never the workspace itself (journalled as a
    /// string when it is UTF-8, else as bytes).
    pub path: WsPath,
    /// What it should be: absent, file, dir, symlink or other.
    pub kind: Kind,
    /// A file's content; always set for a file (the empty blob for an empty one).
    pub blob: Option<BlobRef>,
    /// `st_mode`, type bits included (`mknod` needs them; a chmod takes the low 12 bits).
    pub mode: u32,
    /// Owner, restored only when the daemon runs as root.
    pub uid: u32,
    /// Group, restored only when the daemon runs as root.
    pub gid: u32,
    /// A symlink's target.
    pub target: Option<Vec<u8>>,
    /// A special file's device number.
    pub rdev: u64,
    /// How the state is put in place. Plans journalled before this field existed read as
    /// [`Apply::Replace`], which is how they were applied.
    #[serde(default, skip_serializing_if = "Apply::is_replace")]
    pub apply: Apply,
    /// The extended attributes it is given exactly (absent: left as they are; plans
    /// journalled before schema `*_xattrs.sql` have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xattrs: Option<Xattrs>,
}

/// How a plan's target is put in place (`rewinds.plan`, field `apply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Apply {
    /// Written beside the path and exchanged with it (atomic per path; a new inode): scopes
    /// `agent` and `all`, undo. Applied in passes (removals, directories, entries, modes).
    #[default]
    Replace,
    /// As the SDK's own rewind does it (scope `tool`): a file rewritten in place (same inode:
    /// truncated, written, its mode set), or unlinked when its target is absent; one path after
    /// the other in plan order, each skipped if it is no longer a regular file with one link
    /// under real directories. Not atomic: recovery writes it again.
    InPlace,
}

impl Apply {
    /// The default, left out of the journalled JSON.
    pub fn is_replace(&self) -> bool {
        *self == Apply::Replace
    }
}

impl PlanTarget {
    /// Reads a journalled plan: its targets, and apart the paths of those whose path is not a
    /// path inside the workspace. rewindfs checks every target before it journals a plan, so
    /// such a target means the journal was altered; it is left out (and said) rather than
    /// applied, or allowed to stop every later mount.
    ///
    /// # Errors
    /// The plan is not a JSON array of targets (it was written by another build, or damaged).
    pub fn parse_plan(plan: &str) -> serde_json::Result<(Vec<PlanTarget>, Vec<Vec<u8>>)> {
        let raw: Vec<serde_json::Value> = serde_json::from_str(plan)?;
        let (mut targets, mut bad) = (Vec::with_capacity(raw.len()), Vec::new());
        for v in raw {
            let path = v
                .get("path")
                .cloned()
                .map(|p| serde_json::from_value::<PathBytes>(p).map(|b| b.0));
            match path {
                Some(Ok(p)) if !WsPath::is_valid(&p) => bad.push(p),
                _ => targets.push(serde_json::from_value(v)?),
            }
        }
        Ok((targets, bad))
    }
}

/// A checkpoint row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: i64,
    pub uuid: String,
    pub session_id: Option<String>,
    pub kind: CheckpointKind,
    pub began_at: i64,
    /// The prompt that began it, when a hook began it (see [`Prompt`]).
    pub prompt: Option<String>,
    /// Whether `uuid` is the message's uuid (false: still the hooks' prompt_id).
    pub bound: bool,
}

/// A prompt as the plain CLI's UserPromptSubmit hook reports it: its checkpoint begins under
/// `prompt_id` and takes the message uuid once the transcript shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The hooks' `prompt_id` (also the transcript entry's `promptId`).
    pub prompt_id: String,
    /// What the user typed.
    pub text: Option<String>,
    /// The session transcript (JSONL) that will show the prompt's entry.
    pub transcript: Option<String>,
}

/// How a history came here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OriginKind {
    /// `rewindfs fork`: the tree was written from another workspace's checkpoint.
    Fork,
    /// `rewindfs import`: the checkpoints came in a bundle.
    Import,
}

impl OriginKind {
    /// The string stored in `origins.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            OriginKind::Fork => "fork",
            OriginKind::Import => "import",
        }
    }

    /// Total: an unknown value reads as `Fork` (a history written from another workspace).
    pub fn parse(s: &str) -> OriginKind {
        match s {
            "import" => OriginKind::Import,
            _ => OriginKind::Fork,
        }
    }
}

/// Where a checkpoint's history came from (an `origins` row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub kind: OriginKind,
    /// The parent workspace (absolute path).
    pub workspace: String,
    /// The parent's store directory.
    pub store: Option<String>,
    /// The parent checkpoint (for a fork: the state its tree was written from).
    pub uuid: String,
    /// That checkpoint's session.
    pub session_id: Option<String>,
    /// Unix ms.
    pub at: i64,
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
    pub src: WsPath,
    pub dst: WsPath,
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
    pub op: Op,
    pub path: Node,
    pub path2: Option<WsPath>,
    pub actor: Actor,
    pub pid: u32,
    pub process: String,
    pub tool_use_id: Option<String>,
    /// The session of the actor that made it (`None`: an external actor).
    pub session: Option<String>,
}

/// A file a tool changed in a session.
#[derive(Debug, Clone)]
pub struct Tracked {
    pub path: WsPath,
    pub checkpoint: i64,
    pub capture: Option<i64>,
}

/// A rewind journal row.
#[derive(Debug, Clone)]
pub struct RewindRow {
    pub id: String,
    pub checkpoint: i64,
    pub target: String,
    pub scope: RewindScope,
    pub state: RewindState,
    pub plan: String,
}

/// A user message id as checkpoints are stored under it: a UUID (any case) in its lowercase
/// hyphenated form; any other id as it is (the CLI takes any string as a message's uuid, and
/// the SDK answers an id it does not know with "No file checkpoint found").
pub fn normalize_message_id(s: &str) -> String {
    match uuid::Uuid::parse_str(s) {
        Ok(u) => u.hyphenated().to_string(),
        Err(_) => s.to_string(),
    }
}

/// Reads a user message id ([`normalize_message_id`]); refuses an empty one, one over 256
/// bytes, or one with control characters, naming it.
///
/// # Errors
/// The value is not such a string.
pub fn message_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() || s.len() > 256 || s.chars().any(char::is_control) {
        return Err(serde::de::Error::custom(format!(
            "not a message id (a UUID, or up to 256 printable characters): {s:?}"
        )));
    }
    Ok(normalize_message_id(&s))
}

/// Reads an agent session id: 1 to 256 printable characters (a session id is stored with every
/// change its actors make; the SDKs' are UUIDs).
///
/// # Errors
/// The value is not such a string.
pub fn session_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() || s.len() > 256 || s.chars().any(char::is_control) {
        return Err(serde::de::Error::custom(format!(
            "not a session id (1 to 256 printable characters): {:?}{}",
            s.chars().take(64).collect::<String>(),
            if s.chars().count() > 64 { "…" } else { "" }
        )));
    }
    Ok(s)
}

/// Reads an optional session id ([`session_id`]): `null` or absent is none.
///
/// # Errors
/// The value is neither null nor a session id.
pub fn optional_session_id<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct Id(#[serde(deserialize_with = "session_id")] String);
    Ok(Option::<Id>::deserialize(d)?.map(|Id(s)| s))
}

/// Reads an optional user message id ([`message_id`]): `null` or absent is none.
///
/// # Errors
/// The value is neither null nor a message id.
pub fn optional_message_id<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct Id(#[serde(deserialize_with = "message_id")] String);
    Ok(Option::<Id>::deserialize(d)?.map(|Id(s)| s))
}

/// A path's bytes as [`path_bytes`] reads them.
#[derive(Deserialize)]
struct PathBytes(#[serde(with = "path_bytes")] Vec<u8>);

/// A path's bytes in JSON: a string when they are UTF-8 (a third of the size of an array of
/// numbers), else the array; both are read.
mod path_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(p: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(p) {
            Ok(text) => s.serialize_str(text),
            Err(_) => p.serialize(s),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Ok(match Either::deserialize(d)? {
            Either::Text(t) => t.into_bytes(),
            Either::Bytes(b) => b,
        })
    }
}

#[cfg(test)]
mod tests;
