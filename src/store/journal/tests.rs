//! Tests of `journal`.

use super::*;

fn samples() -> Vec<Record> {
    vec![
        Record::Capture {
            id: 7,
            checkpoint: 3,
            path: crate::wspath::node(&b"src/a\xff.rs"[..]),
            tool: false,
            pre: PreImage {
                imported: false,
                kind: Kind::File,
                blob: Some(BlobRef::hash("ab".repeat(32))),
                mode: 0o100644,
                uid: 1000,
                gid: 1000,
                size: 12,
                target: None,
                partial: true,
                xattrs: Some(Xattrs::new(vec![
                    (b"user.a".to_vec(), b"1".to_vec()),
                    (b"user.empty".to_vec(), Vec::new()),
                ])),
            },
            actor: Actor::Shell,
            op: "write".into(),
            at: 1_700_000_000_000,
        },
        Record::Capture {
            id: 8,
            checkpoint: 3,
            path: crate::wspath::node(&b"l"[..]),
            tool: true,
            pre: PreImage {
                imported: false,
                target: Some(b"../x".to_vec()),
                kind: Kind::Symlink,
                ..PreImage::absent()
            },
            actor: Actor::Tool,
            op: "unlink".into(),
            at: 1,
        },
        Record::Actors {
            checkpoint: 3,
            path: crate::wspath::node(&b"x"[..]),
            bits: 6,
        },
        Record::Range {
            capture: 7,
            range: Range {
                offset: 4096,
                length: 8192,
                content: RangeContent::Blob(BlobRef::hash("cd".repeat(32))),
            },
        },
        Record::Range {
            capture: 7,
            range: Range {
                offset: 0,
                length: 3,
                content: RangeContent::Inline(b"old".to_vec()),
            },
        },
        Record::Track {
            session: "s".into(),
            path: crate::wspath::ws(&b"a"[..]),
            checkpoint: 3,
            capture: 8,
        },
        Record::Move {
            seq: 2,
            checkpoint: 3,
            src: crate::wspath::ws(&b"d"[..]),
            dst: crate::wspath::ws(&b"e/f"[..]),
            exchange: true,
            after_capture: 8,
            actor: Actor::External,
            at: 9,
        },
        Record::Log(LogEntry {
            seq: 41,
            at: 1_700_000_000_001,
            checkpoint: 3,
            op: super::super::Op::Rename,
            path: crate::wspath::node(&b"a\xff"[..]),
            path2: Some(crate::wspath::ws("b")),
            actor: Actor::Tool,
            pid: 4242,
            process: "claude".into(),
            tool_use_id: Some("toolu_1".into()),
            session: Some("s1".into()),
        }),
        Record::Log(LogEntry {
            seq: 42,
            at: 2,
            checkpoint: 3,
            op: super::super::Op::Write,
            path: crate::wspath::node(&b"c"[..]),
            path2: None,
            actor: Actor::Shell,
            pid: 1,
            process: String::new(),
            tool_use_id: None,
            session: None,
        }),
    ]
}

#[test]
fn records_round_trip_and_a_torn_tail_is_ignored() {
    let mut bytes = Vec::new();
    for r in samples() {
        bytes.extend_from_slice(&r.encode());
    }
    let whole = bytes.len();
    let c = parse(&bytes);
    assert_eq!(c.records, samples());
    assert_eq!(c.torn_bytes, 0);
    // Every cut inside the last frame drops exactly that record.
    let last = samples().last().unwrap().encode().len();
    for cut in (whole - last + 1)..whole {
        let c = parse(&bytes[..cut]);
        assert_eq!(c.records.len(), samples().len() - 1, "cut at {cut}");
        assert_eq!(c.torn_bytes, cut - (whole - last));
    }
    // A flipped byte stops parsing at that frame.
    let mut bad = bytes.clone();
    bad[20] ^= 1;
    assert!(parse(&bad).records.is_empty());
}

/// Frames as a rewindfs before CRC-64 wrote them (FNV-1a, top bit of the length clear), left
/// by a crash, are still read, before and between this build's; a frame keeps the checksum
/// its flag names, so one whose flag is lost (or whose payload changed) is the torn end.
#[test]
fn frames_an_older_build_left_are_read_beside_this_builds() {
    fn old_frame(r: &Record) -> Vec<u8> {
        let new = r.encode();
        let payload = &new[FRAME_HEADER..];
        let mut f = Vec::new();
        f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        f.extend_from_slice(&fnv1a64(payload).to_le_bytes());
        f.extend_from_slice(payload);
        f
    }
    // The checksum is the standard CRC-64/NVME: its check value, so the format cannot drift.
    assert_eq!(crc64(b"123456789"), 0xae8b_1486_0a79_9888);
    let mut bytes = Vec::new();
    for (i, r) in samples().iter().enumerate() {
        let f = if i % 2 == 0 { old_frame(r) } else { r.encode() };
        assert_eq!(f[3] & 0x80 != 0, i % 2 == 1, "flag of frame {i}");
        bytes.extend_from_slice(&f);
    }
    let c = parse(&bytes);
    assert_eq!(c.records, samples());
    assert_eq!(c.torn_bytes, 0);
    // This build's first frame with its flag cleared is checked as FNV-1a, fails, and ends it.
    let first_new = old_frame(&samples()[0]).len();
    let mut bad = bytes.clone();
    bad[first_new + 3] &= 0x7f;
    let c = parse(&bad);
    assert_eq!(c.records, samples()[..1]);
    assert_eq!(c.torn_bytes, bytes.len() - first_new);
}

/// A whole frame this build cannot read — a tool's change of the workspace root tracked by an
/// older build, whose path is now refused — is left out, and the records after it are read:
/// they protect changes that happened.
#[test]
fn a_whole_record_that_does_not_decode_is_left_out_not_taken_for_the_end() {
    let mut e = Enc(Vec::new());
    e.u8(3);
    e.bytes(b"session");
    e.bytes(b"");
    e.i64(1);
    e.i64(1);
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&(e.0.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&fnv1a64(&e.0).to_le_bytes());
    bytes.extend_from_slice(&e.0);
    for r in samples() {
        bytes.extend_from_slice(&r.encode());
    }
    let c = parse(&bytes);
    assert_eq!(c.unreadable, 1);
    assert_eq!(c.records, samples());
    assert_eq!(c.torn_bytes, 0);
}

fn actors(n: u8) -> Record {
    Record::Actors {
        checkpoint: 1,
        path: crate::wspath::node(vec![b'a' + n]),
        bits: n,
    }
}

/// Appends go on while a batch is applied; a crash then leaves both files, and they replay
/// oldest first.
#[test]
fn appends_during_an_apply_go_to_the_other_file_and_replay_after_the_batch() {
    let d = tempfile::tempdir().unwrap();
    let mut j = Journal::open(d.path(), false).unwrap();
    j.append(actors(1)).unwrap();
    j.append(actors(2)).unwrap();
    let batch = j.take_batch().unwrap().unwrap();
    assert_eq!(batch.records(), vec![actors(1), actors(2)]);
    j.append(actors(3)).unwrap();
    // Crash before the batch is known applied: everything, in order.
    assert_eq!(
        read(d.path()).unwrap().records,
        vec![actors(1), actors(2), actors(3)]
    );
    // The batch applied: its file is emptied; the later record stays.
    j.batch_done(true).unwrap();
    assert_eq!(read(d.path()).unwrap().records, vec![actors(3)]);
    // The next batch moves appends back to the first file, under a newer epoch.
    let b = j.take_batch().unwrap().unwrap();
    assert_eq!(b.records(), vec![actors(3)]);
    j.append(actors(4)).unwrap();
    assert_eq!(read(d.path()).unwrap().records, vec![actors(3), actors(4)]);
    j.batch_done(true).unwrap();
    assert_eq!(read(d.path()).unwrap().records, vec![actors(4)]);
    assert!(j.take_batch().unwrap().is_some());
    j.batch_done(true).unwrap();
    assert!(j.take_batch().unwrap().is_none());
    assert!(read(d.path()).unwrap().records.is_empty());
}

/// A batch that did not reach the database is handed out again, and nothing moves files
/// meanwhile.
#[test]
fn a_failed_batch_is_taken_again() {
    let d = tempfile::tempdir().unwrap();
    let mut j = Journal::open(d.path(), false).unwrap();
    j.append(actors(1)).unwrap();
    let b = j.take_batch().unwrap().unwrap();
    j.append(actors(2)).unwrap();
    j.batch_done(false).unwrap();
    assert!(j.has_in_flight());
    assert_eq!(j.take_batch().unwrap().unwrap(), b);
    j.batch_done(true).unwrap();
    assert_eq!(j.take_batch().unwrap().unwrap().records(), vec![actors(2)]);
    assert_eq!(read(d.path()).unwrap().records, vec![actors(2)]);
}

/// A journal written by an older rewindfs (one file, no epoch record) replays before
/// anything else.
#[test]
fn a_journal_without_an_epoch_replays_first() {
    let d = tempfile::tempdir().unwrap();
    let mut older = Vec::new();
    older.extend_from_slice(&actors(1).encode());
    let mut newer = Record::Epoch(5).encode();
    newer.extend_from_slice(&actors(2).encode());
    std::fs::write(d.path().join(FILES[1]), &newer).unwrap();
    std::fs::write(d.path().join(FILES[0]), &older).unwrap();
    assert_eq!(read(d.path()).unwrap().records, vec![actors(1), actors(2)]);
}

/// The other file cannot be started (a full disk): the batch is applied from the file
/// appends go to, which keeps its records until a later batch can move on.
#[test]
fn a_batch_is_applied_in_place_when_the_other_file_cannot_start() {
    let d = tempfile::tempdir().unwrap();
    let mut j = Journal::open(d.path(), false).unwrap();
    let real = std::mem::replace(
        &mut j.files[1],
        OpenOptions::new().write(true).open("/dev/full").unwrap(),
    );
    j.append(actors(1)).unwrap();
    assert_eq!(j.take_batch().unwrap().unwrap().records(), vec![actors(1)]);
    j.append(actors(2)).unwrap();
    j.batch_done(true).unwrap();
    // Nothing was lost: the applied record only replays after a crash.
    assert_eq!(read(d.path()).unwrap().records, vec![actors(1), actors(2)]);
    // The disk has room again: the next batch moves on and empties the old file.
    j.files[1] = real;
    assert_eq!(j.take_batch().unwrap().unwrap().records(), vec![actors(2)]);
    j.append(actors(3)).unwrap();
    j.batch_done(true).unwrap();
    assert_eq!(read(d.path()).unwrap().records, vec![actors(3)]);
}

/// A batch is decoded from the frames its appends wrote: every kind of record comes back as it
/// was appended (the applier no longer sees the records themselves), and a retry of the batch
/// decodes the same.
#[test]
fn a_batch_gives_back_every_kind_of_record_appended() {
    let d = tempfile::tempdir().unwrap();
    let mut j = Journal::open(d.path(), false).unwrap();
    for r in samples() {
        j.append(r).unwrap();
    }
    assert_eq!(j.pending_len(), samples().len());
    let b = j.take_batch().unwrap().unwrap();
    assert_eq!(j.pending_len(), 0, "the batch took every pending record");
    assert_eq!(b.len(), samples().len());
    assert_eq!(b.records(), samples());
    j.batch_done(false).unwrap();
    assert_eq!(j.take_batch().unwrap().unwrap().records(), samples());
}
