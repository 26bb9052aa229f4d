//! Checking one bundle row before anything uses it: a bundle is input from someone else
//! (docs/design.md §5, "History from elsewhere is untrusted").
//!
//! Every path a row names (a capture's, a rename's two sides, a tracked file's, the change
//! log's) must be a [`WsPath`]; ids, sizes and offsets are integers in range; blob names are
//! BLAKE3 hashes; a capture's kind agrees with the file type in its mode; a symlink target and
//! the extended attributes are well formed; text ids are bounded. A row that fails is refused
//! with what is wrong, and the caller refuses the whole bundle naming the row.
//!
//! What is *not* refused here, because honest history has it too: set-user/group-ID bits,
//! owners, `security.*`/`trusted.*` attributes, device nodes. Those are withheld when history
//! from elsewhere is applied (`rewind/privileges.rs`), unless the user trusts its source.

use serde_json::Value;

use super::Row;
use crate::store::Xattrs;
use crate::wspath::WsPath;

/// The longest text id a row may hold (a session id, a checkpoint's uuid, a prompt id): the
/// control protocol's bound for a message id.
pub const MAX_ID: usize = 256;
/// The longest range a capture may save in one row or blob (capture saves at most 16 MiB per
/// range; twice that leaves room without letting a row claim gigabytes).
const MAX_RANGE: i64 = 32 << 20;

/// The columns that hold bytes (a path, a symlink's target, the stored extended attributes, a
/// range's old bytes): a bundle may carry one as a string when it is UTF-8, and the import
/// stores it as the BLOB the store's own rows are, so that it reads back and compares as one.
pub(super) fn holds_bytes(table: &str, col: &str) -> bool {
    matches!(
        (table, col),
        ("captures", "path" | "target" | "xattrs")
            | ("capture_ranges", "data")
            | ("moves", "src" | "dst")
            | ("tracked", "path")
            | ("changes", "path" | "path2")
    )
}

/// What is wrong with a row (`Err`), in words that name the column and the value; `Ok(false)`
/// for a row of the workspace root itself (its own mode as a capture of kind `dir`, or a change
/// log entry of it), which older exports carry and which nothing here uses: the import leaves
/// it out, so no stored path is ever empty.
pub(super) fn check_row(row: &Row) -> Result<bool, String> {
    let root = |col: &str| row.bytes(col).is_some_and(|p| p.is_empty());
    match row.t.as_str() {
        "captures" if root("path") && row.text("kind") == Some("dir") => return Ok(false),
        "changes" if root("path") && row.r.get("path2").is_none_or(Value::is_null) => {
            return Ok(false);
        }
        _ => {}
    }
    match row.t.as_str() {
        "checkpoints" => {
            int(row, "seq", 1)?;
            id(row, "uuid", false)?;
            id(row, "session_id", true)?;
            id(row, "prompt_id", true)?;
            text_in(row, "kind", &["mount", "message", "rewind"])?;
        }
        "sessions" => id(row, "id", false)?,
        "blobs" => {
            hash(row, "hash", false)?;
            int(row, "size", 0)?;
        }
        "captures" => check_capture(row)?,
        "capture_ranges" => {
            int(row, "capture", 1)?;
            int(row, "offset", 0)?;
            let len = int(row, "length", 1)?;
            if len > MAX_RANGE {
                return Err(format!("a range of {len} bytes (at most {MAX_RANGE})"));
            }
            hash(row, "blob", true)?;
            if let Some(d) = row.r.get("data").filter(|v| !v.is_null()) {
                let got = row
                    .bytes("data")
                    .ok_or_else(|| format!("data is not bytes: {d}"))?;
                if got.len() as i64 != len {
                    return Err(format!(
                        "a range whose data is {} bytes long, not its length {len}",
                        got.len()
                    ));
                }
            }
        }
        "moves" => {
            int(row, "seq", 1)?;
            int(row, "checkpoint", 1)?;
            int(row, "after_capture", 0)?;
            let src = path(row, "src", false)?.unwrap_or_default();
            let dst = path(row, "dst", false)?.unwrap_or_default();
            if src == dst {
                return Err(format!("a rename of {src:?} onto itself"));
            }
        }
        "tracked" => {
            id(row, "session_id", false)?;
            path(row, "path", false)?;
            int(row, "checkpoint", 1)?;
        }
        "changes" => {
            int(row, "checkpoint", 1)?;
            path(row, "path", false)?;
            path(row, "path2", true)?;
            id(row, "session", true)?;
            id(row, "tool_use_id", true)?;
        }
        "origins" => {
            int(row, "checkpoint", 1)?;
            text_in(row, "kind", &["fork", "import"])?;
        }
        t => {
            return Err(format!(
                "a row of table {t:?}, which a bundle does not carry"
            ));
        }
    }
    Ok(true)
}

fn check_capture(row: &Row) -> Result<(), String> {
    int(row, "id", 1)?;
    int(row, "checkpoint", 1)?;
    path(row, "path", false)?;
    text_in(row, "purpose", &["checkpoint", "tool"])?;
    let kind = text_in(row, "kind", &["file", "dir", "symlink", "absent", "other"])?;
    let mode = int(row, "mode", 0)?;
    if mode > u32::MAX as i64 {
        return Err(format!("mode {mode} is not a file mode"));
    }
    let ty = mode as u32 & libc::S_IFMT;
    let agrees = match kind {
        "file" => ty == libc::S_IFREG,
        "dir" => ty == libc::S_IFDIR,
        "symlink" => ty == libc::S_IFLNK,
        "other" => matches!(
            ty,
            libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK
        ),
        _ => true,
    };
    if !agrees {
        return Err(format!("a capture of kind {kind} whose mode is {mode:o}"));
    }
    for c in ["uid", "gid"] {
        if int(row, c, 0)? > u32::MAX as i64 {
            return Err(format!("{c} is out of range"));
        }
    }
    int(row, "size", 0)?;
    hash(row, "blob", true)?;
    if kind == "symlink" {
        let t = row
            .bytes("target")
            .ok_or("a symlink capture without its target")?;
        if t.is_empty() || t.contains(&0) || t.len() > 4095 {
            return Err("a symlink target that is empty, has a NUL byte or is too long".into());
        }
    }
    if row.r.get("xattrs").is_some_and(|v| !v.is_null()) {
        let b = row.bytes("xattrs").ok_or("xattrs is not bytes")?;
        let x = Xattrs::decode(&b).ok_or("xattrs is not in the stored form")?;
        if x.iter().any(|(n, _)| n.is_empty() || n.contains(&0)) {
            return Err("an extended attribute with an empty name or a NUL byte".into());
        }
    }
    Ok(())
}

/// An integer column of at least `min` (NULL or absent refused).
fn int(row: &Row, col: &str, min: i64) -> Result<i64, String> {
    match row.r.get(col) {
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) if i >= min => Ok(i),
            _ => Err(format!("{col} is {n}, not an integer of at least {min}")),
        },
        None | Some(Value::Null) => Err(format!("{col} is missing")),
        Some(v) => Err(format!("{col} is {v}, not an integer")),
    }
}

/// A text column that is one of `allowed`.
fn text_in<'r>(row: &'r Row, col: &str, allowed: &[&str]) -> Result<&'r str, String> {
    match row.text(col) {
        Some(s) if allowed.contains(&s) => Ok(s),
        Some(s) => Err(format!("{col} is {s:?}, not one of {allowed:?}")),
        None => Err(format!("{col} is missing")),
    }
}

/// A text id: at most [`MAX_ID`] bytes, no control characters.
fn id(row: &Row, col: &str, nullable: bool) -> Result<(), String> {
    match row.r.get(col) {
        None | Some(Value::Null) if nullable => Ok(()),
        Some(Value::String(s))
            if !s.is_empty() && s.len() <= MAX_ID && !s.chars().any(char::is_control) =>
        {
            Ok(())
        }
        Some(Value::String(s)) => Err(format!(
            "{col} is not an id (1 to {MAX_ID} printable characters): {:?}",
            s.chars().take(80).collect::<String>()
        )),
        _ => Err(format!("{col} is missing or not text")),
    }
}

/// A blob name: 64 lowercase hex digits.
fn hash(row: &Row, col: &str, nullable: bool) -> Result<(), String> {
    match row.r.get(col) {
        None | Some(Value::Null) if nullable => Ok(()),
        Some(Value::String(s))
            if s.len() == 64
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(())
        }
        Some(v) => Err(format!("{col} is not a blob name (a BLAKE3 hash): {v}")),
        None => Err(format!("{col} is missing")),
    }
}

/// A workspace path column (`None`: NULL, where `nullable`).
fn path(row: &Row, col: &str, nullable: bool) -> Result<Option<String>, String> {
    match row.r.get(col) {
        None | Some(Value::Null) if nullable => return Ok(None),
        None | Some(Value::Null) => return Err(format!("{col} is missing")),
        _ => {}
    }
    let b = row
        .bytes(col)
        .ok_or_else(|| format!("{col} is not a path"))?;
    let shown = String::from_utf8_lossy(&b)
        .chars()
        .take(200)
        .collect::<String>();
    WsPath::parse(b)
        .map_err(|why| format!("{col} {shown:?} is not a path inside the workspace ({why})"))?;
    Ok(Some(shown))
}
