//! Model-based property test of rewind semantics: random operation sequences by the tool
//! (in-process writes) and the shell (child processes) across random checkpoints, through a
//! real mount; then a rewind to a random checkpoint with each scope. The expected tree comes
//! from the trees observed when each checkpoint began (for `agent`/`all`) and from the SDK's
//! rewind for the `tool` scope (tests/clients/FINDINGS.md §4: its dry run's list and line
//! counts, its skips, its test of what differs, path by path in tracked order); an undo must
//! give back the tree from before the rewind.
//!
//! `PROPTEST_CASES` sets the number of cases (CI runs a few; `scripts/soak.sh` runs many).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::time::{SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use serde_json::json;

use rewindfs::control::cmd::RewindReply;

use crate::agent::Agent;
use crate::support::{require_fuse, tree};

pub(crate) const PATHS: &[&str] = &["a.txt", "b.txt", "d/c.txt", "d/e/f.txt", "x/y.txt"];
const DIRS: &[&str] = &["d", "d/e", "x", "z"];

#[derive(Debug, Clone)]
pub(crate) enum Step {
    Turn,
    Tool(usize, u8),
    Append(usize, u8),
    Remove(usize),
    Move(usize, usize),
    Chmod(usize, bool),
    Symlink(usize, usize),
    Mkdir(usize),
    RemoveDir(usize),
    MoveDir(usize, usize),
    /// Makes a file larger than the range-capture threshold.
    Grow(usize),
    /// Overwrites one byte in place.
    Patch(usize, u16, u8),
    /// Truncates (or extends) to a size.
    Cut(usize, u16),
}

pub(crate) fn step() -> impl Strategy<Value = Step> {
    let p = 0..PATHS.len();
    let d = 0..DIRS.len();
    prop_oneof![
        2 => Just(Step::Turn),
        4 => (p.clone(), any::<u8>()).prop_map(|(a, b)| Step::Tool(a, b)),
        2 => (p.clone(), any::<u8>()).prop_map(|(a, b)| Step::Append(a, b)),
        1 => p.clone().prop_map(Step::Remove),
        1 => (p.clone(), p.clone()).prop_map(|(a, b)| Step::Move(a, b)),
        1 => (p.clone(), any::<bool>()).prop_map(|(a, b)| Step::Chmod(a, b)),
        1 => (p.clone(), p.clone()).prop_map(|(a, b)| Step::Symlink(a, b)),
        1 => d.clone().prop_map(Step::Mkdir),
        1 => d.clone().prop_map(Step::RemoveDir),
        1 => (d.clone(), d).prop_map(|(a, b)| Step::MoveDir(a, b)),
        1 => p.clone().prop_map(Step::Grow),
        2 => (p.clone(), any::<u16>(), any::<u8>()).prop_map(|(a, o, b)| Step::Patch(a, o % 12_000, b)),
        1 => (p, any::<u16>()).prop_map(|(a, n)| Step::Cut(a, n % 12_000)),
    ]
}

/// The tree as path → listing line.
pub(crate) fn tree_map(a: &Agent) -> BTreeMap<String, String> {
    tree(&a.m.dir)
        .into_iter()
        .map(|l| (l.split(' ').next().unwrap().to_string(), l))
        .collect()
}

fn is_file(line: Option<&String>) -> bool {
    line.is_some_and(|l| l.split(' ').nth(1) == Some("file"))
}

fn kind(line: Option<&String>) -> Option<&str> {
    line.and_then(|l| l.split(' ').nth(1))
}

/// The regular files of the tree (not following symlinks) → their content.
fn contents(a: &Agent) -> BTreeMap<String, Vec<u8>> {
    tree_map(a)
        .into_iter()
        .filter(|(_, l)| is_file(Some(l)))
        .map(|(p, _)| {
            let data = std::fs::read(a.m.p(&p)).unwrap();
            (p, data)
        })
        .collect()
}

/// A path's state in the model: its listing line and, for a file, its content.
type State = Option<(String, Option<Vec<u8>>)>;

fn state(tree: &BTreeMap<String, String>, data: &BTreeMap<String, Vec<u8>>, p: &str) -> State {
    tree.get(p).map(|l| (l.clone(), data.get(p).cloned()))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Lines added and removed from `old` to `new` as the SDK counts them, by a longest common
/// subsequence of lines (each keeping its `\n`; invalid UTF-8 replaced).
fn lines(old: &[u8], new: &[u8]) -> (u64, u64) {
    let (o, n) = (String::from_utf8_lossy(old), String::from_utf8_lossy(new));
    let a: Vec<&str> = o.split_inclusive('\n').collect();
    let b: Vec<&str> = n.split_inclusive('\n').collect();
    let mut t = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            t[i][j] = if a[i] == b[j] {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    let common = t[0][0] as u64;
    (b.len() as u64 - common, a.len() as u64 - common)
}

/// What the SDK's rewind does, per the model (see [`Run::expected_tool`]).
#[derive(Debug, Default, PartialEq)]
struct ToolRewind {
    /// The dry run's `filesChanged` (workspace-relative), insertions, deletions.
    listed: Vec<String>,
    insertions: u64,
    deletions: u64,
    /// The paths the real rewind changes, in order.
    changed: Vec<String>,
    skipped: u64,
    /// The tree after it.
    tree: BTreeMap<String, String>,
}

pub(crate) struct Run {
    pub(crate) a: Agent,
    pub(crate) turns: Vec<String>,
    /// When each turn's `begin_message` had returned (unix ms): no later than the checkpoint's
    /// start, as the daemon stamps it.
    began_by: Vec<i64>,
    pub(crate) snapshots: Vec<BTreeMap<String, String>>,
    /// The files' contents when each turn began.
    snapshot_data: Vec<BTreeMap<String, Vec<u8>>>,
    /// path → (turn index of the first tool change, the state just before it)
    tracked: BTreeMap<String, (usize, State)>,
    /// The tracked paths in the order a tool first changed each.
    tracked_order: Vec<String>,
}

impl Run {
    /// A mount of the workspace `setup` prepares, a first turn, then `steps`. A small
    /// range-capture threshold, so files the steps grow get range pre-images.
    pub(crate) fn play(setup: impl FnOnce(&std::path::Path), steps: &[Step]) -> Run {
        Self::play_with(setup, steps, &[])
    }

    /// [`play`](Self::play) on a mount made with `extra` arguments too.
    pub(crate) fn play_with(
        setup: impl FnOnce(&std::path::Path),
        steps: &[Step],
        extra: &[&str],
    ) -> Run {
        let mut args = vec!["--range-capture-min", "4096"];
        args.extend_from_slice(extra);
        let mut run = Run {
            a: Agent::with_args(setup, &args),
            turns: Vec::new(),
            began_by: Vec::new(),
            snapshots: Vec::new(),
            snapshot_data: Vec::new(),
            tracked: BTreeMap::new(),
            tracked_order: Vec::new(),
        };
        run.apply(&Step::Turn);
        for s in steps {
            run.apply(s);
        }
        run
    }

    fn apply(&mut self, s: &Step) {
        let q = |i: usize| PATHS[i];
        match s {
            Step::Turn => {
                self.snapshots.push(tree_map(&self.a));
                self.snapshot_data.push(contents(&self.a));
                let u = self.a.turn();
                self.began_by.push(now_ms());
                self.turns.push(u);
            }
            Step::Tool(i, b) => {
                let p = q(*i);
                let target = self.a.m.p(p);
                // Write/Edit only writes regular files, under directories.
                if target.is_dir()
                    || target.is_symlink()
                    || target
                        .ancestors()
                        .skip(1)
                        .any(|x| x.is_symlink() || x.is_file())
                {
                    return;
                }
                if !self.tracked.contains_key(p) {
                    let now = state(&tree_map(&self.a), &contents(&self.a), p);
                    self.tracked
                        .insert(p.to_string(), (self.turns.len() - 1, now));
                    self.tracked_order.push(p.to_string());
                }
                self.a
                    .tool_write(p, format!("tool {b}\nline two\n").as_bytes());
            }
            Step::Append(i, b) => {
                let p = q(*i);
                self.a.bash(&format!(
                    "test -d \"$(dirname {p})\" && test ! -d {p} && echo 'shell {b}' >> {p} || true"
                ));
            }
            Step::Remove(i) => {
                self.a.bash(&format!("rm -f {}", q(*i)));
            }
            Step::Move(i, j) => {
                let (x, y) = (q(*i), q(*j));
                self.a.bash(&format!("test -f {x} && test -d \"$(dirname {y})\" && test ! -d {y} && mv -f {x} {y} || true"));
            }
            Step::Chmod(i, ro) => {
                let mode = if *ro { "600" } else { "755" };
                self.a.bash(&format!(
                    "test -f {p} && chmod {mode} {p} || true",
                    p = q(*i)
                ));
            }
            Step::Symlink(i, j) => {
                let (x, y) = (q(*i), q(*j));
                self.a.bash(&format!("test -d \"$(dirname {y})\" && test ! -e {y} && test ! -L {y} && ln -s {x} {y} || true"));
            }
            Step::Mkdir(k) => {
                self.a
                    .bash(&format!("mkdir -p {} 2>/dev/null || true", DIRS[*k]));
            }
            Step::RemoveDir(k) => {
                self.a.bash(&format!("rm -rf {}", DIRS[*k]));
            }
            Step::Grow(i) => {
                self.a.bash(&format!(
                    "test -f {p} && test ! -L {p} && yes abcdefghi | head -c 6000 >> {p} || true",
                    p = q(*i)
                ));
            }
            Step::Patch(i, off, b) => {
                self.a.bash(&format!(
                    "test -f {p} && test ! -L {p} && printf {c} | dd of={p} bs=1 seek={off} conv=notrunc status=none || true",
                    p = q(*i),
                    c = (b'a' + b % 26) as char
                ));
            }
            Step::Cut(i, n) => {
                self.a.bash(&format!(
                    "test -f {p} && test ! -L {p} && truncate -s {n} {p} || true",
                    p = q(*i)
                ));
            }
            Step::MoveDir(k, l) => {
                let (x, y) = (DIRS[*k], DIRS[*l]);
                self.a.bash(&format!("test -d {x} && test ! -e {y} && test -d \"$(dirname {y})\" && mv {x} {y} 2>/dev/null || true"));
            }
        }
    }

    /// What the tool scope must do (docs/design.md §2; tests/clients/FINDINGS.md §4), from the model:
    /// per tracked path, in tracked order, its target (its state when turn `t` began if a tool
    /// had changed it by then, else its state just before its first tool change); the dry run
    /// lists it if a line of the texts differs (reading through symlinks) or the target is
    /// absent and something is there; the real rewind skips what is not a regular file, removes
    /// it if the target is absent, and rewrites it if its mode, size or text differ. `None`
    /// when the SDK's mtime shortcut might apply (a same-size file last written before the
    /// backup's time, which the model knows only roughly): the case is not one to judge.
    fn expected_tool(&self, t: usize, now: &BTreeMap<String, String>) -> Option<ToolRewind> {
        let data = contents(&self.a);
        let mut out = ToolRewind {
            tree: now.clone(),
            ..Default::default()
        };
        for p in &self.tracked_order {
            let (first, before_first) = &self.tracked[p];
            let (target, backup_by) = if *first < t {
                (
                    state(&self.snapshots[t], &self.snapshot_data[t], p),
                    self.began_by[t],
                )
            } else {
                (before_first.clone(), self.began_by[*first])
            };
            let cur = now.get(p);
            let target_kind = kind(target.as_ref().map(|(l, _)| l));
            let restorable = matches!(target_kind, None | Some("file"));
            if restorable {
                let text = std::fs::read(self.a.m.p(p)).unwrap_or_default();
                let want = target
                    .as_ref()
                    .and_then(|(_, d)| d.clone())
                    .unwrap_or_default();
                let (i, d) = lines(&text, &want);
                let exists = std::fs::metadata(self.a.m.p(p)).is_ok();
                if i + d > 0 || (target.is_none() && exists) {
                    out.listed.push(p.clone());
                    out.insertions += i;
                    out.deletions += d;
                }
            }
            // The real rewind: not a regular file (or beneath something that is not a
            // directory) → skipped.
            let parents_ok = p
                .match_indices('/')
                .all(|(i, _)| matches!(kind(now.get(&p[..i])), None | Some("dir")));
            if !parents_ok || !matches!(kind(cur), None | Some("file")) {
                out.skipped += 1;
                continue;
            }
            if !restorable {
                continue;
            }
            let act = match (&target, cur) {
                (None, None) => false,
                (None, Some(_)) => {
                    out.tree.remove(p);
                    true
                }
                (Some(_), None) => true,
                (Some((line, content)), Some(cur_line)) => {
                    let f = |l: &str| l.split(' ').skip(2).take(2).collect::<Vec<_>>().join(" ");
                    if f(line) != f(cur_line) {
                        true // mode or size
                    } else {
                        let md = std::fs::symlink_metadata(self.a.m.p(p)).unwrap();
                        let mtime = md.mtime() * 1000 + md.mtime_nsec() / 1_000_000;
                        let want = content.clone().unwrap_or_default();
                        let have = data.get(p).cloned().unwrap_or_default();
                        let differ =
                            String::from_utf8_lossy(&want) != String::from_utf8_lossy(&have);
                        if differ && mtime + 1000 < backup_by {
                            return None;
                        }
                        differ
                    }
                }
            };
            if !act {
                continue;
            }
            out.changed.push(p.clone());
            if let Some((line, _)) = target {
                // Missing parents are created (0755 under the daemon's creation).
                let mut acc = String::new();
                for part in p.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
                    if !acc.is_empty() {
                        acc.push('/');
                    }
                    acc.push_str(part);
                    out.tree
                        .entry(acc.clone())
                        .or_insert_with(|| format!("{acc} dir 755"));
                }
                out.tree.insert(p.clone(), line);
            }
        }
        Some(out)
    }
}

/// The workspace-relative paths of a reply's `filesChanged`, in its order.
fn files_in_order(a: &Agent, v: &RewindReply) -> Vec<String> {
    v.files_changed
        .iter()
        .map(|x| {
            std::path::Path::new(x)
                .strip_prefix(&a.m.dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn check(steps: Vec<Step>, pick: usize, scope: &'static str) -> Result<(), TestCaseError> {
    check_on(steps, pick, scope, &[])
}

/// [`check`] on a mount made with `extra` arguments.
fn check_on(
    steps: Vec<Step>,
    pick: usize,
    scope: &'static str,
    extra: &[&str],
) -> Result<(), TestCaseError> {
    let mut run = Run::play_with(|_| {}, &steps, extra);
    let t = pick % run.turns.len();
    let now = tree_map(&run.a);
    let tool = match scope {
        "tool" => match run.expected_tool(t, &now) {
            Some(x) => Some(x),
            None => return Err(TestCaseError::reject("the SDK's mtime shortcut may apply")),
        },
        _ => None,
    };
    let expected = match &tool {
        Some(x) => x.tree.clone(),
        None => run.snapshots[t].clone(),
    };
    let dry = run
        .a
        .rewind(&run.turns[t], scope, true)
        .map_err(TestCaseError::fail)?;
    let r = run
        .a
        .rewind(&run.turns[t], scope, false)
        .map_err(TestCaseError::fail)?;
    if let Some(x) = &tool {
        // The SDK's answers: the dry run's list and counts; what the real rewind changed
        // (rewindfs's addition) and skipped.
        prop_assert_eq!(
            files_in_order(&run.a, &dry),
            x.listed.clone(),
            "dry run: {:?}",
            dry
        );
        prop_assert_eq!(
            (Some(dry.insertions), Some(dry.deletions)),
            (Some(x.insertions), Some(x.deletions)),
            "dry run: {:?}",
            dry
        );
        prop_assert_eq!(
            files_in_order(&run.a, &r),
            x.changed.clone(),
            "rewind: {:?}",
            r
        );
        prop_assert_eq!(r.skipped_links, Some(x.skipped), "rewind: {:?}", r);
        prop_assert_eq!(dry.skipped_links, Some(x.skipped), "dry run: {:?}", dry);
    } else {
        prop_assert_eq!(
            &dry.files_changed,
            &r.files_changed,
            "dry run and rewind disagree"
        );
        prop_assert_eq!(&dry.insertions, &r.insertions);
    }
    let got = tree_map(&run.a);
    prop_assert_eq!(
        got.values().collect::<Vec<_>>(),
        expected.values().collect::<Vec<_>>(),
        "scope {} to turn {}",
        scope,
        t
    );
    let u = run.a.c.request("undo_rewind", json!({}));
    if !r.files_changed.is_empty() {
        prop_assert!(u.is_ok(), "undo failed: {:?}", u.err());
        let after_undo = tree_map(&run.a);
        prop_assert_eq!(
            after_undo.values().collect::<Vec<_>>(),
            now.values().collect::<Vec<_>>(),
            "undo"
        );
    }
    Ok(())
}

/// After a gc with a one-byte budget (everything but the session's first checkpoint and the
/// current one dropped), both still rewind to the model's tree with `scope`, and every dropped
/// one answers the SDK's error with the cause.
fn check_after_gc(steps: Vec<Step>, last: bool, scope: &'static str) -> Result<(), TestCaseError> {
    let mut run = Run::play(|_| {}, &steps);
    let g = run
        .a
        .c
        .request("gc", json!({"max_store_bytes": 1}))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let n = run.turns.len();
    prop_assert_eq!(
        g["checkpointsDropped"].as_u64(),
        Some(1 + n.saturating_sub(2) as u64),
        "the mount's checkpoint and every turn between the first and the current: {}",
        g
    );
    for u in &run.turns[1..n.saturating_sub(1).max(1)] {
        let e = run
            .a
            .rewind(u, scope, false)
            .expect_err("a dropped checkpoint");
        prop_assert!(e.contains("removed by gc"), "{}", e);
    }
    let t = if last { n - 1 } else { 0 };
    let now = tree_map(&run.a);
    let expected = match scope {
        "tool" => match run.expected_tool(t, &now) {
            Some(x) => x.tree,
            None => return Err(TestCaseError::reject("the SDK's mtime shortcut may apply")),
        },
        _ => run.snapshots[t].clone(),
    };
    run.a
        .rewind(&run.turns[t], scope, false)
        .map_err(TestCaseError::fail)?;
    let got = tree_map(&run.a);
    prop_assert_eq!(
        got.values().collect::<Vec<_>>(),
        expected.values().collect::<Vec<_>>(),
        "after gc, scope {} to turn {} of {}",
        scope,
        t,
        n
    );
    Ok(())
}

pub(crate) fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rewinding_with_the_all_scope_gives_the_tree_at_the_checkpoint(steps in prop::collection::vec(step(), 1..30), pick in any::<usize>()) {
        require_fuse();
        check(steps, pick, "all")?;
    }

    /// The same with `--passthrough`: the steps' reads are served by the kernel from the
    /// backing files, their writes still come to the daemon.
    #[test]
    fn rewinding_with_the_all_scope_gives_the_tree_at_the_checkpoint_with_passthrough(steps in prop::collection::vec(step(), 1..30), pick in any::<usize>()) {
        require_fuse();
        check_on(steps, pick, "all", &["--passthrough"])?;
    }

    #[test]
    fn rewinding_with_the_agent_scope_gives_the_tree_at_the_checkpoint(steps in prop::collection::vec(step(), 1..30), pick in any::<usize>()) {
        require_fuse();
        check(steps, pick, "agent")?;
    }

    #[test]
    fn after_gc_the_sessions_first_and_current_checkpoints_rewind_exactly(steps in prop::collection::vec(step(), 1..30), last in any::<bool>(), scope in prop_oneof![Just("all"), Just("agent"), Just("tool")]) {
        require_fuse();
        check_after_gc(steps, last, scope)?;
    }

    #[test]
    fn rewinding_with_the_tool_scope_follows_the_sdk_rule(steps in prop::collection::vec(step(), 1..30), pick in any::<usize>()) {
        require_fuse();
        check(steps, pick, "tool")?;
    }
}

/// One file over the range-capture threshold, changed in place across many turns: each turn's
/// capture saves only the bytes it overwrites, so the state at an early turn is a chain of range
/// pre-images completed by each other and by the file as it is now.
fn check_chain(steps: Vec<Step>, pick: usize) -> Result<(), TestCaseError> {
    let start: Vec<u8> = (0..10_000u32).map(|i| b'A' + (i % 23) as u8).collect();
    let mut run = Run::play(
        |d| std::fs::write(d.join(PATHS[0]), &start).unwrap(),
        &steps,
    );
    let t = pick % run.turns.len();
    let now = tree_map(&run.a);
    run.a
        .rewind(&run.turns[t], "all", false)
        .map_err(TestCaseError::fail)?;
    let got = tree_map(&run.a);
    prop_assert_eq!(
        got.values().collect::<Vec<_>>(),
        run.snapshots[t].values().collect::<Vec<_>>(),
        "to turn {} of {}",
        t,
        run.turns.len()
    );
    run.a
        .c
        .request("undo_rewind", json!({}))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let undone = tree_map(&run.a);
    prop_assert_eq!(
        undone.values().collect::<Vec<_>>(),
        now.values().collect::<Vec<_>>(),
        "undo"
    );
    Ok(())
}

fn chain_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => Just(Step::Turn),
        4 => (any::<u16>(), any::<u8>()).prop_map(|(o, b)| Step::Patch(0, o % 16_000, b)),
        1 => (4_000u16..16_000).prop_map(|n| Step::Cut(0, n)),
        1 => Just(Step::Grow(0)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_file_changed_in_place_over_many_turns_rewinds_to_each(steps in prop::collection::vec(chain_step(), 1..40), pick in any::<usize>()) {
        require_fuse();
        check_chain(steps, pick)?;
    }
}
