//! Differential POSIX test: one operation script, run on a plain temp dir and through a
//! mount; every return value and errno must match.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::support::{Mounted, require_fuse, sh, sh_as_nobody};

fn res<T: std::fmt::Debug>(r: io::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!(
            "err {}",
            e.raw_os_error()
                .map(|c| c.to_string())
                .unwrap_or_else(|| e.to_string())
        ),
    }
}

fn rx<T: std::fmt::Debug>(r: rustix::io::Result<T>) -> String {
    res(r.map_err(|e| io::Error::from_raw_os_error(e.raw_os_error())))
}

/// What a stat shows that must match natively: type, mode, nlink, size, owner.
fn st(p: &Path) -> String {
    match fs::symlink_metadata(p) {
        Ok(m) => format!(
            "{:o} nlink={} size={} uid={} gid={}",
            m.mode(),
            m.nlink(),
            m.size(),
            m.uid(),
            m.gid()
        ),
        Err(e) => format!("err {}", e.raw_os_error().unwrap_or(0)),
    }
}

/// The script. Each line of the result is one step's outcome.
fn script(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut log = |name: &str, r: String| out.push(format!("{name}: {r}"));
    let dfd = rustix::fs::open(d, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();

    // create, O_EXCL, write, read
    log(
        "create",
        res(File::create(d.join("f")).and_then(|mut f| f.write_all(b"hello world\n"))),
    );
    log(
        "excl",
        res(OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(d.join("f"))
            .map(|_| ())),
    );
    log(
        "read",
        res(fs::read(d.join("f")).map(|v| String::from_utf8(v).unwrap())),
    );
    log("stat f", st(&d.join("f")));
    // O_APPEND
    log(
        "append",
        res(OpenOptions::new()
            .append(true)
            .open(d.join("f"))
            .and_then(|mut f| f.write_all(b"more\n"))),
    );
    log("read2", res(fs::read_to_string(d.join("f"))));
    // O_TRUNC
    log(
        "trunc",
        res(OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(d.join("f"))
            .and_then(|mut f| f.write_all(b"x"))),
    );
    log("read3", res(fs::read_to_string(d.join("f"))));
    // positional write past EOF makes a hole
    log(
        "pwrite",
        res(OpenOptions::new()
            .write(true)
            .open(d.join("f"))
            .and_then(|f| {
                use std::os::unix::fs::FileExt;
                f.write_at(b"end", 100_000).map(|_| ())
            })),
    );
    log("stat hole", st(&d.join("f")));
    log(
        "seek data/hole",
        res(File::open(d.join("f")).map(|f| {
            let data = rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(0)).ok();
            let hole = rustix::fs::seek(&f, rustix::fs::SeekFrom::Hole(0)).ok();
            (data, hole.is_some())
        })),
    );
    // truncate via setattr, chmod, chown, utimes
    log(
        "set_len",
        res(OpenOptions::new()
            .write(true)
            .open(d.join("f"))
            .and_then(|f| f.set_len(7))),
    );
    log("stat trunc", st(&d.join("f")));
    log(
        "chmod",
        res(fs::set_permissions(
            d.join("f"),
            fs::Permissions::from_mode(0o640),
        )),
    );
    log(
        "chown",
        res(std::os::unix::fs::chown(
            d.join("f"),
            Some(1234),
            Some(4321),
        )),
    );
    log("stat chown", st(&d.join("f")));
    log(
        "chmod suid",
        res(fs::set_permissions(
            d.join("f"),
            fs::Permissions::from_mode(0o4755),
        )),
    );
    log("stat suid", st(&d.join("f")));
    let ts = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 1_000_000,
            tv_nsec: 5,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
    };
    log(
        "utimens omit",
        rx(rustix::fs::utimensat(&dfd, "f", &ts, AtFlags::empty())),
    );
    let m = fs::metadata(d.join("f")).unwrap();
    log("atime set", format!("{} {}", m.atime(), m.atime_nsec()));
    let ts = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 2_000_000,
            tv_nsec: 7,
        },
    };
    log(
        "utimens mtime",
        rx(rustix::fs::utimensat(&dfd, "f", &ts, AtFlags::empty())),
    );
    let m = fs::metadata(d.join("f")).unwrap();
    log(
        "times",
        format!("a={} m={}.{}", m.atime(), m.mtime(), m.mtime_nsec()),
    );
    let ts = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
    };
    log(
        "utimens now",
        rx(rustix::fs::utimensat(&dfd, "f", &ts, AtFlags::empty())),
    );
    let m = fs::metadata(d.join("f")).unwrap();
    log(
        "now is recent",
        format!("{}", (m.mtime() - 2_000_000) > 1_000_000),
    );

    // directories
    log("mkdir", res(fs::create_dir(d.join("dir"))));
    log("mkdir again", res(fs::create_dir(d.join("dir"))));
    log(
        "mkdir mode",
        res(fs::DirBuilder::new()
            .mode(0o700)
            .create(d.join("dir/private"))),
    );
    log("stat private", st(&d.join("dir/private")));
    log("rmdir nonempty", res(fs::remove_dir(d.join("dir"))));
    log("rmdir file", res(fs::remove_dir(d.join("f"))));
    log("unlink dir", res(fs::remove_file(d.join("dir"))));
    log("unlink missing", res(fs::remove_file(d.join("nope"))));
    log(
        "open missing",
        res(File::open(d.join("nope/x")).map(|_| ())),
    );
    log("open notdir", res(File::open(d.join("f/x")).map(|_| ())));
    log(
        "readdir",
        res(fs::read_dir(d.join("dir"))
            .map(|it| it.map(|e| e.unwrap().file_name()).collect::<Vec<_>>())),
    );

    // rename: plain, over a file, NOREPLACE, EXCHANGE, dir over file, into own subdir
    fs::write(d.join("a"), b"A").unwrap();
    fs::write(d.join("b"), b"B").unwrap();
    log("rename plain", res(fs::rename(d.join("a"), d.join("a2"))));
    log("rename over", res(fs::rename(d.join("a2"), d.join("b"))));
    log("read b", res(fs::read_to_string(d.join("b"))));
    fs::write(d.join("c"), b"C").unwrap();
    log(
        "noreplace",
        rx(rustix::fs::renameat_with(
            &dfd,
            "c",
            &dfd,
            "b",
            rustix::fs::RenameFlags::NOREPLACE,
        )),
    );
    log(
        "exchange",
        rx(rustix::fs::renameat_with(
            &dfd,
            "c",
            &dfd,
            "b",
            rustix::fs::RenameFlags::EXCHANGE,
        )),
    );
    log(
        "after exchange",
        format!(
            "{:?} {:?}",
            fs::read_to_string(d.join("b")).ok(),
            fs::read_to_string(d.join("c")).ok()
        ),
    );
    log("dir over file", res(fs::rename(d.join("dir"), d.join("b"))));
    log("file over dir", res(fs::rename(d.join("b"), d.join("dir"))));
    log(
        "into own subdir",
        res(fs::rename(d.join("dir"), d.join("dir/private/x"))),
    );
    fs::create_dir(d.join("empty")).unwrap();
    log(
        "dir over empty dir",
        res(fs::rename(d.join("dir"), d.join("empty"))),
    );
    log(
        "tree after",
        res(fs::read_dir(d.join("empty")).map(|it| it.count())),
    );

    // symlinks
    log(
        "symlink",
        res(std::os::unix::fs::symlink("target/../x", d.join("ln"))),
    );
    log("readlink", res(fs::read_link(d.join("ln"))));
    log("stat link", st(&d.join("ln")));
    log("dangling open", res(File::open(d.join("ln")).map(|_| ())));
    log(
        "symlink exists",
        res(std::os::unix::fs::symlink("y", d.join("ln"))),
    );
    log(
        "chmod via link",
        res(std::os::unix::fs::symlink("c", d.join("ln2"))
            .and_then(|_| fs::read_to_string(d.join("ln2")))),
    );

    // hard links: every name shows the same nlink, mode and ctime
    fs::write(d.join("h1"), b"H").unwrap();
    log("link", res(fs::hard_link(d.join("h1"), d.join("h2"))));
    log(
        "link exists",
        res(fs::hard_link(d.join("h1"), d.join("h2"))),
    );
    log(
        "link dir",
        res(fs::hard_link(d.join("empty"), d.join("h3"))),
    );
    log(
        "nlink both",
        format!("{} | {}", st(&d.join("h1")), st(&d.join("h2"))),
    );
    fs::set_permissions(d.join("h2"), fs::Permissions::from_mode(0o600)).unwrap();
    log("mode via other name", st(&d.join("h1")));
    log("link 3", res(fs::hard_link(d.join("h2"), d.join("h3"))));
    log("unlink h1", res(fs::remove_file(d.join("h1"))));
    log(
        "nlink after unlink",
        format!("{} | {}", st(&d.join("h2")), st(&d.join("h3"))),
    );
    log("rename h3", res(fs::rename(d.join("h3"), d.join("h4"))));
    let (m2, m4) = (
        fs::metadata(d.join("h2")).unwrap(),
        fs::metadata(d.join("h4")).unwrap(),
    );
    log(
        "same ctime and ino",
        format!(
            "{} {}",
            (m2.ctime(), m2.ctime_nsec()) == (m4.ctime(), m4.ctime_nsec()),
            m2.ino() == m4.ino()
        ),
    );

    // an open file that was unlinked keeps working
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(d.join("gone"))
        .unwrap();
    f.write_all(b"still here").unwrap();
    log("unlink open", res(fs::remove_file(d.join("gone"))));
    log(
        "fstat unlinked",
        format!(
            "nlink={} size={}",
            f.metadata().unwrap().nlink(),
            f.metadata().unwrap().len()
        ),
    );
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    log(
        "read unlinked",
        res(f.read_to_string(&mut s).map(|_| s.clone())),
    );
    log("write unlinked", res(f.write_all(b"!")));
    drop(f);

    // special files
    log(
        "mkfifo",
        rx(rustix::fs::mknodat(
            &dfd,
            "fifo",
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )),
    );
    log("stat fifo", st(&d.join("fifo")));
    log(
        "socket",
        res(std::os::unix::net::UnixListener::bind(d.join("sock")).map(|_| ())),
    );
    log("stat sock", st(&d.join("sock")));

    // names and paths
    let long = "n".repeat(256);
    log("name 256", res(File::create(d.join(&long)).map(|_| ())));
    log("stat 256", st(&d.join(&long)));
    let ok255 = "m".repeat(255);
    log("name 255", res(File::create(d.join(&ok255)).map(|_| ())));
    let mut deep = d.join("deep");
    let mut depth = d.as_os_str().len();
    while depth < 3800 {
        deep = deep.join("d".repeat(200));
        depth += 201;
    }
    log("deep mkdir", res(fs::create_dir_all(&deep)));
    log(
        "deep file",
        res(fs::write(deep.join("leaf"), b"deep")
            .and_then(|_| fs::read_to_string(deep.join("leaf")))),
    );

    // xattrs
    let fx = d.join("x");
    fs::write(&fx, b"x").unwrap();
    log(
        "setxattr",
        rx(rustix::fs::setxattr(
            &fx,
            "user.k",
            b"v1",
            rustix::fs::XattrFlags::empty(),
        )),
    );
    log(
        "setxattr create existing",
        rx(rustix::fs::setxattr(
            &fx,
            "user.k",
            b"v2",
            rustix::fs::XattrFlags::CREATE,
        )),
    );
    let mut buf = [0u8; 64];
    log(
        "getxattr",
        rx(rustix::fs::getxattr(&fx, "user.k", &mut buf[..])
            .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())),
    );
    log(
        "getxattr missing",
        rx(rustix::fs::getxattr(&fx, "user.nope", &mut buf[..])),
    );
    let mut small = [0u8; 1];
    log(
        "getxattr erange",
        rx(rustix::fs::getxattr(&fx, "user.k", &mut small[..])),
    );
    log(
        "listxattr",
        rx(rustix::fs::listxattr(&fx, &mut buf[..]).map(|n| {
            let mut v: Vec<_> = buf[..n]
                .split(|b| *b == 0)
                .filter(|s| s.starts_with(b"user."))
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            v.sort();
            v
        })),
    );
    log("removexattr", rx(rustix::fs::removexattr(&fx, "user.k")));

    // File capabilities: the daemon answers "none" from memory for files it created or
    // already asked about, so setting, writing (which drops them) and removing must all show.
    let fc = d.join("caps");
    fs::write(&fc, b"c").unwrap();
    let caps = |p: &Path| {
        let mut b = [0u8; 64];
        rx(rustix::fs::getxattr(p, "security.capability", &mut b[..]).map(|n| b[..n].to_vec()))
    };
    log("caps of a new file", caps(&fc));
    // VFS_CAP_REVISION_2 with the effective bit; permitted: CAP_NET_BIND_SERVICE.
    let mut v2 = Vec::new();
    for w in [0x0200_0001u32, 1 << 10, 0, 0, 0] {
        v2.extend_from_slice(&w.to_le_bytes());
    }
    let set_caps = |p: &Path| {
        rx(rustix::fs::setxattr(
            p,
            "security.capability",
            &v2,
            rustix::fs::XattrFlags::empty(),
        ))
    };
    log("set caps", set_caps(&fc));
    log("caps after set", caps(&fc));
    log(
        "write drops caps",
        res(OpenOptions::new()
            .append(true)
            .open(&fc)
            .and_then(|mut f| f.write_all(b"more"))),
    );
    log("caps after write", caps(&fc));
    log("set caps again", set_caps(&fc));
    log("caps set again", caps(&fc));
    log(
        "remove caps",
        rx(rustix::fs::removexattr(&fc, "security.capability")),
    );
    log("caps after remove", caps(&fc));
    log(
        "removexattr again",
        rx(rustix::fs::removexattr(&fx, "user.k")),
    );

    // fallocate, copy_file_range, access, statfs, locks
    let fa = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(d.join("falloc"))
        .unwrap();
    log(
        "fallocate",
        rx(rustix::fs::fallocate(
            &fa,
            rustix::fs::FallocateFlags::empty(),
            0,
            65536,
        )),
    );
    log("stat falloc", st(&d.join("falloc")));
    log(
        "punch",
        rx(rustix::fs::fallocate(
            &fa,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            0,
            4096,
        )),
    );
    drop(fa);
    fs::write(d.join("src"), b"0123456789").unwrap();
    let (fi, fo) = (
        File::open(d.join("src")).unwrap(),
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(d.join("dst"))
            .unwrap(),
    );
    let (mut oi, mut oo) = (2u64, 0u64);
    log(
        "copy_file_range",
        rx(rustix::fs::copy_file_range(
            &fi,
            Some(&mut oi),
            &fo,
            Some(&mut oo),
            5,
        )),
    );
    drop((fi, fo));
    log("read dst", res(fs::read_to_string(d.join("dst"))));
    log(
        "access",
        rx(rustix::fs::access(
            d.join("src"),
            rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK,
        )),
    );
    log(
        "access missing",
        rx(rustix::fs::access(d.join("zz"), rustix::fs::Access::EXISTS)),
    );
    log(
        "statfs namemax",
        rx(rustix::fs::statvfs(d).map(|s| s.f_namemax)),
    );
    let l1 = File::open(d.join("src")).unwrap();
    let l2 = File::open(d.join("src")).unwrap();
    log(
        "flock",
        rx(rustix::fs::flock(
            &l1,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        )),
    );
    log(
        "flock conflict",
        rx(rustix::fs::flock(
            &l2,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        )),
    );
    log(
        "fcntl lock",
        rx(rustix::fs::fcntl_lock(
            &l2,
            rustix::fs::FlockOperation::NonBlockingLockShared,
        )),
    );
    drop((l1, l2));

    // shared writable mmap (python, so the test stays free of unsafe code)
    fs::write(d.join("mm"), vec![b'.'; 8192]).unwrap();
    log(
        "mmap",
        sh(
            d,
            "python3 -c \"import mmap,os\nf=open('mm','r+b')\nm=mmap.mmap(f.fileno(),8192)\nm[0:5]=b'HELLO'\nm[4096:4101]=b'WORLD'\nm.flush()\nm.close()\nf.close()\nprint(open('mm','rb').read()[4090:4105])\"",
        ),
    );
    log(
        "mmap content",
        res(fs::read(d.join("mm")).map(|v| blake3::hash(&v).to_hex().to_string())),
    );

    let _ = OsStr::new("");
    out
}

#[test]
fn every_operation_behaves_as_on_the_native_filesystem_over_io_uring() {
    require_fuse();
    crate::transport::require_io_uring();
    differential(&["--io-uring", "on"]);
}

#[test]
fn every_operation_behaves_as_on_the_native_filesystem_over_dev_fuse() {
    require_fuse();
    differential(&["--io-uring", "off"]);
}

/// With `--passthrough` the kernel answers reads from the backing files, and every open is
/// answered by the daemon: the same script, the same results.
#[test]
fn every_operation_behaves_as_on_the_native_filesystem_with_passthrough() {
    require_fuse();
    differential(&["--passthrough"]);
}

/// Runs the script natively and through a mount made with `mount_args`; every step must give
/// the same result.
fn differential(mount_args: &[&str]) {
    let native = tempfile::Builder::new()
        .prefix("rwfs-native")
        .tempdir()
        .unwrap();
    let expected = script(native.path());
    let m = Mounted::with_args(|_| {}, mount_args);
    let got = script(&m.dir);
    let mut diffs = Vec::new();
    for (i, (e, g)) in expected.iter().zip(got.iter()).enumerate() {
        if e != g {
            diffs.push(format!("step {i}\n  native:   {e}\n  rewindfs: {g}"));
        }
    }
    assert_eq!(expected.len(), got.len());
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

#[test]
fn inode_numbers_are_stable_and_match_the_disk() {
    require_fuse();
    let mut m = Mounted::with(|d| fs::write(d.join("keep"), b"k").unwrap());
    let ino = fs::metadata(m.p("keep")).unwrap().ino();
    fs::rename(m.p("keep"), m.p("moved")).unwrap();
    fs::create_dir(m.p("sub")).unwrap();
    fs::rename(m.p("moved"), m.p("sub/moved")).unwrap();
    assert_eq!(fs::metadata(m.p("sub/moved")).unwrap().ino(), ino);
    m.umount();
    assert_eq!(
        fs::metadata(m.p("sub/moved")).unwrap().ino(),
        ino,
        "node id is the backing inode number"
    );
}

/// With FUSE_HANDLE_KILLPRIV_V2 the daemon clears set-user/group-ID bits itself: a write, a
/// truncate or an O_TRUNC open by an ordinary user clears them as on the native filesystem,
/// and root keeps them.
#[test]
fn setid_bits_are_cleared_as_natively_when_an_ordinary_user_writes_or_truncates() {
    require_fuse();
    fn run(d: &Path) -> Vec<String> {
        let setup = [
            ("w", 0o4777), // write by a user: suid goes
            ("t", 0o6777), // truncate: suid and sgid (group-executable) go
            ("g", 0o2767), // write: sgid without group-execute, writer not in the group: goes
            ("k", 0o2767), // the same, writer in the file's group: stays
            ("o", 0o4777), // O_TRUNC open
            ("r", 0o6777), // root writes: both stay
        ];
        for (name, mode) in setup {
            let p = d.join(name);
            fs::write(&p, b"data\n").unwrap();
            if name == "k" {
                std::os::unix::fs::chown(&p, None, Some(65534)).unwrap();
            }
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        }
        let user = "echo more >> w; truncate -s 1 t; echo more >> g; echo more >> k; : > o";
        sh_as_nobody(d, user);
        sh(d, "echo more >> r");
        setup
            .iter()
            .map(|(n, _)| {
                let md = fs::metadata(d.join(n)).unwrap();
                format!("{n} {:o} {}", md.permissions().mode() & 0o7777, md.len())
            })
            .collect()
    }
    let native = tempfile::Builder::new()
        .prefix("rwfs-native")
        .tempdir()
        .unwrap();
    fs::set_permissions(native.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let expected = run(native.path());
    assert_eq!(
        expected,
        [
            "w 777 10",
            "t 777 1",
            "g 767 10",
            "k 2767 10",
            "o 777 0",
            "r 6777 10"
        ],
        "the native filesystem behaves as this test assumes"
    );
    let m = Mounted::new();
    fs::set_permissions(m.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&m.dir, fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(run(&m.dir), expected);
}

/// Directories are listed without an open handle (OPENDIR is declined; each readdir continues
/// at the backing filesystem's position cookie): a listing that spans many getdents calls
/// while the directory changes shows every entry that stays exactly once, and `rm -rf` of a
/// large directory empties it.
#[test]
fn a_directory_listed_while_it_changes_shows_every_staying_entry_once() {
    require_fuse();
    let m = Mounted::new();
    let d = m.p("big");
    fs::create_dir(&d).unwrap();
    for i in 0..4000 {
        fs::write(d.join(format!("keep{i:04}")), b"").unwrap();
        if i % 2 == 0 {
            fs::write(d.join(format!("gone{i:04}")), b"").unwrap();
        }
    }
    let mut it = fs::read_dir(&d).unwrap();
    let mut seen: Vec<String> = Vec::new();
    for e in it.by_ref().take(300) {
        seen.push(e.unwrap().file_name().into_string().unwrap());
    }
    // Change the directory under the open listing: remove half of the "gone" files, add new ones.
    for i in (0..4000).step_by(4) {
        let _ = fs::remove_file(d.join(format!("gone{i:04}")));
        fs::write(d.join(format!("new{i:04}")), b"").unwrap();
    }
    for e in it {
        seen.push(e.unwrap().file_name().into_string().unwrap());
    }
    let mut keep: Vec<&String> = seen.iter().filter(|n| n.starts_with("keep")).collect();
    let total = keep.len();
    keep.sort();
    keep.dedup();
    assert_eq!(total, keep.len(), "an entry was listed twice");
    assert_eq!(keep.len(), 4000, "an entry that stayed was not listed");
    // A fresh listing is exact.
    let now = fs::read_dir(&d).unwrap().count();
    assert_eq!(now, 4000 + 1000 + 1000);
    sh(&m.dir, "rm -rf big");
    assert!(!d.exists());
}

/// A listing returns each entry with its attributes (READDIRPLUS, always: the kernel then needs
/// no LOOKUP per entry): what a stat then shows, without any other request, is exactly what the
/// disk holds, for every kind of entry, across the many requests a large directory takes; two
/// names of one file show one inode; and after a change through the mount, a new listing shows
/// the new attributes.
#[test]
fn a_listing_gives_every_entry_the_attributes_on_disk() {
    require_fuse();
    use std::os::unix::fs::symlink;
    let shown = |p: &Path| {
        let m = fs::symlink_metadata(p).unwrap();
        format!(
            "{:o} ino={} nlink={} size={} mtime={}.{}",
            m.mode(),
            m.ino(),
            m.nlink(),
            m.size(),
            m.mtime(),
            m.mtime_nsec()
        )
    };
    let listed = |d: &Path| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), shown(&e.path()))
            })
            .collect();
        v.sort();
        v
    };
    let mut m = Mounted::with(|root| {
        let d = root.join("d");
        fs::create_dir(&d).unwrap();
        for i in 0..700u32 {
            let f = d.join(format!("file{i:03}"));
            fs::write(&f, vec![b'x'; (i * 7) as usize]).unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(0o600 + (i % 0o100))).unwrap();
        }
        fs::create_dir(d.join("sub")).unwrap();
        symlink("file001", d.join("link")).unwrap();
        fs::hard_link(d.join("file002"), d.join("file002-again")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("fifo").as_path(),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o640),
            0,
        )
        .unwrap();
    });
    // The disk's view: the same directory, listed natively with the mount taken off (nothing
    // has gone through the mount yet), then mounted again with nothing cached.
    m.umount();
    let want = listed(&m.p("d"));
    m.mount(&[]);
    assert_eq!(want.len(), 704);
    let got = listed(&m.p("d"));
    assert_eq!(
        got, want,
        "a listing through the mount differs from the disk"
    );
    let same = |a: &str, b: &str| {
        let ino = |n: &str| got.iter().find(|(x, _)| x == n).unwrap().1.clone();
        ino(a) == ino(b)
    };
    assert!(same("file002", "file002-again"));
    assert_eq!(
        fs::metadata(m.p("d/..")).unwrap().ino(),
        fs::metadata(&m.dir).unwrap().ino(),
        "`..` is the parent"
    );
    // A change through the mount shows in the next listing.
    fs::write(m.p("d/file005"), b"longer than before, by a good margin").unwrap();
    let again = listed(&m.p("d"));
    let f5 = &again.iter().find(|(n, _)| n == "file005").unwrap().1;
    assert!(f5.contains(" size=36 "), "{f5}");
    m.umount();
    assert_eq!(
        shown(&m.p("d/file005")),
        *f5,
        "the mount showed what is on disk"
    );
}
