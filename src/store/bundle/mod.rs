//! History bundles: the store's rows for a run of checkpoints and every blob they need, in one
//! self-checking file (`rewindfs export` / `import`; the format is `schema/bundle.md`).
//!
//! ```text
//! "RWFSBNDL" u32le(1)                      header, 12 bytes
//! frame*:  kind:u8  len:u64le  hash:[u8;32]  payload[len]
//!          'B' a blob: payload = its content, hash = its BLAKE3 (its name); each blob once
//!          'R' rows: JSON lines {"t": table, "r": {column: value}}, hash = BLAKE3(payload)
//!          'M' the manifest (JSON), the last frame: what the bundle holds, frames counted
//! ```
//!
//! Invariants:
//! - every frame's payload is checked against its hash before anything it holds is used; a
//!   bundle that ends before its manifest, a frame of an unknown kind, a hash or count that
//!   does not match, is refused with the byte offset of the frame at fault;
//! - an import is all or nothing: blobs are verified as they are stored, rows are inserted in
//!   one transaction only once the whole bundle has been read and checked, and on any failure
//!   the blobs it stored that no row names are removed again;
//! - a bundle whose history begins with checkpoints the store has (an earlier push of the
//!   same session) adds only the others, after them; one that diverges is refused;
//! - rows keep their meaning, not their ids: checkpoints get new `seq`s, captures and moves
//!   new ids handed out after every id in use (the journal's too), in the same order, so
//!   imported history lies after what the store had and before anything recorded later;
//! - table and column names in a bundle are checked against the store's own schema before
//!   they reach SQL.
//!
//! Files: `write.rs` (writing a bundle: frames, and the rows an export takes), `read.rs`
//! (reading one back: frames checked as read, `scan`, `assemble`, staging an import's blobs),
//! `import.rs` (what an import adds, and adding it in one transaction).

mod check;
#[cfg(test)]
mod fuzz;
mod import;
mod read;
mod sign;
mod staging;
mod write;

pub use self::import::{ImportPlan, ImportReport};
pub use self::read::{FrameAt, Staged, assemble, scan};
pub use self::sign::{SIGNATURE, Trust, generate_key, load_key, public_line, sign_file};
pub use self::write::BundleWriter;
/// A signing key (Ed25519), as [`load_key`] reads it.
pub use ed25519_dalek::SigningKey;

use std::io;

use rusqlite::types::{Value as SqlValue, ValueRef};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::StoreError;

/// The first bytes of a bundle.
pub const MAGIC: &[u8; 8] = b"RWFSBNDL";
/// The format version this build writes and reads.
pub const FORMAT: u32 = 1;
/// Frame kinds.
pub const BLOB: u8 = b'B';
pub const ROWS: u8 = b'R';
pub const MANIFEST: u8 = b'M';
/// Rows per `R` frame (bounds a frame's size).
const ROWS_PER_FRAME: usize = 20_000;

/// Why a bundle cannot be read or imported.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The bundle is damaged or cut short.
    #[error("bundle damaged at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },
    /// A row of the bundle is not one rewindfs writes (a path outside the workspace, a size
    /// or id out of range): the bundle is refused whole.
    #[error(
        "bundle refused: row {index} of the rows frame at byte {offset} ({table}): {what}; \
         nothing was imported (a rewindfs export never holds such a row: the bundle was made or \
         altered by someone else)"
    )]
    Entry {
        offset: u64,
        index: usize,
        table: String,
        what: String,
    },
    /// The bundle is sound but cannot go into this store (the message says why).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// I/O failed (the cause in the message only, not also a `source`).
    #[error("bundle: {0}")]
    Io(io::Error),
}

impl From<io::Error> for BundleError {
    fn from(e: io::Error) -> Self {
        BundleError::Io(e)
    }
}

impl From<rusqlite::Error> for BundleError {
    fn from(e: rusqlite::Error) -> Self {
        BundleError::Store(e.into())
    }
}

/// One row of a table, as JSON: integers and text as themselves, a BLOB as `{"$b": base64}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The table.
    pub t: String,
    /// Column → value.
    pub r: Map<String, Value>,
}

impl Row {
    /// An integer column (`None`: NULL or absent).
    pub fn int(&self, col: &str) -> Option<i64> {
        self.r.get(col).and_then(Value::as_i64)
    }

    /// A text column.
    pub fn text(&self, col: &str) -> Option<&str> {
        self.r.get(col).and_then(Value::as_str)
    }

    /// A BLOB column (`{"$b": base64}`), or text as its bytes.
    pub fn bytes(&self, col: &str) -> Option<Vec<u8>> {
        match self.r.get(col)? {
            Value::Object(m) => super::base64::decode(m.get("$b")?.as_str()?).ok(),
            Value::String(s) => Some(s.as_bytes().to_vec()),
            _ => None,
        }
    }
}

/// A BLOB as a bundle holds it.
pub fn blob_value(b: &[u8]) -> Value {
    let mut m = Map::new();
    m.insert("$b".into(), Value::String(super::base64::encode(b)));
    Value::Object(m)
}

fn to_json(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => Value::from(f),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => blob_value(b),
    }
}

fn to_sql(v: &Value) -> std::result::Result<SqlValue, String> {
    Ok(match v {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(*b as i64),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Integer(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        Value::Object(m) => match m.get("$b").and_then(Value::as_str) {
            Some(b) => SqlValue::Blob(super::base64::decode(b).map_err(|e| e.to_string())?),
            None => return Err("an object that is not a BLOB".into()),
        },
        Value::Array(_) => return Err("an array".into()),
    })
}

/// The manifest: what a bundle holds (its last frame).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The schema version its rows follow: that of the last migration that changed a table
    /// (`migrate::ROWS_SCHEMA_VERSION`).
    pub schema: i64,
    /// A uuid of this export, also the uuid of the checkpoint that holds the tree's state at
    /// export (see `rewind/carry.rs`).
    pub export_id: String,
    /// Unix ms.
    pub created_at: i64,
    /// Where it came from.
    pub workspace: String,
    pub store: String,
    /// What was asked for.
    pub session: Option<String>,
    pub since: Option<String>,
    /// Every checkpoint in the bundle, in order (the export's own last).
    pub checkpoints: Vec<String>,
    /// Blob frames and their bytes.
    pub blobs: u64,
    pub blob_bytes: u64,
    /// Rows, and frames before the manifest.
    pub rows: u64,
    pub frames: u64,
}

pub(super) fn decode_hash(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

pub(super) fn encode_hash(raw: &[u8; 32]) -> String {
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CheckpointKind, Store};

    fn bundle(rows: &[Row], blobs: &[&[u8]]) -> Vec<u8> {
        let mut w = BundleWriter::new(Vec::new()).unwrap();
        for b in blobs {
            let h = crate::store::blobs::content_hash(b);
            w.blob(&h, b.len() as u64, &mut &b[..]).unwrap();
        }
        let cp = "88888888-8888-4888-8888-888888888888";
        let mut c = Map::new();
        c.insert("seq".into(), Value::from(1));
        c.insert("uuid".into(), Value::from(cp));
        c.insert("kind".into(), Value::from("mount"));
        c.insert("began_at".into(), Value::from(1));
        w.row(&Row {
            t: "checkpoints".into(),
            r: c,
        })
        .unwrap();
        for r in rows {
            w.row(r).unwrap();
        }
        w.finish(Manifest {
            checkpoints: vec![cp.into()],
            ..Manifest::default()
        })
        .unwrap()
        .0
    }

    /// A bundle of every checkpoint of `s`, as an export writes one (no blobs).
    fn bundle_of(s: &Store) -> Vec<u8> {
        let rows = s.export_rows(0).unwrap();
        let checkpoints = rows
            .iter()
            .filter(|r| r.t == "checkpoints")
            .filter_map(|r| r.text("uuid").map(str::to_string))
            .collect();
        let mut w = BundleWriter::new(Vec::new()).unwrap();
        for r in &rows {
            w.row(r).unwrap();
        }
        w.finish(Manifest {
            export_id: uuid::Uuid::new_v4().to_string(),
            checkpoints,
            ..Manifest::default()
        })
        .unwrap()
        .0
    }

    fn import(s: &Store, b: &[u8]) -> ImportReport {
        let staged = s.stage_bundle(b, None, &Trust::default()).unwrap();
        s.import_staged(&staged, None).unwrap()
    }

    /// A prompt's checkpoint exported before its message uuid was known, then again after: the
    /// second import binds it here too and adds only what is new; an older bundle after a newer
    /// one finds everything here.
    #[test]
    fn a_prompt_bound_after_an_earlier_export_meets_its_import_under_one_uuid() {
        let (da, db, dc) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let a = Store::open(da.path(), false).unwrap();
        let (p, u, v) = ("prompt-1", "message-1", "message-2");
        let prompt = crate::store::Prompt {
            prompt_id: p.into(),
            text: Some("make it so".into()),
            transcript: None,
        };
        a.begin_checkpoint_for(p, Some("s"), CheckpointKind::Message, Some(&prompt))
            .unwrap();
        let early = bundle_of(&a);
        a.bind_prompt(p, u).unwrap();
        a.begin_checkpoint(v, Some("s"), CheckpointKind::Message)
            .unwrap();
        let late = bundle_of(&a);

        let b = Store::open(db.path(), false).unwrap();
        assert_eq!(import(&b, &early).checkpoints, 1);
        assert!(!b.checkpoint(p).unwrap().unwrap().bound);
        let r = import(&b, &late);
        assert_eq!((r.already, r.checkpoints), (false, 1));
        let c = b.checkpoint(u).unwrap().unwrap();
        assert_eq!((c.bound, c.prompt.as_deref()), (true, Some("make it so")));
        assert!(b.checkpoint(v).unwrap().is_some());

        let c = Store::open(dc.path(), false).unwrap();
        assert_eq!(import(&c, &late).checkpoints, 2);
        assert!(import(&c, &early).already);
    }

    #[test]
    fn a_damaged_or_cut_bundle_is_refused_at_the_frame_at_fault_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let good = bundle(&[], &[b"hello blob", b"another"]);
        let staged = s.stage_bundle(&good[..], None, &Trust::default()).unwrap();
        assert_eq!(staged.blobs, 2);
        staged.discard(&s, None).unwrap();
        assert!(!s.blobs.exists(&blake3::hash(b"another").to_hex()));
        // A byte flipped in the second blob's payload: refused at that frame's offset.
        let second = 12 + 41 + 10;
        assert_eq!(&good[second..second + 1], &[BLOB]);
        let mut bad = good.clone();
        bad[second + 41 + 2] ^= 1;
        match s.stage_bundle(&bad[..], None, &Trust::default()) {
            Err(BundleError::Corrupt { offset, what }) => {
                assert_eq!(offset, second as u64, "{what}");
                assert!(what.contains("does not match"), "{what}");
            }
            r => panic!("{r:?}"),
        }
        // Cut short anywhere: refused, naming where.
        for cut in [5, 12, 30, good.len() - 1] {
            let e = s
                .stage_bundle(&good[..cut], None, &Trust::default())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("truncated") || e.contains("too short"),
                "{cut}: {e}"
            );
        }
        // No blob of a refused bundle stays.
        let h = blake3::hash(b"hello blob").to_hex().to_string();
        assert!(!s.blobs.exists(&h));
    }
}
