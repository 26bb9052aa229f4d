//! Real workloads through a mount: git, tar, cargo, SQLite in WAL mode, python venv, and
//! several processes at once.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::{Mounted, require_command, require_fuse, sh, tree};

#[test]
fn git_init_add_commit_status_checkout() {
    require_fuse();
    require_command("git", "git");
    let m = Mounted::new();
    let out = sh(
        &m.dir,
        "set -e
         git init -q -b main .
         git config user.email t@t; git config user.name t
         mkdir -p src && for i in $(seq 1 50); do echo \"line $i\" > src/f$i.txt; done
         git add -A && git commit -qm one
         echo changed >> src/f1.txt
         git status --porcelain
         git checkout -q -b feature && git commit -qam two
         git checkout -q main && cat src/f1.txt
         git checkout -q feature && tail -1 src/f1.txt
         git gc -q && git fsck --no-progress && git status --porcelain | wc -l",
    );
    assert_eq!(out, " M src/f1.txt\nline 1\nchanged\n0\n");
}

#[test]
fn extracting_a_tar_of_thousands_of_files_matches_the_source() {
    require_fuse();
    let src = tempfile::tempdir().unwrap();
    sh(
        src.path(),
        "set -e; for d in $(seq 1 40); do mkdir -p t/d$d; for f in $(seq 1 60); do echo \"$d/$f\" > t/d$d/f$f; done; done; ln -s d1/f1 t/link; chmod 755 t/d1/f2; tar cf ../t.tar t",
    );
    let m = Mounted::new();
    let tarball = src.path().parent().unwrap().join("t.tar");
    sh(&m.dir, &format!("tar xf {}", tarball.display()));
    assert_eq!(tree(&src.path().join("t")), tree(&m.p("t")));
    let _ = fs::remove_file(tarball);
    sh(&m.dir, "rm -rf t");
    assert!(!m.p("t").exists());
}

#[test]
fn cargo_builds_a_small_crate() {
    require_fuse();
    require_command("cargo", "cargo");
    let m = Mounted::new();
    sh(
        &m.dir,
        "set -e; mkdir -p c/src; printf '[package]\\nname = \"c\"\\nversion = \"0.1.0\"\\nedition = \"2021\"\\n' > c/Cargo.toml; printf 'mod m;\\nfn main() { println!(\"{}\", m::f()); }\\n' > c/src/main.rs; printf 'pub fn f() -> u32 { 42 }\\n' > c/src/m.rs",
    );
    let out = sh(
        &m.p("c"),
        "CARGO_TARGET_DIR=target cargo run -q --offline 2>&1",
    );
    assert_eq!(out.trim(), "42");
}

#[test]
fn sqlite_in_wal_mode_works() {
    require_fuse();
    let m = Mounted::new();
    let path = m.p("db.sqlite");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        c.execute_batch("CREATE TABLE t(x INTEGER); BEGIN;")
            .unwrap();
        for i in 0..2000 {
            c.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
        }
        c.execute_batch("COMMIT;").unwrap();
        let c2 = rusqlite::Connection::open(&path).unwrap();
        let n: i64 = c2
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2000);
        assert!(m.p("db.sqlite-wal").exists());
    }
    let c = rusqlite::Connection::open(&path).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn python_venv_is_created_and_runs() {
    require_fuse();
    require_command("python3", "python3 python3-venv");
    let m = Mounted::new();
    let out = sh(
        &m.dir,
        "python3 -m venv venv && venv/bin/python -c 'import sys; print(sys.prefix.endswith(\"venv\"))' && venv/bin/pip --version >/dev/null && echo pip-ok",
    );
    assert_eq!(out, "True\npip-ok\n");
}

#[test]
fn several_processes_write_rename_and_list_at_once_without_loss() {
    require_fuse();
    let m = Mounted::new();
    let mut kids = Vec::new();
    for w in 0..4 {
        let script = format!(
            "set -e; mkdir -p w{w}; for i in $(seq 1 200); do echo \"w{w} $i\" > w{w}/tmp.$i; mv w{w}/tmp.$i w{w}/f$i; ls w{w} > /dev/null; done"
        );
        kids.push(
            Command::new("bash")
                .arg("-c")
                .arg(script)
                .current_dir(&m.dir)
                .spawn()
                .unwrap(),
        );
    }
    kids.push(
        Command::new("bash")
            .arg("-c")
            .arg("for i in $(seq 1 200); do ls -R . > /dev/null; done")
            .current_dir(&m.dir)
            .spawn()
            .unwrap(),
    );
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    for w in 0..4 {
        for i in 1..=200 {
            let p = m.p(&format!("w{w}/f{i}"));
            assert_eq!(
                fs::read_to_string(&p).unwrap(),
                format!("w{w} {i}\n"),
                "{}",
                p.display()
            );
        }
        assert_eq!(fs::read_dir(m.p(&format!("w{w}"))).unwrap().count(), 200);
    }
    let _ = Path::new("");
}

/// The daemon's fds stay bounded: files the kernel opens are read and written through an fd
/// of their node, kept in a cache of at most 4,096 (the open-file limit here is 20,000, so a
/// leak would end the mount on a large tree), and closed once the kernel forgets the node.
#[test]
fn released_files_are_closed() {
    require_fuse();
    // It counts the fds of nodes the kernel holds: a forget of them all would close them.
    let _caches = crate::support::KERNEL_CACHES
        .read()
        .unwrap_or_else(|e| e.into_inner());
    let m = Mounted::new();
    let fds = |pid: u32| fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    let pid = m.daemon_pid();
    let before = fds(pid);
    sh(
        &m.dir,
        "set -e; mkdir d; for i in $(seq 1 5000); do echo $i > d/f$i; done; for i in $(seq 1 5000); do : > d/f$i; done",
    );
    // As git stores objects: a link to the final name, then the temporary name removed. The
    // file keeps a name, so its fd need not outlive the cache.
    sh(
        &m.dir,
        "set -e; for i in $(seq 1 5000); do ln d/f$i d/g$i; rm d/f$i; done",
    );
    let during = fds(pid);
    assert!(
        during <= before + 4096 + 16,
        "the daemon holds {during} fds (was {before}): the node cache is not bounded"
    );
    assert!(
        during > before + 1000,
        "{during} fds (was {before}): the truncated files' nodes should have kept theirs"
    );
    assert_eq!(fs::read_to_string(m.p("d/g1")).unwrap(), "");
    assert_eq!(fs::read_dir(m.p("d")).unwrap().count(), 5000);
    sh(&m.dir, "rm -r d");
    assert!(
        crate::support::wait_until(10, || fds(pid) <= before + 16),
        "the daemon still holds {} fds (was {before}) once the files are gone",
        fds(pid)
    );
}
