//! Fuzzing the control socket: random lines — raw bytes, broken JSON, deep nesting, and
//! well-formed envelopes of every subtype with random field values (hostile paths, globs,
//! numbers, types) — sent to a real daemon over its real socket. Every line must get exactly
//! one JSON response (never "internal error", the sign of a handler panic), and the daemon must
//! answer `status` and keep the workspace intact afterwards.
//!
//! Bounded by time: `FUZZ_SECONDS` (default 15; `scripts/fuzz.sh` runs longer).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

use crate::support::{Mounted, require_fuse, tree};

const SUBTYPES: &[&str] = &[
    "begin_message",
    "tool_use",
    "register_agent",
    "rewind_files",
    "undo_rewind",
    "list_checkpoints",
    "diff",
    "log",
    "status",
    "gc",
    "",
    "STATUS",
    "rewind_files\u{0}",
];
const FIELDS: &[&str] = &[
    "session_id",
    "user_message_id",
    "phase",
    "tool_name",
    "tool_use_id",
    "file_path",
    "pid",
    "dry_run",
    "scope",
    "force",
    "paths",
    "path",
    "limit",
    "max_store_bytes",
    "max_age_seconds",
];

fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("../../../etc/passwd".to_string()),
        Just("/etc/shadow".to_string()),
        Just("**".to_string()),
        Just("[".to_string()),
        Just("{a,b".to_string()),
        Just("a/../../b".to_string()),
        Just("nul\u{0}byte".to_string()),
        Just(String::new()),
        Just("x".repeat(5000)),
        Just("43a0616f-86de-4176-b8c4-b711ba2d9691".to_string()),
        Just("pre".to_string()),
        Just("all".to_string()),
        ".{0,40}",
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        hostile_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(hostile_string(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn envelope() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(SUBTYPES),
        prop::collection::vec((prop::sample::select(FIELDS), value()), 0..6),
        prop_oneof![
            Just(json!("id")),
            any::<i64>().prop_map(|n| json!(n)),
            value()
        ],
        prop_oneof![8 => Just(json!("control_request")), 1 => value()],
    )
        .prop_map(|(sub, fields, id, ty)| {
            let mut req = serde_json::Map::new();
            req.insert("subtype".into(), json!(sub));
            for (k, v) in fields {
                req.insert(k.to_string(), v);
            }
            serde_json::to_vec(&json!({"type": ty, "request_id": id, "request": req})).unwrap()
        })
}

fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => envelope(),
        2 => prop::collection::vec(any::<u8>(), 1..300),
        1 => (1usize..200_000).prop_map(|n| {
            let mut v = "[".repeat(n).into_bytes();
            v.extend(std::iter::repeat_n(b']', n / 2));
            v
        }),
        1 => "\\{[a-z\":,\\[\\]{}0-9 ]{0,80}".prop_map(String::into_bytes),
    ]
    .prop_map(|mut v| {
        // One request per line: a newline inside would make two.
        v.retain(|b| *b != b'\n');
        if v.iter().all(|b| b.is_ascii_whitespace()) {
            v.push(b'x');
        }
        v
    })
}

fn budget() -> Duration {
    Duration::from_secs(
        std::env::var("FUZZ_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(15),
    )
}

#[test]
fn random_control_lines_get_one_json_answer_each_and_the_daemon_survives() {
    require_fuse();
    let m = Mounted::with(|d| {
        std::fs::create_dir(d.join("src")).unwrap();
        std::fs::write(d.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    });
    let before = tree(&m.dir);
    let connect = || {
        let w = UnixStream::connect(m.socket()).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        (w, r)
    };
    let (mut w, mut r) = connect();
    // A fresh seed each run (printed, and FUZZ_SEED replays one).
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("fuzz: FUZZ_SEED={seed}");
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        proptest::test_runner::Config::default(),
        proptest::test_runner::TestRng::from_seed(
            proptest::test_runner::RngAlgorithm::ChaCha,
            &seed_bytes,
        ),
    );
    let strategy = line();
    let end = Instant::now() + budget();
    let mut n = 0u64;
    let mut errors = 0u64;
    while Instant::now() < end {
        let input = strategy.new_tree(&mut runner).unwrap().current();
        w.write_all(&input).unwrap();
        w.write_all(b"\n").unwrap();
        let mut s = String::new();
        r.read_line(&mut s).unwrap();
        let v: Value = serde_json::from_str(&s).unwrap_or_else(|e| {
            panic!(
                "FUZZ_SEED={seed}: not a JSON answer ({e}) to {:?}: {s:?}",
                String::from_utf8_lossy(&input[..input.len().min(200)])
            )
        });
        let resp = &v["response"];
        assert_eq!(v["type"], json!("control_response"), "{v}");
        if resp["subtype"] == json!("error") {
            errors += 1;
            let e = resp["error"].as_str().unwrap_or("");
            assert!(
                !e.contains("internal error"),
                "FUZZ_SEED={seed}: a handler panicked on {:?}: {e}",
                String::from_utf8_lossy(&input[..input.len().min(300)])
            );
        }
        n += 1;
        if n % 500 == 0 {
            // Fresh connections too, now and then.
            (w, r) = connect();
        }
    }
    eprintln!(
        "fuzz: {n} lines in {:?}, {errors} error answers, 0 crashes",
        budget()
    );
    assert!(n > 100, "the fuzzer ran ({n} lines)");
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    c.request("status", json!({})).unwrap();
    // Random rewinds may have run (to random checkpoints), but a rewind only ever restores
    // states the workspace had; nothing outside it was touched and the files are readable.
    assert!(tree(&m.dir).len() >= before.len().min(1));
    assert!(std::path::Path::new("/etc/passwd").exists());
}
