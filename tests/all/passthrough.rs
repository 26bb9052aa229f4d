//! `--passthrough` (src/fs/opens.rs): a reader is served by the kernel straight from the backing
//! file; a writer comes to the daemon, which saves pre-images, unless a reader passes through
//! already: then the writer passes through too, its file's whole pre-image saved when it opens
//! and at every message boundary while it stays open. No open is refused for its mode.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::agent::Agent;
use crate::support::{Mounted, require_fuse};

/// Reads all of `f` from its start.
fn read_all(f: &mut File) -> String {
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    s
}

/// The workspace directory as it is under the mount, opened before the mount covers it: a way
/// to change a file behind the daemon's back.
struct Under(File);

impl Under {
    fn open(d: &Path) -> Under {
        Under(File::open(d).unwrap())
    }

    fn p(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{rel}", self.0.as_raw_fd()))
    }
}

/// Only a reader served from the backing file sees bytes written behind the daemon's back: a
/// reader through the daemon keeps the pages it cached. The same steps without `--passthrough`
/// show the difference, so this fails if passthrough is not in effect.
#[test]
fn with_passthrough_a_reader_reads_the_backing_file_itself() {
    require_fuse();
    for (args, passes) in [(&[][..], false), (&["--passthrough"][..], true)] {
        let mut under = None;
        let m = Mounted::with_args(
            |d| {
                fs::write(d.join("f"), b"old\n").unwrap();
                under = Some(Under::open(d));
            },
            args,
        );
        let under = under.unwrap();
        let status = rewindfs::control::client::Client::connect(&m.socket())
            .unwrap()
            .request("status", serde_json::json!({}))
            .unwrap();
        assert_eq!(
            status["passthrough"],
            if passes { "on" } else { "off" },
            "mount {args:?}: status says whether passthrough is in effect"
        );
        let mut r = File::open(m.p("f")).unwrap();
        assert_eq!(read_all(&mut r), "old\n");
        fs::write(under.p("f"), b"NEW\n").unwrap();
        assert_eq!(
            read_all(&mut r) == "NEW\n",
            passes,
            "mount {args:?}: a reader {} the backing file",
            if passes { "reads" } else { "does not read" }
        );
    }
}

/// A file open for writing (its pages cached) is read through the daemon by a later reader: a
/// passthrough open then would be refused by the kernel (EIO).
#[test]
fn a_reader_of_a_file_open_for_writing_is_not_refused_and_sees_the_writes() {
    require_fuse();
    let m = Mounted::with_args(
        |d| fs::write(d.join("f"), b"0123456789").unwrap(),
        &["--passthrough"],
    );
    let w = OpenOptions::new().write(true).open(m.p("f")).unwrap();
    w.write_all_at(b"AB", 0).unwrap();
    assert_eq!(fs::read(m.p("f")).unwrap(), b"AB23456789");
    let mut r = File::open(m.p("f")).unwrap();
    w.write_all_at(b"CD", 2).unwrap();
    assert_eq!(read_all(&mut r), "ABCD456789");
}

/// A writer that opens a file while a reader passes through must pass through too (the kernel
/// refuses anything else): the daemon sees none of its writes, so it saves the file's whole
/// pre-image when the writer opens, and again at each message boundary while it stays open.
/// The reader sees each write at once, and a rewind gives each checkpoint's content back.
#[test]
fn a_writer_beside_a_passthrough_reader_is_captured_across_a_boundary_and_rewound() {
    require_fuse();
    let mut a = Agent::with_args(
        |d| fs::write(d.join("f"), b"one\n").unwrap(),
        &["--passthrough"],
    );
    let t1 = a.turn();
    let mut r = File::open(a.m.p("f")).unwrap();
    assert_eq!(read_all(&mut r), "one\n");
    let w = OpenOptions::new().write(true).open(a.m.p("f")).unwrap();
    w.write_all_at(b"two\n", 0).unwrap();
    assert_eq!(read_all(&mut r), "two\n");
    let t2 = a.turn();
    // The same fds, after the boundary: the daemon must still see this first change of t2.
    w.write_all_at(b"333\n", 0).unwrap();
    assert_eq!(read_all(&mut r), "333\n");
    drop(w);
    a.rewind(&t2, "all", false).unwrap();
    assert_eq!(
        read_all(&mut r),
        "two\n",
        "the reader sees the rewound bytes"
    );
    drop(r);
    assert_eq!(fs::read_to_string(a.m.p("f")).unwrap(), "two\n");
    a.rewind(&t1, "all", false).unwrap();
    assert_eq!(fs::read_to_string(a.m.p("f")).unwrap(), "one\n");
}

/// A writer beside a passthrough reader bypasses the node's page cache, so the first cached
/// open after it must not keep the pages cached before it.
#[test]
fn after_a_passthrough_writer_a_cached_open_sees_its_bytes() {
    require_fuse();
    let m = Mounted::with_args(
        |d| fs::write(d.join("f"), b"aaaa").unwrap(),
        &["--passthrough"],
    );
    let mut rw = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("f"))
        .unwrap();
    assert_eq!(read_all(&mut rw), "aaaa", "cached in the node's pages");
    drop(rw);
    let r = File::open(m.p("f")).unwrap();
    let w = OpenOptions::new().write(true).open(m.p("f")).unwrap();
    w.write_all_at(b"bbbb", 0).unwrap();
    drop(w);
    drop(r);
    let mut rw = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("f"))
        .unwrap();
    assert_eq!(read_all(&mut rw), "bbbb");
}

/// The same for writes through a shared mapping of a passthrough writer: the pages are the
/// backing file's, so the daemon sees none of them; the pre-image saved at the boundary holds
/// what was written before it, and a rewind gives it back.
#[test]
fn mmap_writes_of_a_passthrough_writer_are_captured_at_the_boundary() {
    require_fuse();
    let mut a = Agent::with_args(
        |d| fs::write(d.join("m.bin"), vec![b'.'; 8192]).unwrap(),
        &["--passthrough"],
    );
    a.turn();
    let r = File::open(a.m.p("m.bin")).unwrap();
    let mut py = Command::new("python3")
        .arg("-c")
        .arg(
            "import mmap,sys\n\
             f=open('m.bin','r+b')\n\
             m=mmap.mmap(f.fileno(),0)\n\
             m[0:6]=b'FIRST!'\n\
             print('written', flush=True)\n\
             sys.stdin.readline()\n\
             m[0:6]=b'SECOND'\n\
             m.flush()\n\
             print('again', flush=True)\n\
             sys.stdin.readline()\n",
        )
        .current_dir(&a.m.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(py.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "written\n");
    let t2 = a.turn();
    let mut stdin = py.stdin.take().unwrap();
    writeln!(stdin).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "again\n");
    assert!(r.read_at_vec(0, 6).starts_with(b"SECOND"));
    drop(stdin);
    py.wait().unwrap();
    drop(r);
    a.rewind(&t2, "all", false).unwrap();
    let now = fs::read(a.m.p("m.bin")).unwrap();
    assert_eq!(
        &now[..6],
        b"FIRST!",
        "the state when the second message began"
    );
    assert_eq!(now.len(), 8192);
}

/// Reads `n` bytes at `off`.
trait ReadAtVec {
    fn read_at_vec(&self, off: u64, n: usize) -> Vec<u8>;
}

impl ReadAtVec for File {
    fn read_at_vec(&self, off: u64, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        let got = self.read_at(&mut buf, off).unwrap();
        buf.truncate(got);
        buf
    }
}
