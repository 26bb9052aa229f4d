//! The daemon's memory: what it holds for the nodes the kernel knows, and gives back.

use std::fs;
use std::path::Path;

use crate::agent::uuid;
use crate::support::{
    KERNEL_CACHES, Mounted, proc_status_bytes, require_fuse, rewindfs_ok, sh, wait_until,
};

/// A process's resident memory, in bytes.
fn resident(pid: u32) -> u64 {
    proc_status_bytes(pid, "VmRSS")
}

/// How many times the daemon logging to `log` has trimmed its heap (it logs each at debug).
fn trims(log: &Path) -> usize {
    fs::read_to_string(log)
        .unwrap_or_default()
        .matches("heap trimmed")
        .count()
}

/// Waits up to 10 s for a trim after the first `before`; `after` says what it should follow.
fn wait_for_trim(log: &Path, before: usize, after: &str) {
    assert!(
        wait_until(10, || trims(log) > before),
        "the daemon did not trim its heap after {after} ({} trims in {})",
        trims(log),
        log.display()
    );
}

/// A mount over `files` empty files under `many/`, in `dirs` directories, with the flusher's
/// trims logged. Their names are long (about 200 bytes; the table keeps each once), so that
/// their memory stands out of what else the daemon allocates and frees meanwhile.
fn many_long_names(dirs: usize, files: usize) -> Mounted {
    Mounted::with_env(
        |d| {
            for i in 0..files {
                let dir = d.join(format!("many/{:02}", i % dirs));
                if i < dirs {
                    fs::create_dir_all(&dir).unwrap();
                }
                fs::write(dir.join(format!("{}-{i:06}", "long-name".repeat(22))), b"").unwrap();
            }
        },
        &[("REWINDFS_LOG", "rewindfs::capture::log=debug,info")],
    )
}

/// When the kernel forgets the nodes it looked up, the daemon removes them and hands the heap
/// they took back to the system. The allocator kept it before: after an extract and its
/// `rm -rf`, the bench's look-up of 100k inodes found the daemon at 64.9 MiB instead of 38.4.
#[test]
fn forgotten_nodes_give_their_memory_back() {
    require_fuse();
    // Creating a file takes about 200 µs on these machines' ext4: 5 s for the lot.
    const DIRS: usize = 24;
    const FILES: usize = DIRS * 1000;
    // Long names: 5 MiB of them in all.
    let m = many_long_names(DIRS, FILES);
    let pid = m.daemon_pid();
    let idle = resident(pid);
    // One LOOKUP (or readdirplus entry) a file: a node each in the daemon's table.
    let n = sh(&m.dir, "ls -lR many | grep -c long-name");
    assert_eq!(n.trim(), FILES.to_string(), "`ls -lR` lists each file");
    let looked = resident(pid);
    assert!(
        looked > idle + (8 << 20),
        "{FILES} nodes should take megabytes: {idle} bytes idle, {looked} after the look-ups"
    );
    let log = m.store.join("daemon.log");
    let before = trims(&log);
    // The kernel drops its dentries and inodes (every mount's: the tests that count what a
    // mount is sent wait), and sends a FORGET for each.
    let _caches = KERNEL_CACHES.write().unwrap_or_else(|e| e.into_inner());
    sh(&m.dir, "sync; echo 2 > /proc/sys/vm/drop_caches");
    // Once the forgets have settled.
    wait_for_trim(&log, before, &format!("the kernel forgot {FILES} nodes"));
    // How much comes back depends on what else shares the freed pages. Without the trim, the
    // daemon held more than before.
    let now = resident(pid);
    assert!(
        now + (2 << 20) < looked,
        "the daemon kept its heap after the kernel forgot {FILES} nodes: {idle} bytes idle, \
         {looked} after the look-ups, {now} after the forgets"
    );
}

/// What a rewind takes (its plan, the pre-images read ahead of its helper, the journal's batches)
/// is freed when it is done, and the flusher hands the heap back once the journal's records have
/// stopped coming. Before, the daemon kept it: after three rewinds of 10k files it held 42.8 MiB,
/// and 28.3 MiB once trimmed by hand.
#[test]
fn a_rewind_gives_its_memory_back() {
    require_fuse();
    const DIRS: usize = 20;
    const FILES: usize = DIRS * 300;
    let name = |i: usize| format!("many/{:02}/{}-{i:05}", i % DIRS, "long-name".repeat(20));
    let m = Mounted::with_env(
        |d| {
            for i in 0..DIRS {
                fs::create_dir_all(d.join(format!("many/{i:02}"))).unwrap();
            }
            for i in 0..FILES {
                fs::write(d.join(name(i)), format!("version one of {i}\n")).unwrap();
            }
        },
        &[("REWINDFS_LOG", "rewindfs::capture::log=debug,info")],
    );
    let pid = m.daemon_pid();
    let log = m.store.join("daemon.log");
    let sock = m.socket();
    let sock = sock.to_str().unwrap();
    let turn = uuid();
    rewindfs_ok(&["checkpoint", &turn, "--session", "s", "--socket", sock]);
    let before_writes = trims(&log);
    for i in 0..FILES {
        fs::write(m.p(&name(i)), format!("version two of {i}, longer\n")).unwrap();
    }
    // The writes' own records are a burst too: their trim comes first.
    wait_for_trim(&log, before_writes, &format!("{FILES} changes"));
    let base = resident(pid);
    let before = trims(&log);
    rewindfs_ok(&["rewind", &turn, "--scope", "all", "--socket", sock]);
    assert_eq!(
        fs::read_to_string(m.p(&name(7))).unwrap(),
        "version one of 7\n"
    );
    // The trim comes once no record was applied for 200 ms: read before it, unless the
    // machine held this thread up that long (then only the trim itself is checked).
    let rewound = resident(pid);
    let trimmed_already = trims(&log) > before;
    wait_for_trim(&log, before, &format!("a rewind of {FILES} files"));
    let now = resident(pid);
    eprintln!("resident: {base} before the rewind, {rewound} after it, {now} after the trim");
    // Some of it stays: the checkpoint holds each path the rewind changed, and with other tests
    // running beside this one what the trim frees varies (11 to 21 MiB of 23 measured). Without
    // the trim after records there is none to wait for above.
    assert!(
        trimmed_already || now + (4 << 20) < rewound,
        "the daemon kept what the rewind took: {base} bytes before it, {rewound} after it, \
         {now} after the trim"
    );
}

/// The kernel forgets its nodes and looks them up again, over and over (it reclaims its caches
/// under memory pressure; the bench drops them before each look-up of 100k inodes): the daemon
/// holds no more at the third look-up than at the first. The inode table's maps, shrunk at each
/// forget and grown at each look-up, were each time put where the heap had room, and a trim
/// could not hand back what was left around them: with 60k nodes the daemon held 46.5 MiB after
/// the first look-up and 60.0 MiB after the second. Each now has a mapping of its own
/// (`sys::tune_allocator`).
#[test]
fn looking_the_same_nodes_up_again_takes_no_more_memory() {
    require_fuse();
    // Above 57,344 nodes the table's main map takes 5 MiB (65,536 slots of 80 bytes), and more
    // than `sys::OWN_MAPPING_FROM`.
    const DIRS: usize = 40;
    const FILES: usize = DIRS * 1500;
    let m = many_long_names(DIRS, FILES);
    let pid = m.daemon_pid();
    let log = m.store.join("daemon.log");
    let _caches = KERNEL_CACHES.write().unwrap_or_else(|e| e.into_inner());
    let idle = resident(pid);
    let (mut looked, mut forgotten) = (Vec::new(), Vec::new());
    for round in 0..3 {
        let n = sh(&m.dir, "ls -lR many | grep -c long-name");
        assert_eq!(n.trim(), FILES.to_string(), "`ls -lR` lists each file");
        looked.push(resident(pid));
        let before = trims(&log);
        sh(&m.dir, "sync; echo 2 > /proc/sys/vm/drop_caches");
        wait_for_trim(
            &log,
            before,
            &format!("the kernel forgot {FILES} nodes ({round})"),
        );
        forgotten.push(resident(pid));
    }
    eprintln!(
        "resident: {idle} idle; after each look-up of {FILES} nodes {looked:?}, after each \
         forget {forgotten:?}"
    );
    // Measured with each map on the heap instead: 48-50 MiB after the first look-up and up to
    // 57 MiB after the third; 36-37 MiB after the second and third forgets (17.5 idle). With
    // their own mappings: 44.5-47.3 MiB and 19.5-21 MiB.
    let first = looked[0];
    let most = *looked.iter().max().unwrap();
    assert!(
        most < first + (4 << 20),
        "the daemon held more each time the kernel looked the same {FILES} nodes up again: \
         {looked:?} bytes"
    );
    let kept = *forgotten.iter().max().unwrap();
    assert!(
        kept < idle + (8 << 20),
        "the daemon kept the memory of {FILES} nodes the kernel forgot: {idle} bytes idle, \
         {forgotten:?} after each forget"
    );
}
