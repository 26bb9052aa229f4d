//! The FUSE requests an operation costs, counted with the kernel's `fuse_request_send`
//! tracepoint for the test's own mount (`scripts/fuse-trace.sh` does the same by hand).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::agent::uuid;
use crate::support::{KERNEL_CACHES, Mounted, require_fuse, rewindfs_ok};

const TRACING: &str = "/sys/kernel/tracing";

/// The requests the kernel sends to one mount while it is alive. Only one test uses the
/// tracepoint; the filter keeps other tests' mounts out.
struct Trace {
    event: PathBuf,
}

impl Trace {
    fn start(mount: &Path) -> Trace {
        let t = Path::new(TRACING);
        let event = t.join("events/fuse/fuse_request_send");
        assert!(
            event.is_dir(),
            "this test counts FUSE requests with the kernel's tracepoint {} (Linux >= 6.13, \
             tracefs mounted on {TRACING}, root)",
            event.display()
        );
        let dev = fs::metadata(mount).unwrap().dev();
        let conn = (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev));
        fs::write(t.join("tracing_on"), "0").unwrap();
        fs::write(t.join("trace"), "").unwrap();
        fs::write(event.join("filter"), format!("connection == {conn}")).unwrap();
        fs::write(event.join("enable"), "1").unwrap();
        fs::write(t.join("tracing_on"), "1").unwrap();
        Trace { event }
    }

    /// Stops tracing; the number of requests of each opcode.
    fn stop(self) -> BTreeMap<String, usize> {
        fs::write(Path::new(TRACING).join("tracing_on"), "0").unwrap();
        let text = fs::read_to_string(Path::new(TRACING).join("trace")).unwrap();
        let mut n = BTreeMap::new();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            if let Some(op) = l.split(['(', ')']).nth(1) {
                *n.entry(op.to_string()).or_default() += 1;
            }
        }
        n
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let _ = fs::write(Path::new(TRACING).join("tracing_on"), "0");
        let _ = fs::write(self.event.join("enable"), "0");
        let _ = fs::write(self.event.join("filter"), "0");
    }
}

/// A live rewind writes each file through the mount with two requests, a WRITE and the cut
/// to length. It used to stat each file in full first: the kernel then asked the daemon for
/// the file's attributes (a write had left their times stale), and that answer made it forget
/// that the file has no `security.capability`, which the write asked for again: four requests
/// a file.
#[test]
fn a_rewind_writes_each_file_with_a_write_and_a_cut() {
    require_fuse();
    // A forget would make the kernel ask for `security.capability` again (`support.rs`).
    let _caches = KERNEL_CACHES.read().unwrap_or_else(|e| e.into_inner());
    const FILES: usize = 30;
    let m = Mounted::new();
    let sock = m.socket();
    let sock = sock.to_str().unwrap();
    let name = |i: usize| m.p(&format!("d{}/f{i}", i % 3));
    let version = |i: usize, v: &str| -> String {
        // Shorter, as long and longer than the content the rewind puts back.
        format!("file {i} {v}{}\n", "x".repeat(i % 3 * 4))
    };
    for d in 0..3 {
        fs::create_dir(m.p(&format!("d{d}"))).unwrap();
    }
    for i in 0..FILES {
        fs::write(name(i), version(i, "one.")).unwrap();
    }
    let cp = uuid();
    rewindfs_ok(&["checkpoint", &cp, "--session", "s", "--socket", sock]);
    for i in 0..FILES {
        let v = ["two", "two!", "two!!!!!"][i % 3];
        fs::write(name(i), version(i, v)).unwrap();
    }
    let trace = Trace::start(&m.dir);
    rewindfs_ok(&["rewind", &cp, "--scope", "all", "--socket", sock]);
    let n = trace.stop();
    for i in 0..FILES {
        assert_eq!(fs::read_to_string(name(i)).unwrap(), version(i, "one."));
    }
    let count = |op: &str| n.get(op).copied().unwrap_or(0);
    assert_eq!(
        (count("FUSE_WRITE"), count("FUSE_SETATTR")),
        (FILES, FILES),
        "a WRITE and a SETATTR (the cut) a file: {n:?}"
    );
    assert_eq!(
        (count("FUSE_GETATTR"), count("FUSE_GETXATTR")),
        (0, 0),
        "no attribute look-up, no security.capability look-up: {n:?}"
    );
}
