//! `rewindfs push/pull` against a real S3-compatible server started here (moto, installed into
//! a venv under target/ by `scripts/s3-test-server.sh`, listening on 127.0.0.1 only): a push
//! cut short and resumed, two workspaces sharing blobs, a pull that shows and rewinds as at
//! home, a second pull that adds only what is new, and an offline pull into a store.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use crate::agent::Agent;
use crate::support::{BIN, Mounted, require_fuse, sh, tree, wait_until};

/// The S3 server, stopped when dropped.
struct S3 {
    child: Child,
    url: String,
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-test-server.sh")
}

/// Starts moto on a free port of 127.0.0.1 with bucket `fleet`.
fn s3() -> S3 {
    let out = Command::new("bash")
        .arg(script())
        .arg("path")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "installing the S3 test server (moto) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = S3 {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    assert!(
        wait_until(30, || TcpStream::connect(("127.0.0.1", port)).is_ok()),
        "the S3 server did not start"
    );
    let out = Command::new("bash")
        .arg(script())
        .args(["bucket", &s.url, "fleet"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s
}

/// Runs rewindfs with the S3 server's credentials and endpoint.
fn rw(s3: &S3, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("AWS_ENDPOINT_URL", &s3.url)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("NO_PROXY", "127.0.0.1")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn rw_ok(s3: &S3, args: &[&str]) -> Value {
    let out = rw(s3, args, &[]);
    assert!(
        out.status.success(),
        "rewindfs {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn push_and_pull_carry_history_through_s3_sharing_blobs_and_resuming_a_cut_push() {
    require_fuse();
    let s3 = s3();
    let remote = "s3://fleet/team";
    let shared = "the same content in two workspaces\n".repeat(50);
    let mut a = Agent::new(|d| {
        std::fs::write(d.join("a.txt"), "one\n").unwrap();
        std::fs::write(d.join("common.txt"), &shared).unwrap();
        std::fs::write(d.join("b.txt"), "bee\n").unwrap();
    });
    let u1 = a.turn();
    let at_u1 = tree(&a.m.dir);
    a.tool_write("a.txt", b"two\n");
    a.bash("echo changed > common.txt && rm b.txt && mkdir d && echo x > d/x");
    let sock = a.m.socket();
    let sock = sock.to_str().unwrap();

    // A push cut short after one blob: no history object yet; the next push sends the rest.
    let out = rw(
        &s3,
        &["push", remote, "--session", &a.session, "--socket", sock],
        &[("REWINDFS_TEST_PUSH_FAIL_AFTER", "1")],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("interrupted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = rw_ok(
        &s3,
        &[
            "push",
            remote,
            "--session",
            &a.session,
            "--socket",
            sock,
            "--json",
        ],
    );
    assert!(p["blobsPresent"].as_u64().unwrap() >= 1, "{p}");
    assert!(p["blobsUploaded"].as_u64().unwrap() >= 1, "{p}");

    // A second workspace with the same content: its push finds that blob there already.
    let mut b = Agent::new(|d| std::fs::write(d.join("common.txt"), &shared).unwrap());
    b.turn();
    b.bash("echo mine > common.txt");
    let pb = rw_ok(
        &s3,
        &[
            "push",
            remote,
            "--session",
            &b.session,
            "--socket",
            b.m.socket().to_str().unwrap(),
            "--json",
        ],
    );
    assert!(
        pb["blobsPresent"].as_u64().unwrap() >= 1,
        "shared blob uploaded again: {pb}"
    );

    // A third workspace, a copy of the first's tree, pulls the first's session: it shows and
    // rewinds as it did at home.
    let c = {
        let src = a.m.dir.display().to_string();
        Mounted::with(|d| {
            sh(d, &format!("cp -a {src}/. ."));
        })
    };
    let csock = c.socket();
    let csock = csock.to_str().unwrap();
    let pulled = rw_ok(
        &s3,
        &[
            "pull",
            remote,
            "--session",
            &a.session,
            "--socket",
            csock,
            "--json",
        ],
    );
    assert_eq!(pulled.as_array().unwrap().len(), 1, "{pulled}");
    assert!(
        pulled[0]["import"]["checkpoints"].as_u64().unwrap() >= 2,
        "{pulled}"
    );
    let show = crate::support::rewindfs(&[
        "show",
        &u1,
        c.dir.join("b.txt").to_str().unwrap(),
        "--socket",
        csock,
    ]);
    assert_eq!(show.stdout, b"bee\n");
    // Pulled again: nothing new.
    let again = rw_ok(
        &s3,
        &[
            "pull",
            remote,
            "--session",
            &a.session,
            "--socket",
            csock,
            "--json",
        ],
    );
    assert_eq!(again[0]["import"]["alreadyImported"], true, "{again}");

    // More history at home, pushed again: a pull adds only the new checkpoints.
    let u2 = a.turn();
    let at_u2 = tree(&a.m.dir);
    a.bash("echo three > a.txt");
    rw_ok(
        &s3,
        &[
            "push",
            remote,
            "--session",
            &a.session,
            "--socket",
            sock,
            "--json",
        ],
    );
    let second = rw_ok(
        &s3,
        &[
            "pull",
            remote,
            "--session",
            &a.session,
            "--socket",
            csock,
            "--json",
        ],
    );
    assert_eq!(second.as_array().unwrap().len(), 2, "{second}");
    assert_eq!(second[0]["import"]["alreadyImported"], true, "{second}");
    assert!(
        second[1]["import"]["checkpoints"].as_u64().unwrap() >= 1,
        "{second}"
    );
    // The copy is the tree at the second push; rewinds there give the trees at u2 and u1.
    sh(&c.dir, "echo three > a.txt");
    crate::support::rewindfs_ok(&["rewind", &u2, "--scope", "all", "--socket", csock]);
    assert_eq!(tree(&c.dir), at_u2);
    crate::support::rewindfs_ok(&["rewind", &u1, "--scope", "all", "--socket", csock]);
    assert_eq!(tree(&c.dir), at_u1);

    // An offline pull into a store no daemon serves.
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let off = rw_ok(
        &s3,
        &["pull", remote, "--store", store.to_str().unwrap(), "--json"],
    );
    assert_eq!(
        off.as_array().unwrap().len(),
        3,
        "both sessions' pushes: {off}"
    );
}
