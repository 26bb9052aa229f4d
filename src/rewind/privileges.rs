//! Privileges in history from elsewhere, and what a rewind does to modes, owners and extended
//! attributes.
//!
//! A pre-image that an import or pull brought ([`PreImage::imported`]) is another person's or
//! machine's word. The daemon that applies it may run as root, so applying it as it is could
//! hand anyone more than they had: a root-owned `/bin/bash` copy with the set-user-ID bit, a
//! file capability, a device node. Unless the user trusts the source (`--trust-imported`,
//! `"trust_imported": true`), such a pre-image is applied **without**:
//! - the set-user-ID and set-group-ID bits;
//! - `security.*` and `trusted.*` extended attributes (file capabilities, SELinux labels, ...);
//! - its owner, when the daemon is root (the only case in which a rewind sets owners): the path
//!   keeps its present owner, or a new one gets the workspace root's;
//! - device nodes (character and block special files): the path is left as it is.
//!
//! What was withheld is reported per path ([`Withheld`]) by the dry run and the real rewind
//! alike. This daemon's own captures are applied as they are: they are what the path was here.
//!
//! [`AttrChange`] is what a rewind changes besides content (mode, owner, attributes), which a
//! dry run lists for every path, so a change of privileges is never hidden behind a line count.

use serde::{Deserialize, Serialize};

use crate::store::{Kind, PreImage, Xattrs};

/// What was withheld at one path, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Withheld {
    /// Workspace-relative.
    pub path: String,
    /// Each thing left out: `set-user-ID bit`, `attribute security.capability`, `owner 0:0`,
    /// `device node (char 8:0)`.
    pub what: Vec<String>,
}

/// What a rewind changes at a path besides its content (absent fields: unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttrChange {
    /// Workspace-relative.
    pub path: String,
    /// Permission bits, from (absent for a path the rewind creates) and to, in octal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<(Option<String>, String)>,
    /// Owner `uid:gid`, from and to (only when the daemon runs as root, which alone sets them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<(Option<String>, String)>,
    /// Extended attributes set (`+name`) or removed (`-name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xattrs: Vec<String>,
}

/// What is at a path now, for [`attr_change`].
pub(super) struct Present<'a> {
    pub(super) kind: Kind,
    pub(super) mode: u32,
    pub(super) owner: (u32, u32),
    pub(super) xattrs: Option<&'a Xattrs>,
}

/// How pre-images from elsewhere are applied.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    /// The user trusts the source: apply everything.
    pub(super) trust: bool,
    /// The daemon runs as root (and so sets owners).
    pub(super) as_root: bool,
    /// The workspace root's owner: a new path's owner when an imported one is withheld.
    pub(super) root_owner: (u32, u32),
}

/// Whether an attribute name needs privileges to set (a file capability, a label).
fn privileged_xattr(name: &[u8]) -> bool {
    name.starts_with(b"security.") || name.starts_with(b"trusted.")
}

impl Policy {
    /// Limits `pre`, the state a rewind or fork gives `path`, to what its source may grant:
    /// unchanged for this daemon's own captures or a trusted source. `now_owner` is the path's
    /// present owner (`None`: absent). Returns what was withheld (empty: nothing), and whether
    /// the path must be left alone altogether (a device node).
    pub(super) fn limit(
        &self,
        pre: &mut PreImage,
        now_owner: Option<(u32, u32)>,
    ) -> (Vec<String>, bool) {
        let mut what = Vec::new();
        if !pre.imported || self.trust {
            return (what, false);
        }
        let ty = pre.mode & libc::S_IFMT;
        if pre.kind == Kind::Other && (ty == libc::S_IFCHR || ty == libc::S_IFBLK) {
            let (major, minor) = (rustix::fs::major(pre.size), rustix::fs::minor(pre.size));
            let which = if ty == libc::S_IFCHR { "char" } else { "block" };
            what.push(format!("device node ({which} {major}:{minor})"));
            return (what, true);
        }
        if pre.kind == Kind::Absent {
            return (what, false);
        }
        if pre.mode & libc::S_ISUID != 0 {
            what.push("set-user-ID bit".to_string());
        }
        if pre.mode & libc::S_ISGID != 0 {
            what.push("set-group-ID bit".to_string());
        }
        pre.mode &= !(libc::S_ISUID | libc::S_ISGID);
        if let Some(x) = &pre.xattrs {
            let (dropped, kept): (Vec<_>, Vec<_>) =
                x.iter().partition(|(n, _)| privileged_xattr(n));
            if !dropped.is_empty() {
                for (n, _) in &dropped {
                    what.push(format!("attribute {}", String::from_utf8_lossy(n)));
                }
                pre.xattrs = Some(Xattrs::new(
                    kept.into_iter()
                        .map(|(n, v)| (n.to_vec(), v.to_vec()))
                        .collect(),
                ));
            }
        }
        if self.as_root {
            let keep = now_owner.unwrap_or(self.root_owner);
            if (pre.uid, pre.gid) != keep {
                what.push(format!("owner {}:{}", pre.uid, pre.gid));
                (pre.uid, pre.gid) = keep;
            }
        }
        (what, false)
    }
}

/// What a rewind to `want` changes at `path` besides content, from `now` (kind, mode, owner and
/// attributes; `None` when absent); `None` when nothing. `restorable` says which attribute
/// names a rewind sets.
pub(super) fn attr_change(
    path: &[u8],
    now: Option<Present<'_>>,
    want: &PreImage,
    as_root: bool,
    restorable: impl Fn(&[u8]) -> bool,
) -> Option<AttrChange> {
    if matches!(want.kind, Kind::Absent | Kind::Symlink) {
        return None;
    }
    let octal = |m: u32| format!("{:04o}", m & 0o7777);
    let same_kind = now.as_ref().filter(|n| n.kind == want.kind);
    let mut c = AttrChange {
        path: crate::wire_path::encode(path),
        ..AttrChange::default()
    };
    let from_mode = same_kind.map(|n| n.mode & 0o7777);
    if from_mode != Some(want.mode & 0o7777) {
        c.mode = Some((from_mode.map(octal), octal(want.mode)));
    }
    let from_owner = same_kind.map(|n| n.owner);
    if as_root && from_owner != Some((want.uid, want.gid)) {
        let show = |(u, g): (u32, u32)| format!("{u}:{g}");
        c.owner = Some((from_owner.map(show), show((want.uid, want.gid))));
    }
    if let Some(w) = &want.xattrs {
        let empty = Xattrs::default();
        let have = same_kind.and_then(|n| n.xattrs).unwrap_or(&empty);
        for (n, v) in w.iter().filter(|(n, _)| restorable(n)) {
            if have.get(n) != Some(v) {
                c.xattrs.push(format!("+{}", String::from_utf8_lossy(n)));
            }
        }
        for (n, _) in have.iter().filter(|(n, _)| restorable(n)) {
            if w.get(n).is_none() {
                c.xattrs.push(format!("-{}", String::from_utf8_lossy(n)));
            }
        }
    }
    (c.mode.is_some() || c.owner.is_some() || !c.xattrs.is_empty()).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pre(kind: Kind, mode: u32, imported: bool) -> PreImage {
        PreImage {
            kind,
            mode,
            uid: 0,
            gid: 0,
            imported,
            xattrs: Some(Xattrs::new(vec![
                (b"security.capability".to_vec(), b"\x01".to_vec()),
                (b"trusted.x".to_vec(), b"1".to_vec()),
                (b"user.note".to_vec(), b"kept".to_vec()),
            ])),
            ..PreImage::absent()
        }
    }

    const AS_ROOT: Policy = Policy {
        trust: false,
        as_root: true,
        root_owner: (1000, 1000),
    };

    #[test]
    fn imported_privileges_are_withheld_and_named_unless_trusted() {
        let mut p = pre(Kind::File, libc::S_IFREG | 0o6755, true);
        let (what, skip) = AS_ROOT.limit(&mut p, None);
        assert!(!skip);
        assert_eq!(
            what,
            [
                "set-user-ID bit",
                "set-group-ID bit",
                "attribute security.capability",
                "attribute trusted.x",
                "owner 0:0"
            ]
        );
        assert_eq!(p.mode, libc::S_IFREG | 0o755);
        assert_eq!((p.uid, p.gid), (1000, 1000));
        let names: Vec<&[u8]> = p.xattrs.as_ref().unwrap().iter().map(|(n, _)| n).collect();
        assert_eq!(names, [b"user.note".as_slice()]);
        // An existing path keeps its owner.
        let mut p = pre(Kind::File, libc::S_IFREG | 0o644, true);
        AS_ROOT.limit(&mut p, Some((7, 8)));
        assert_eq!((p.uid, p.gid), (7, 8));
        // A device node is left alone altogether.
        let mut d = pre(Kind::Other, libc::S_IFCHR | 0o666, true);
        d.size = rustix::fs::makedev(8, 0);
        let (what, skip) = AS_ROOT.limit(&mut d, None);
        assert!(skip);
        assert_eq!(what, ["device node (char 8:0)"]);
        // Trusted, or this daemon's own: untouched.
        for (imported, trust) in [(true, true), (false, false)] {
            let mut p = pre(Kind::File, libc::S_IFREG | 0o4755, imported);
            let before = p.clone();
            let pol = Policy { trust, ..AS_ROOT };
            assert_eq!(pol.limit(&mut p, None), (vec![], false));
            assert_eq!(p, before);
        }
    }

    #[test]
    fn a_dry_run_names_mode_owner_and_attribute_changes() {
        let want = pre(Kind::File, libc::S_IFREG | 0o4755, false);
        let x = Xattrs::new(vec![(b"user.old".to_vec(), b"1".to_vec())]);
        let c = attr_change(
            b"bin/sh",
            Some(Present {
                kind: Kind::File,
                mode: libc::S_IFREG | 0o644,
                owner: (1000, 1000),
                xattrs: Some(&x),
            }),
            &want,
            true,
            |_| true,
        )
        .unwrap();
        assert_eq!(c.mode, Some((Some("0644".into()), "4755".into())));
        assert_eq!(c.owner, Some((Some("1000:1000".into()), "0:0".into())));
        assert_eq!(
            c.xattrs,
            [
                "+security.capability",
                "+trusted.x",
                "+user.note",
                "-user.old"
            ]
        );
        // Nothing but content differs: no attribute change.
        let same = PreImage {
            xattrs: None,
            ..pre(Kind::File, libc::S_IFREG | 0o644, false)
        };
        assert_eq!(
            attr_change(
                b"a",
                Some(Present {
                    kind: Kind::File,
                    mode: libc::S_IFREG | 0o644,
                    owner: (0, 0),
                    xattrs: None
                }),
                &same,
                true,
                |_| true
            ),
            None
        );
    }
}
