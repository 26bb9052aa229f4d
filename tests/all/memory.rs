//! The daemon's memory: what it holds for the nodes the kernel knows, and gives back.

use std::fs;

use crate::support::{KERNEL_CACHES, Mounted, proc_status_bytes, require_fuse, sh, wait_until};

/// A process's resident memory, in bytes.
fn resident(pid: u32) -> u64 {
    proc_status_bytes(pid, "VmRSS")
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
    let m = Mounted::with_env(
        |d| {
            for i in 0..FILES {
                let dir = d.join(format!("many/{:02}", i % DIRS));
                if i < DIRS {
                    fs::create_dir_all(&dir).unwrap();
                }
                // Long names (the table keeps each once): 5 MiB of them in all, which stand
                // out of what else the daemon allocates and frees meanwhile.
                let name = format!("{}-{i:06}", "long-name".repeat(22));
                fs::write(dir.join(name), b"").unwrap();
            }
        },
        &[("REWINDFS_LOG", "rewindfs::capture::log=debug,info")],
    );
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
    let trims = || {
        fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("heap trimmed")
            .count()
    };
    let before = trims();
    // The kernel drops its dentries and inodes (every mount's: the tests that count what a
    // mount is sent wait), and sends a FORGET for each.
    let _caches = KERNEL_CACHES.write().unwrap_or_else(|e| e.into_inner());
    sh(&m.dir, "sync; echo 2 > /proc/sys/vm/drop_caches");
    // Once the forgets have settled.
    assert!(
        wait_until(10, || trims() > before),
        "the daemon did not trim its heap after the kernel forgot {FILES} nodes ({} trims in {})",
        trims(),
        log.display()
    );
    // How much comes back depends on what else shares the freed pages. Without the trim, the
    // daemon held more than before.
    let now = resident(pid);
    assert!(
        now + (2 << 20) < looked,
        "the daemon kept its heap after the kernel forgot {FILES} nodes: {idle} bytes idle, \
         {looked} after the look-ups, {now} after the forgets"
    );
}
