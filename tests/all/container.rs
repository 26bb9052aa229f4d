//! Container conditions: a private mount and pid namespace whose root has only Docker's
//! default capabilities plus CAP_SYS_ADMIN (what `docker run --device /dev/fuse
//! --cap-add SYS_ADMIN` gives). Mount, checkpoint, change, rewind and unmount all happen inside;
//! the host never sees the mount.

use std::process::Command;

use crate::support::{BIN, require_fuse};

/// Docker's default capability set, plus SYS_ADMIN.
const CAPS: &str = "-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap,+sys_admin";

#[test]
fn it_works_in_a_container_with_only_sys_admin_added() {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("proj");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    let script = r#"
        set -e
        sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status
        "$RW" mount "$WS" --store "$ST"
        grep -q " $WS fuse.rewindfs " /proc/self/mounts
        "$RW" checkpoint 0b7d8c5e-4e1a-4a39-8c4f-7c3d2e1f0a9b --session c --socket "$ST/control.sock" >/dev/null
        echo changed > "$WS/a.txt"; rm -f "$WS/gone.txt"; echo new > "$WS/b.txt"
        "$RW" rewind 0b7d8c5e-4e1a-4a39-8c4f-7c3d2e1f0a9b --scope all --socket "$ST/control.sock" >/dev/null
        cat "$WS/a.txt"
        test ! -e "$WS/b.txt"
        "$RW" umount "$WS"
        echo done
    "#;
    let out = Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--propagation", "private"])
        .args(["setpriv", "--bounding-set", CAPS, "--inh-caps", "-all"])
        .args(["sh", "-c", script])
        .env("RW", BIN)
        .env("WS", &ws)
        .env("ST", tmp.path().join("store"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // chown dac_override fowner fsetid kill setgid setuid setpcap net_bind_service net_raw
    // sys_chroot sys_admin mknod audit_write setfcap
    let want: u64 = [0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 21, 27, 29, 31]
        .iter()
        .fold(0, |m, b| m | 1 << b);
    assert!(
        out.status.success() && stdout == format!("{want:016x}\noriginal\ndone\n"),
        "in the container: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !crate::support::is_fuse(&ws),
        "the host never saw the mount"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "original\n"
    );
}
