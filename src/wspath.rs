//! Workspace paths: a path inside the workspace, relative to its root, that can only be built
//! valid.
//!
//! Every path the store keeps (a capture's, a rename's two sides, a tracked file's, the change
//! log's) is one of these: workspace-relative, `/`-separated bytes, no leading `/`. Paths that
//! come from elsewhere — a bundle, a pulled history, a plan read back from the journal — are
//! parsed with [`WsPath::parse`] before anything uses them, so nothing downstream can be handed
//! the workspace root itself, `.`, `..` or an absolute path (issue 29: a bundle capture whose
//! path was `.` made a rewind delete the whole workspace).
//!
//! Invariants of a [`WsPath`]:
//! - not empty (the workspace root is never a path a rewind or an import names);
//! - no leading or trailing `/`, no empty component (`a//b`), no `.` or `..` component;
//! - no NUL byte; each component at most 255 bytes, the whole at most 4095.
//!
//! What may also name the workspace root itself — a capture of the root's attributes, a
//! change log entry for a `chmod` of it, a plan target that restores them — is a [`Node`]:
//! [`Node::Root`] or a [`WsPath`], so the root is always said, never an empty string by
//! accident.
//!
//! The questions every layer asks of such paths — is one beneath another, its parent, its last
//! name, a name beneath it, the same place after its directory was renamed — are answered here
//! once: on the types, and as free functions ([`beneath`], [`parent`], [`name`], [`join`],
//! [`rebase`]) on the raw keys that hot paths (the recorder's maps, the history's indexes)
//! keep as bytes; [`beneath_bounds`] finds everything beneath a key in an ordered map as one
//! range. A key is a [`Node`]'s bytes: empty for the root.

use std::ffi::OsStr;
use std::fmt;
use std::ops::Bound;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The longest name a component may have (`NAME_MAX`).
const NAME_MAX: usize = 255;
/// The longest path (`PATH_MAX` less its NUL).
const PATH_MAX: usize = 4095;

/// Why bytes are not a workspace path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the empty path (the workspace itself)")]
    Empty,
    #[error("an absolute path")]
    Absolute,
    #[error("a `{0}` component")]
    Dots(&'static str),
    #[error("an empty component (`//` or a trailing `/`)")]
    EmptyComponent,
    #[error("a NUL byte")]
    Nul,
    #[error("a component longer than 255 bytes")]
    NameTooLong,
    #[error("longer than 4095 bytes")]
    TooLong,
    #[error("a `/` in what should be one name")]
    NotOneName,
}

/// A valid workspace-relative path (see the module doc).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WsPath(Vec<u8>);

impl WsPath {
    /// Checks `bytes` and takes them as a workspace path.
    ///
    /// # Errors
    /// [`PathError`], saying what is wrong.
    pub fn parse(bytes: impl Into<Vec<u8>>) -> Result<WsPath, PathError> {
        let b = bytes.into();
        check(&b)?;
        Ok(WsPath(b))
    }

    /// Whether `bytes` are a valid workspace path.
    pub fn is_valid(bytes: &[u8]) -> bool {
        check(bytes).is_ok()
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The path, for the `*at` calls beneath the workspace's fd.
    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0))
    }

    /// The bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// The last name (`c` of `a/b/c`).
    pub fn name(&self) -> &[u8] {
        name(&self.0)
    }

    /// The directory it is in: the root for a name at the top.
    pub fn parent(&self) -> Node {
        match parent(&self.0) {
            b"" => Node::Root,
            p => Node::Path(WsPath(p.to_vec())),
        }
    }

    /// `name` beneath this directory.
    ///
    /// # Errors
    /// `name` is not one name (empty, `.`, `..`, a `/` or NUL in it, too long).
    pub fn join(&self, name: &[u8]) -> Result<WsPath, PathError> {
        Node::Path(self.clone()).join(name)
    }

    /// Whether this lies strictly beneath `dir` (`a/b` is beneath `a`; `ab` and `a` are not).
    pub fn is_beneath(&self, dir: &Node) -> bool {
        beneath(&self.0, dir.as_bytes())
    }

    /// Where this is once `from` (itself or a directory above it) is known as `onto`; `None`
    /// when it is neither `from` nor beneath it.
    pub fn rebased(&self, from: &WsPath, onto: &WsPath) -> Option<WsPath> {
        if self == from {
            return Some(onto.clone());
        }
        rebase(&self.0, &from.0, &onto.0).map(WsPath)
    }
}

/// What a change, a capture or a plan target names: the workspace root itself, or a path
/// inside it. Its bytes (the store's key) are empty for the root.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    Root,
    Path(WsPath),
}

impl Node {
    /// Checks a key: empty is the root, anything else must be a [`WsPath`].
    ///
    /// # Errors
    /// [`PathError`] for a non-empty key that is not a workspace path.
    pub fn parse(bytes: impl Into<Vec<u8>>) -> Result<Node, PathError> {
        let b = bytes.into();
        if b.is_empty() {
            Ok(Node::Root)
        } else {
            WsPath::parse(b).map(Node::Path)
        }
    }

    /// The key: empty for the root.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Node::Root => b"",
            Node::Path(p) => p.as_bytes(),
        }
    }

    /// The path for the `*at` calls beneath the workspace's fd (empty for the root, which those
    /// calls take with `AT_EMPTY_PATH`).
    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(self.as_bytes()))
    }

    /// The path inside the workspace, or `None` for the root.
    pub fn path(&self) -> Option<&WsPath> {
        match self {
            Node::Root => None,
            Node::Path(p) => Some(p),
        }
    }

    /// `name` beneath this directory.
    ///
    /// # Errors
    /// `name` is not one name (empty, `.`, `..`, a `/` or NUL in it, too long).
    pub fn join(&self, name: &[u8]) -> Result<WsPath, PathError> {
        if name.contains(&b'/') {
            return Err(PathError::NotOneName);
        }
        if name.is_empty() {
            return Err(PathError::Empty);
        }
        WsPath::parse(join(self.as_bytes(), name))
    }

    /// The key, owned: empty for the root.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Node::Root => Vec::new(),
            Node::Path(p) => p.into_bytes(),
        }
    }

    /// Whether this is the workspace root.
    pub fn is_root(&self) -> bool {
        matches!(self, Node::Root)
    }
}

/// Hashed as its bytes, as [`std::borrow::Borrow`] requires (a map keyed by nodes is looked up
/// by bytes).
impl std::hash::Hash for Node {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_bytes().hash(h);
    }
}

/// The root: what a change log entry names before it is filled in.
impl Default for Node {
    fn default() -> Node {
        Node::Root
    }
}

/// Maps keyed by paths are looked up by their bytes.
impl std::borrow::Borrow<[u8]> for WsPath {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl std::borrow::Borrow<[u8]> for Node {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for WsPath {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Node {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// A path is equal to the key that holds its bytes.
macro_rules! eq_bytes {
    ($t:ty) => {
        impl PartialEq<[u8]> for $t {
            fn eq(&self, o: &[u8]) -> bool {
                self.as_bytes() == o
            }
        }
        impl PartialEq<Vec<u8>> for $t {
            fn eq(&self, o: &Vec<u8>) -> bool {
                self.as_bytes() == o.as_slice()
            }
        }
        impl PartialEq<$t> for Vec<u8> {
            fn eq(&self, o: &$t) -> bool {
                self.as_slice() == o.as_bytes()
            }
        }
        impl PartialEq<$t> for [u8] {
            fn eq(&self, o: &$t) -> bool {
                self == o.as_bytes()
            }
        }
    };
}
eq_bytes!(WsPath);
eq_bytes!(Node);

impl AsRef<Path> for WsPath {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

impl AsRef<Path> for Node {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

/// In JSON (a journalled plan, the helper's report): a string when the bytes are UTF-8, else
/// an array of bytes; reading one checks it.
impl serde::Serialize for WsPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => self.0.serialize(s),
        }
    }
}

impl<'de> serde::Deserialize<'de> for WsPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<WsPath, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Either {
            Text(String),
            Bytes(Vec<u8>),
        }
        let b = match Either::deserialize(d)? {
            Either::Text(t) => t.into_bytes(),
            Either::Bytes(b) => b,
        };
        WsPath::parse(b).map_err(serde::de::Error::custom)
    }
}

impl From<WsPath> for Node {
    fn from(p: WsPath) -> Node {
        Node::Path(p)
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Root => f.write_str("<root>"),
            Node::Path(p) => fmt::Debug::fmt(p, f),
        }
    }
}

/// A node from a literal, for tests.
#[cfg(test)]
pub(crate) fn node(p: impl Into<Vec<u8>>) -> Node {
    Node::parse(p).expect("a valid test path")
}

/// A workspace path from a literal, for tests.
#[cfg(test)]
pub(crate) fn ws(p: impl Into<Vec<u8>>) -> WsPath {
    WsPath::parse(p).expect("a valid test path")
}

/// Key `p` as the path the `*at` calls beneath the workspace's fd take (empty for the root).
pub fn key_path(p: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(p))
}

/// Whether key `p` lies strictly beneath key `dir` (everything but the root lies beneath the
/// root; `a/b` beneath `a`, but not `ab` nor `a` itself).
pub fn beneath(p: impl AsRef<[u8]>, dir: impl AsRef<[u8]>) -> bool {
    let (p, dir) = (p.as_ref(), dir.as_ref());
    if dir.is_empty() {
        return !p.is_empty();
    }
    p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/'
}

/// The keys that lie strictly beneath key `dir` ([`beneath`]) are one range in byte order: from
/// `dir/` up to, not including, `dir0` ('0' follows '/'); beneath the root, every key after its
/// own. As bounds for `BTreeMap::range` and `BTreeSet::range`.
pub fn beneath_bounds(dir: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    if dir.is_empty() {
        return (Bound::Excluded(Vec::new()), Bound::Unbounded);
    }
    let (mut from, mut to) = (dir.to_vec(), dir.to_vec());
    from.push(b'/');
    to.push(b'/' + 1);
    (Bound::Included(from), Bound::Excluded(to))
}

/// [`beneath_bounds`] borrowed, as `range::<[u8], _>` takes them.
pub fn as_slices(b: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (
        b.0.as_ref().map(Vec::as_slice),
        b.1.as_ref().map(Vec::as_slice),
    )
}

/// The key of `p`'s directory (empty: the root, for a name at the top or the root itself).
pub fn parent(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|b| *b == b'/') {
        Some(i) => &p[..i],
        None => b"",
    }
}

/// The last name of key `p` (empty for the root).
pub fn name(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|b| *b == b'/') {
        Some(i) => &p[i + 1..],
        None => p,
    }
}

/// The key of `name` beneath key `dir` (just `name` beneath the root).
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut v = Vec::with_capacity(dir.len() + 1 + name.len());
    v.extend_from_slice(dir);
    v.push(b'/');
    v.extend_from_slice(name);
    v
}

/// Where key `p`, beneath directory `from`, is once `from` is known as `onto`; `None` when `p`
/// is not beneath `from` (`from` itself included: a rename of a directory moves what is in it).
pub fn rebase(
    p: impl AsRef<[u8]>,
    from: impl AsRef<[u8]>,
    onto: impl AsRef<[u8]>,
) -> Option<Vec<u8>> {
    let (p, from, onto) = (p.as_ref(), from.as_ref(), onto.as_ref());
    if !beneath(p, from) {
        return None;
    }
    let rest = if from.is_empty() {
        p
    } else {
        &p[from.len() + 1..]
    };
    Some(join(onto, rest))
}

/// The keys of the directories above `p`, nearest first, not counting the root.
pub fn ancestors(p: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut end = p.len();
    std::iter::from_fn(move || {
        let slash = p[..end].iter().rposition(|b| *b == b'/')?;
        end = slash;
        Some(&p[..slash])
    })
}

impl fmt::Debug for WsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Display for WsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl PathError {
    /// The errno a file-system call gives for such a path: `ENAMETOOLONG` for one too long,
    /// `EINVAL` otherwise.
    pub fn errno(&self) -> i32 {
        match self {
            PathError::NameTooLong | PathError::TooLong => libc::ENAMETOOLONG,
            _ => libc::EINVAL,
        }
    }
}

impl From<PathError> for std::io::Error {
    fn from(e: PathError) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.errno())
    }
}

fn check(b: &[u8]) -> Result<(), PathError> {
    if b.is_empty() {
        return Err(PathError::Empty);
    }
    if b[0] == b'/' {
        return Err(PathError::Absolute);
    }
    if b.contains(&0) {
        return Err(PathError::Nul);
    }
    if b.len() > PATH_MAX {
        return Err(PathError::TooLong);
    }
    for c in b.split(|x| *x == b'/') {
        match c {
            b"" => return Err(PathError::EmptyComponent),
            b"." => return Err(PathError::Dots(".")),
            b".." => return Err(PathError::Dots("..")),
            c if c.len() > NAME_MAX => return Err(PathError::NameTooLong),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ws(s: &str) -> WsPath {
        WsPath::parse(s).unwrap()
    }

    #[test]
    fn parent_name_and_join_take_whole_names() {
        assert_eq!(ws("a/b/c").parent(), Node::Path(ws("a/b")));
        assert_eq!(ws("a").parent(), Node::Root);
        assert_eq!(ws("a/b/c").name(), b"c");
        assert_eq!(ws("a").join(b"b"), Ok(ws("a/b")));
        assert_eq!(Node::Root.join(b"b"), Ok(ws("b")));
        assert!(ws("a").join(b"..").is_err());
        assert!(ws("a").join(b"b/c").is_err());
        assert!(ws("a").join(b"").is_err());
        assert_eq!(ws("a").join(b"x\0y"), Err(PathError::Nul));
        assert!(ws("a/b").is_beneath(&Node::Path(ws("a"))));
        assert!(ws("a/b").is_beneath(&Node::Root));
        assert!(!ws("ab").is_beneath(&Node::Path(ws("a"))));
        assert!(!ws("a").is_beneath(&Node::Path(ws("a"))));
        assert_eq!(ws("a/b/c").rebased(&ws("a/b"), &ws("x")), Some(ws("x/c")));
        assert_eq!(ws("a/b").rebased(&ws("a/b"), &ws("x")), Some(ws("x")));
        assert_eq!(ws("a/bc").rebased(&ws("a/b"), &ws("x")), None);
        assert_eq!(rebase(b"a/b", b"a/b", b"x"), None);
        assert_eq!(rebase(b"a/b/c", b"", b"x"), Some(b"x/a/b/c".to_vec()));
        assert_eq!(
            ancestors(b"a/b/c").collect::<Vec<_>>(),
            vec![&b"a/b"[..], b"a"]
        );
        assert_eq!(Node::parse(""), Ok(Node::Root));
        assert_eq!(Node::parse("."), Err(PathError::Dots(".")));
    }

    /// A name of one to three letters from a small alphabet, so that prefixes collide.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop::collection::vec(prop::sample::select(b"ab".to_vec()), 1..3),
            1..4,
        )
        .prop_map(|names| names.join(&b'/'))
    }

    /// A key of one to three names of one or two bytes that sort just before and after '/'.
    fn near_slash_key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop::collection::vec(prop::sample::select(b"-.0a".to_vec()), 1..3),
            1..4,
        )
        .prop_map(|names| names.join(&b'/'))
    }

    proptest! {
        /// `beneath` agrees with comparing components, and a join is beneath its directory
        /// with that directory as its parent.
        #[test]
        fn beneath_is_by_whole_components(p in key(), d in key(), n in "[a-c]{1,3}") {
            let pc: Vec<&[u8]> = p.split(|b| *b == b'/').collect();
            let dc: Vec<&[u8]> = d.split(|b| *b == b'/').collect();
            let by_components = pc.len() > dc.len() && pc[..dc.len()] == dc[..];
            prop_assert_eq!(beneath(&p, &d), by_components);
            let j = join(&p, n.as_bytes());
            prop_assert!(beneath(&j, &p));
            prop_assert_eq!(parent(&j), &p[..]);
            prop_assert_eq!(name(&j), n.as_bytes());
            let anc: Vec<&[u8]> = ancestors(&p).collect();
            prop_assert_eq!(anc.len(), pc.len() - 1);
            for a in anc {
                prop_assert!(beneath(&p, a));
            }
        }

        /// The range `beneath_bounds` gives holds exactly the keys `beneath` the directory,
        /// among names whose bytes sort next to '/' ('-', '.', '0'), the root's included.
        #[test]
        fn beneath_is_one_range_in_byte_order(
            keys in prop::collection::btree_set(
                prop_oneof![1 => Just(Vec::new()), 8 => near_slash_key()],
                0..16,
            ),
            d in prop_oneof![Just(Vec::new()), near_slash_key()],
        ) {
            let bounds = beneath_bounds(&d);
            let in_range: Vec<&Vec<u8>> = keys.range::<[u8], _>(as_slices(&bounds)).collect();
            let by_scan: Vec<&Vec<u8>> = keys.iter().filter(|k| beneath(k, &d)).collect();
            prop_assert_eq!(in_range, by_scan);
        }

        /// Rebasing moves exactly what is at or beneath the renamed directory, and back again.
        #[test]
        fn rebase_round_trips(p in key(), from in key(), onto in key()) {
            match rebase(&p, &from, &onto) {
                Some(q) => {
                    prop_assert!(beneath(&p, &from));
                    prop_assert!(beneath(&q, &onto));
                    prop_assert_eq!(rebase(&q, &onto, &from), Some(p.clone()));
                }
                None => prop_assert!(!beneath(&p, &from)),
            }
        }
    }

    #[test]
    fn only_plain_relative_paths_are_workspace_paths() {
        for ok in [
            "a",
            "a/b",
            "src/main.rs",
            ".git/config",
            "..a",
            "a..",
            "...",
            "a/.b",
        ] {
            assert!(WsPath::parse(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(256);
        let cases: [(&[u8], PathError); 12] = [
            (b"", PathError::Empty),
            (b".", PathError::Dots(".")),
            (b"..", PathError::Dots("..")),
            (b"src/..", PathError::Dots("..")),
            (b"../etc/passwd", PathError::Dots("..")),
            (b"a/./b", PathError::Dots(".")),
            (b"/etc/passwd", PathError::Absolute),
            (b"a//b", PathError::EmptyComponent),
            (b"a/", PathError::EmptyComponent),
            (b"a\0b", PathError::Nul),
            (long.as_bytes(), PathError::NameTooLong),
            (&[b'a'; 5000], PathError::TooLong),
        ];
        for (bad, why) in cases {
            assert_eq!(
                WsPath::parse(bad),
                Err(why),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
