//! Fuzzing imports: random bundles made from a real one — bytes flipped, cut or added, frames
//! dropped, repeated or reordered, and rows rewritten with hostile values and every frame
//! hashed again (what anyone can do, the hashes being unkeyed) — staged and imported into a
//! store. Whatever the bytes, an import either succeeds or is refused cleanly (never a panic),
//! a refused one leaves the store as it was (no row, no blob, no staging file), and what a
//! successful one stores keeps the store's rules: every path inside the workspace, every
//! complete capture as long as its blob, every imported checkpoint marked as such.
//!
//! Bounded by time: `BUNDLE_FUZZ_SECONDS` (default 5; `scripts/fuzz.sh` runs longer), with the
//! seed printed for a replay (`BUNDLE_FUZZ_SEED`).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::*;
use crate::store::{Actor, BlobRef, CheckpointKind, Kind, Op, PreImage, Purpose, Store};
use crate::wspath::WsPath;

/// A small deterministic generator (xorshift): no dependency, and a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// A real store's export: checkpoints, captures of files, directories and symlinks (one a
/// range capture), a rename, tracked files and the log.
fn seed_bundle(dir: &std::path::Path) -> Vec<u8> {
    let s = Store::open(dir, false).unwrap();
    let c1 = s
        .begin_checkpoint(
            "11111111-1111-4111-8111-111111111111",
            Some("s"),
            CheckpointKind::Message,
        )
        .unwrap();
    let (h, n) = s.blobs.put_bytes(b"hello\n").unwrap();
    let file = PreImage {
        kind: Kind::File,
        blob: Some(BlobRef::hash(h)),
        mode: libc::S_IFREG | 0o644,
        size: n,
        ..PreImage::absent()
    };
    let id = s
        .insert_capture(
            c1,
            &crate::wspath::node("src/a.txt"),
            Purpose::Checkpoint,
            &file,
            Actor::Tool,
            Op::Write,
        )
        .unwrap();
    s.insert_capture(
        c1,
        &crate::wspath::node("src"),
        Purpose::Checkpoint,
        &PreImage {
            kind: Kind::Dir,
            mode: libc::S_IFDIR | 0o755,
            ..PreImage::absent()
        },
        Actor::Shell,
        Op::Mkdir,
    )
    .unwrap();
    s.insert_capture(
        c1,
        &crate::wspath::node("link"),
        Purpose::Checkpoint,
        &PreImage {
            kind: Kind::Symlink,
            mode: libc::S_IFLNK | 0o777,
            target: Some(b"src/a.txt".to_vec()),
            ..PreImage::absent()
        },
        Actor::Shell,
        Op::Symlink,
    )
    .unwrap();
    let partial = s
        .insert_capture(
            c1,
            &crate::wspath::node("big.bin"),
            Purpose::Checkpoint,
            &PreImage {
                kind: Kind::File,
                mode: libc::S_IFREG | 0o600,
                size: 8192,
                partial: true,
                ..PreImage::absent()
            },
            Actor::Shell,
            Op::Write,
        )
        .unwrap();
    s.insert_range(
        partial,
        &crate::store::Range {
            offset: 0,
            length: 4,
            content: crate::store::RangeContent::Inline(b"abcd".to_vec()),
        },
    )
    .unwrap();
    s.insert_move(
        c1,
        &crate::wspath::ws(&b"src"[..]),
        &crate::wspath::ws(&b"lib"[..]),
        false,
        Actor::Shell,
    )
    .unwrap();
    s.track("s", &crate::wspath::ws("src/a.txt"), c1, id)
        .unwrap();
    let _ = s.begin_checkpoint(
        "22222222-2222-4222-8222-222222222222",
        Some("s"),
        CheckpointKind::Message,
    );
    let rows = s.export_rows(0).unwrap();
    let mut w = BundleWriter::new(Vec::new()).unwrap();
    let data = s
        .blobs
        .read_verified(BlobRef::hash(blake3::hash(b"hello\n").to_hex().to_string()).as_str())
        .unwrap();
    w.blob(
        blake3::hash(&data).to_hex().as_ref(),
        data.len() as u64,
        &mut &data[..],
    )
    .unwrap();
    let checkpoints = rows
        .iter()
        .filter(|r| r.t == "checkpoints")
        .filter_map(|r| r.text("uuid").map(str::to_string))
        .collect();
    for r in &rows {
        w.row(r).unwrap();
    }
    w.finish(Manifest {
        export_id: "33333333-3333-4333-8333-333333333333".into(),
        checkpoints,
        ..Manifest::default()
    })
    .unwrap()
    .0
}

/// The frames of a bundle: (kind, payload).
fn frames(b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    scan(b)
        .map(|fs| {
            fs.into_iter()
                .map(|f| {
                    (
                        f.kind,
                        b[f.offset as usize..(f.offset + f.len) as usize].to_vec(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes frames, each hashed anew.
fn reframe(frames: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&FORMAT.to_le_bytes());
    for (k, p) in frames {
        out.push(*k);
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(blake3::hash(p).as_bytes());
        out.extend_from_slice(p);
    }
    out
}

const HOSTILE_PATHS: &[&[u8]] = &[
    b".",
    b"..",
    b"src/..",
    b"../x",
    b"/etc/passwd",
    b"",
    b"a//b",
    b"a/",
    b"a\0b",
    b"./a",
];

fn hostile_value(r: &mut Rng) -> Value {
    match r.below(12) {
        0 => json!(-1),
        1 => json!(i64::MAX),
        2 => json!(u64::MAX),
        3 => json!(1u64 << 50),
        4 => Value::Null,
        5 => json!("x".repeat(1000)),
        6 => blob_value(HOSTILE_PATHS[r.below(HOSTILE_PATHS.len())]),
        7 => json!({"$b": "!!!not base64"}),
        8 => json!([1, 2, 3]),
        9 => json!(1.5),
        10 => json!("file"),
        _ => json!(0o104755),
    }
}

/// One random bundle made from `good`.
fn mutate(good: &[u8], r: &mut Rng) -> Vec<u8> {
    let mut fr = frames(good);
    match r.below(8) {
        // Bytes: flipped, cut, added.
        0 => {
            let mut b = good.to_vec();
            for _ in 0..=r.below(4) {
                let i = r.below(b.len());
                b[i] ^= 1 << r.below(8);
            }
            b
        }
        1 => good[..r.below(good.len())].to_vec(),
        2 => {
            let mut b = good.to_vec();
            b.extend((0..r.below(64)).map(|_| r.next() as u8));
            b
        }
        // Frames: dropped, repeated, swapped, a huge length.
        3 if !fr.is_empty() => {
            let i = r.below(fr.len());
            match r.below(3) {
                0 => {
                    fr.remove(i);
                }
                1 => {
                    let f = fr[i].clone();
                    fr.insert(r.below(fr.len()), f);
                }
                _ => {
                    let j = r.below(fr.len());
                    fr.swap(i, j);
                }
            }
            reframe(&fr)
        }
        4 => {
            let mut b = reframe(&fr);
            if b.len() > 21 {
                b[13..21].copy_from_slice(&(u64::MAX - r.below(9) as u64).to_le_bytes());
            }
            b
        }
        // Rows: a column set to something hostile, removed, or added; a row of another table.
        _ => {
            for (k, p) in fr.iter_mut().filter(|(k, _)| *k == ROWS) {
                let _ = k;
                let mut lines: Vec<Row> = p
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .filter_map(|l| serde_json::from_slice(l).ok())
                    .collect();
                for _ in 0..=r.below(3) {
                    if lines.is_empty() {
                        break;
                    }
                    let i = r.below(lines.len());
                    let cols: Vec<String> = lines[i].r.keys().cloned().collect();
                    match r.below(5) {
                        0..=2 if !cols.is_empty() => {
                            let c = r.pick(&cols).clone();
                            let v = hostile_value(r);
                            lines[i].r.insert(c, v);
                        }
                        3 if !cols.is_empty() => {
                            let c = r.pick(&cols).clone();
                            lines[i].r.remove(&c);
                        }
                        _ => {
                            let mut m = Map::new();
                            m.insert("x".into(), hostile_value(r));
                            lines.push(Row {
                                t: r.pick(&["captures", "sqlite_master", "rewinds", "moves"])
                                    .to_string(),
                                r: m,
                            });
                        }
                    }
                }
                let mut out = Vec::new();
                for l in &lines {
                    out.extend(serde_json::to_vec(l).unwrap());
                    out.push(b'\n');
                }
                *p = out;
            }
            // The manifest counts rows: a bundle that says what it holds gets further.
            let rows = fr
                .iter()
                .filter(|(k, _)| *k == ROWS)
                .map(|(_, p)| p.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count() as u64)
                .sum::<u64>();
            if let Some((_, m)) = fr.iter_mut().find(|(k, _)| *k == MANIFEST) {
                if let Ok(mut man) = serde_json::from_slice::<Manifest>(m) {
                    man.rows = rows;
                    *m = serde_json::to_vec(&man).unwrap();
                }
            }
            reframe(&fr)
        }
    }
}

/// What a store holds that an import must not leave behind when it is refused.
fn footprint(dir: &std::path::Path, s: &Store) -> (i64, usize, usize) {
    let checkpoints = s
        .with(|c| c.query_row("SELECT count(*) FROM checkpoints", [], |r| r.get(0)))
        .unwrap();
    let count = |d: std::path::PathBuf| walk(&d).into_iter().filter(|p| p.is_file()).count();
    (
        checkpoints,
        count(dir.join("blobs")),
        count(dir.join("blobs/tmp")),
    )
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            }
            out.push(p);
        }
    }
    out
}

/// The store's rules, after an import that succeeded.
fn check_store(s: &Store) {
    let (_, _, captures, bytes) = s.counts().unwrap();
    s.with(|c| {
        let counted: (i64, i64) = c.query_row(
            "SELECT (SELECT count(*) FROM captures), (SELECT coalesce(sum(size), 0) FROM blobs)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        assert_eq!((captures, bytes), counted, "status's counts after an import");
        for (t, col) in [
            ("captures", "path"),
            ("moves", "src"),
            ("moves", "dst"),
            ("tracked", "path"),
            ("changes", "path"),
        ] {
            let mut st = c.prepare(&format!("SELECT {col} FROM {t}"))?;
            let paths: Vec<Vec<u8>> = st.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
            for p in paths {
                assert!(
                    WsPath::is_valid(&p),
                    "{t}.{col} holds {:?} after an import",
                    String::from_utf8_lossy(&p)
                );
            }
        }
        let mut st = c.prepare(
            "SELECT c.size, b.size FROM captures c JOIN blobs b ON b.hash = c.blob WHERE c.kind = 'file' AND c.partial = 0",
        )?;
        for row in st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))? {
            let (a, b) = row?;
            assert_eq!(a, b, "a complete capture's size is not its blob's");
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("reading the store back after an import: {e}"));
}

#[test]
fn any_bundle_is_imported_whole_or_refused_leaving_nothing() {
    let seconds: u64 = std::env::var("BUNDLE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let seed: u64 = std::env::var("BUNDLE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("BUNDLE_FUZZ_SEED={seed}");
    let home = tempfile::tempdir().unwrap();
    let good = seed_bundle(home.path());
    let mut r = Rng(seed);
    let end = Instant::now() + Duration::from_secs(seconds);
    let (mut cases, mut imported) = (0u64, 0u64);
    let mut reasons: HashSet<String> = HashSet::new();
    while Instant::now() < end {
        let bytes = mutate(&good, &mut r);
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let before = footprint(d.path(), &s);
        let trust = Trust::default();
        let res = s.stage_bundle(&bytes[..], None, &trust).and_then(|staged| {
            let r = s.import_staged(&staged, None);
            if r.is_err() {
                staged.discard(&s, None).unwrap();
            }
            r
        });
        match res {
            Ok(_) => {
                imported += 1;
                check_store(&s);
                let bad: i64 = s
                    .with(|c| {
                        c.query_row(
                            "SELECT count(*) FROM checkpoints WHERE imported = 0",
                            [],
                            |r| r.get(0),
                        )
                    })
                    .unwrap();
                assert_eq!(bad, 0, "every checkpoint an import adds is marked imported");
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.is_empty());
                reasons.insert(
                    msg.split(':')
                        .next()
                        .unwrap_or("")
                        .chars()
                        .take(40)
                        .collect(),
                );
                assert_eq!(
                    footprint(d.path(), &s),
                    before,
                    "a refused bundle left something: {msg}"
                );
            }
        }
        cases += 1;
    }
    eprintln!(
        "{cases} bundles, {imported} imported, {} kinds of refusal",
        reasons.len()
    );
    assert!(cases > 20, "only {cases} cases in {seconds} s");
}

/// A bundle may carry a byte column (a path, a symlink's target) as a plain string when it is
/// UTF-8. The import stores it as the BLOB the store's own rows are: it reads back as a path,
/// and compares equal to one (a TEXT path never equals a BLOB in SQL, and failed to read back
/// before — the bundle fuzz found it).
#[test]
fn a_path_a_bundle_carries_as_text_is_stored_as_bytes() {
    let home = tempfile::tempdir().unwrap();
    let good = seed_bundle(home.path());
    let mut fr = frames(&good);
    let mut turned = 0;
    for (_, p) in fr.iter_mut().filter(|(k, _)| *k == ROWS) {
        let mut out = Vec::new();
        for l in p.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let mut row: Row = serde_json::from_slice(l).unwrap();
            let cols: Vec<String> = row.r.keys().cloned().collect();
            for c in cols {
                if !check::holds_bytes(&row.t, &c) {
                    continue;
                }
                if let Some(text) = row.bytes(&c).and_then(|b| String::from_utf8(b).ok()) {
                    row.r.insert(c, Value::String(text));
                    turned += 1;
                }
            }
            out.extend(serde_json::to_vec(&row).unwrap());
            out.push(b'\n');
        }
        *p = out;
    }
    assert!(
        turned >= 3,
        "the seed bundle has paths to turn into text ({turned})"
    );
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), false).unwrap();
    let staged = s
        .stage_bundle(&reframe(&fr)[..], None, &Trust::default())
        .unwrap();
    s.import_staged(&staged, None).unwrap();
    check_store(&s);
    let text: i64 = s
        .with(|c| {
            c.query_row(
                "SELECT (SELECT count(*) FROM captures WHERE typeof(path) = 'text' OR typeof(target) = 'text')
                      + (SELECT count(*) FROM moves WHERE typeof(src) = 'text' OR typeof(dst) = 'text')
                      + (SELECT count(*) FROM changes WHERE typeof(path) = 'text')",
                [],
                |r| r.get(0),
            )
        })
        .unwrap();
    assert_eq!(text, 0, "a byte column stored as TEXT");
}
