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

/// Runs rewindfs with the S3 server's credentials and `trust` as its trust file.
fn rw_trusting(s3: &S3, trust: &Path, args: &[&str]) -> Output {
    rw(s3, args, &[("REWINDFS_TRUST", trust.to_str().unwrap())])
}

/// Issue 29 §6: bundle hashes are unkeyed, so whoever can write a shared prefix can substitute
/// history. With `require-signed yes` in the trust file, `pull` and `import` take only history a
/// trusted key signed: another writer's unsigned push, a push signed by a key not trusted here,
/// and a signed bundle altered after it was signed are each refused, naming why, and nothing of
/// them is imported; the team's signed push goes in, reporting who signed it.
#[test]
fn with_signing_required_a_second_writer_to_the_prefix_cannot_make_pull_apply_its_history() {
    require_fuse();
    let s3 = s3();
    let remote = "s3://fleet/signed";
    let mut team = Agent::new(|d| std::fs::write(d.join("a.txt"), "team v1\n").unwrap());
    let keys = team.m.tmp.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    let team_key = keys.join("team.key");
    let out = rw(&s3, &["key", "generate", team_key.to_str().unwrap()], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(public.starts_with("ed25519 "), "{public}");
    let md = std::fs::metadata(&team_key).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777,
        0o600
    );
    // The receiving side trusts the team's key and requires signatures.
    let trust = keys.join("trust");
    std::fs::write(&trust, format!("require-signed yes\n{public} the team\n")).unwrap();
    let trust_env = [("REWINDFS_TRUST", trust.to_str().unwrap())];
    let receiver = Mounted::with_env(
        |d| std::fs::write(d.join("a.txt"), "receiver\n").unwrap(),
        &trust_env,
    );
    let rsock = receiver.socket();
    let rsock = rsock.to_str().unwrap();
    let listed = || {
        let out = rw(&s3, &["list", "--json", "--socket", rsock], &[]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // An attacker with write access to the prefix pushes its own history, unsigned and signed
    // with its own key.
    let mut evil = Agent::new(|d| std::fs::write(d.join("a.txt"), "evil\n").unwrap());
    let evil_turn = evil.turn();
    evil.bash("chmod 4755 a.txt");
    let esock = evil.m.socket();
    let esock = esock.to_str().unwrap();
    let _ = rw_ok(&s3, &["push", remote, "--json", "--socket", esock]);
    let before = listed();
    let out = rw_trusting(&s3, &trust, &["pull", remote, "--socket", rsock]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("not signed")
            && text.contains("require-signed yes")
            && text.contains(trust.to_str().unwrap()),
        "{text}"
    );
    assert_eq!(listed(), before, "unsigned history was imported");
    let evil_key = keys.join("evil.key");
    assert!(
        rw(&s3, &["key", "generate", evil_key.to_str().unwrap()], &[])
            .status
            .success()
    );
    let remote_evil = "s3://fleet/signed-evil";
    let _ = rw_ok(
        &s3,
        &[
            "push",
            remote_evil,
            "--sign",
            evil_key.to_str().unwrap(),
            "--json",
            "--socket",
            esock,
        ],
    );
    let out = rw_trusting(&s3, &trust, &["pull", remote_evil, "--socket", rsock]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success() && text.contains("does not trust"),
        "{text}"
    );
    assert_eq!(listed(), before);
    assert!(!listed().contains(&evil_turn));

    // The team signs its push: pulled, and who signed it is said.
    let u1 = team.turn();
    team.bash("echo team v2 > a.txt");
    let tsock = team.m.socket();
    let tsock = tsock.to_str().unwrap();
    let _ = rw_ok(
        &s3,
        &[
            "push",
            "s3://fleet/team-signed",
            "--sign",
            team_key.to_str().unwrap(),
            "--json",
            "--socket",
            tsock,
        ],
    );
    let out = rw_trusting(
        &s3,
        &trust,
        &["pull", "s3://fleet/team-signed", "--socket", rsock],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("signed by the team"), "{text}");
    assert!(listed().contains(&u1));

    // A signed bundle altered after it was signed (rows rewritten, frames hashed again, the
    // signature kept) is refused by import too.
    let file = team.m.tmp.path().join("signed.rwb");
    let _ = rw_ok(
        &s3,
        &[
            "export",
            file.to_str().unwrap(),
            "--sign",
            team_key.to_str().unwrap(),
            "--json",
            "--socket",
            tsock,
        ],
    );
    let bytes = std::fs::read(&file).unwrap();
    let sig_at = rewindfs::store::bundle::scan(&bytes[..])
        .unwrap()
        .into_iter()
        .find(|f| f.kind == rewindfs::store::bundle::SIGNATURE)
        .expect("the export is signed")
        .offset as usize
        - 41;
    let mut o = crate::hostile::open_bundle(&bytes[..sig_at]);
    for r in o.rows.iter_mut().filter(|r| r.t == "checkpoints") {
        r.r.insert("began_at".into(), serde_json::json!(1));
    }
    let mut forged = crate::hostile::write_bundle(&o);
    forged.extend_from_slice(&bytes[sig_at..]);
    let forged_file = team.m.tmp.path().join("forged.rwb");
    std::fs::write(&forged_file, &forged).unwrap();
    let out = rw_trusting(
        &s3,
        &trust,
        &["import", forged_file.to_str().unwrap(), "--socket", rsock],
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("altered after it was signed"),
        "{text}"
    );
    // The untouched one is fine (and already here).
    let out = rw_trusting(
        &s3,
        &trust,
        &["import", file.to_str().unwrap(), "--socket", rsock],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Row 4 of issue 29: `pull` put each history together as `/tmp/rewindfs-pull-<pid>.rwb`, 0644,
/// without `O_EXCL`: another user read the whole pulled history (and could have swapped it
/// before the import). Now it is put together in a private (0700) temporary directory: another
/// user looking in `$TMPDIR` while the pull holds the bundle (paused there by the tests' fault
/// injection) reads nothing of it, and nothing is left behind.
#[test]
fn pull_keeps_the_bundle_it_assembles_private() {
    require_fuse();
    let s3 = s3();
    let remote = "s3://fleet/private-pull";
    let mut a =
        Agent::new(|d| std::fs::write(d.join("secret.txt"), "the team's secret\n").unwrap());
    a.turn();
    a.bash("echo more secret >> secret.txt");
    let sock = a.m.socket();
    let _ = rw_ok(
        &s3,
        &["push", remote, "--json", "--socket", sock.to_str().unwrap()],
    );
    let b = Mounted::new();
    let shared = b.tmp.path().join("shared-tmp");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(
        &shared,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    std::fs::set_permissions(
        b.tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let bsock = b.socket();
    let pull = Command::new(BIN)
        .args(["pull", remote, "--socket", bsock.to_str().unwrap()])
        .env("AWS_ENDPOINT_URL", &s3.url)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("NO_PROXY", "127.0.0.1")
        .env("TMPDIR", &shared)
        .env("REWINDFS_TEST_PAUSE_PULL_MS", "1500")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While the pull holds the bundle: another user sees a private directory, and reads nothing.
    assert!(wait_until(20, || std::fs::read_dir(&shared)
        .unwrap()
        .next()
        .is_some()));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let looked = crate::support::sh_as_nobody(
        &shared,
        "ls -la . ; find . -type f -exec cat {} + 2>/dev/null | grep -c secret || true",
    );
    let dirs: Vec<String> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    for d in &dirs {
        let md = std::fs::symlink_metadata(d).unwrap();
        assert!(md.is_dir(), "{d} is not a directory");
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777,
            0o700,
            "{d}"
        );
    }
    assert_eq!(looked.lines().last(), Some("0"), "{looked}");
    let out = pull.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_dir(&shared).unwrap().next().is_none(),
        "the pull left files behind"
    );
}
