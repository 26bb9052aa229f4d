//! The timeline: the checkpoints as people read them — each session's turns numbered from 1,
//! when each began, its prompt's first line, and who changed how many paths in it.
//!
//! One wording everywhere a turn is named to a person: `rewindfs ui`, the numbers of
//! `rewindfs list` and `rewind --turn N`, the MCP server's answers, the plugin's `/rewindfs`.
//! Built from the daemon's replies (or a store's, read the same way), never from a second
//! reading of the history.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::control::cmd::{CheckpointInfo, LogLine, NextStep, RewindAction, RewindInfo};
use crate::store::{Actor, CheckpointKind, RewindState};

/// The actors in the order a turn's counts name them.
pub const ACTORS: [Actor; 4] = [Actor::Tool, Actor::Shell, Actor::External, Actor::Rewind];

/// One checkpoint of the timeline.
#[derive(Debug, Clone)]
pub struct Row {
    pub info: CheckpointInfo,
    /// Its number among its session's turns (message checkpoints only), from 1.
    pub turn: Option<usize>,
    /// The paths changed while it was current, each with who changed it.
    pub paths: BTreeMap<String, BTreeSet<ActorKey>>,
    /// A rewind checkpoint's target, as its turn is numbered (`#2`), when it is a turn.
    pub target: Option<String>,
}

/// An [`Actor`] ordered as [`ACTORS`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ActorKey(u8);

impl ActorKey {
    pub fn of(a: Actor) -> ActorKey {
        ActorKey(ACTORS.iter().position(|x| *x == a).unwrap_or(2) as u8)
    }
    pub fn actor(self) -> Actor {
        ACTORS[self.0 as usize]
    }
}

/// Every checkpoint kept, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub rows: Vec<Row>,
}

impl Timeline {
    /// The timeline of `checkpoints` (all of them, oldest first, as `list_checkpoints`
    /// answers) and the change log `log` (as `log` answers: each change under the checkpoint
    /// of its session current then).
    pub fn new(checkpoints: Vec<CheckpointInfo>, log: &[LogLine]) -> Timeline {
        let mut paths: HashMap<&str, BTreeMap<String, BTreeSet<ActorKey>>> = HashMap::new();
        for e in log {
            if let Some(cp) = e.checkpoint.as_deref() {
                let by = paths.entry(cp).or_default();
                by.entry(e.path.clone())
                    .or_default()
                    .insert(ActorKey::of(e.actor));
                if let Some(p2) = &e.path2 {
                    by.entry(p2.clone())
                        .or_default()
                        .insert(ActorKey::of(e.actor));
                }
            }
        }
        let mut turns: HashMap<Option<String>, usize> = HashMap::new();
        let mut rows = checkpoints
            .into_iter()
            .map(|info| {
                let turn = (info.kind == CheckpointKind::Message).then(|| {
                    let n = turns.entry(info.session_id.clone()).or_default();
                    *n += 1;
                    *n
                });
                Row {
                    paths: paths.remove(info.uuid.as_str()).unwrap_or_default(),
                    turn,
                    info,
                    target: None,
                }
            })
            .collect::<Vec<Row>>();
        let numbers: HashMap<String, usize> = rows
            .iter()
            .filter_map(|r| Some((r.info.uuid.clone(), r.turn?)))
            .collect();
        for r in &mut rows {
            if let Some(rw) = &r.info.rewind {
                r.target = numbers.get(&rw.target).map(|n| format!("#{n}"));
            }
        }
        Timeline { rows }
    }

    /// The timeline as the daemon at the other end of `c` answers it.
    ///
    /// # Errors
    /// The daemon's.
    pub fn fetch(
        c: &mut crate::control::client::Client,
    ) -> Result<Timeline, crate::control::client::ClientError> {
        use crate::control::cmd::{ListCheckpoints, Log};
        let list = c.call(&ListCheckpoints { session_id: None })?;
        let log = c.call(&Log::whole())?;
        Ok(Timeline::new(list.checkpoints, &log.entries))
    }

    /// The sessions, in the order their first checkpoint began (`None`: checkpoints of no
    /// session, such as each mount's).
    pub fn sessions(&self) -> Vec<Option<&str>> {
        let mut out: Vec<Option<&str>> = Vec::new();
        for r in &self.rows {
            let s = r.info.session_id.as_deref();
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// The message checkpoints (turns) of `session`, oldest first.
    pub fn turns_of(&self, session: Option<&str>) -> impl Iterator<Item = &Row> {
        let session = session.map(str::to_owned);
        self.rows
            .iter()
            .filter(move |r| r.turn.is_some() && r.info.session_id == session)
    }
}

impl Row {
    /// How a person sees the checkpoint named: `#2 (14:03:11) "shout the notes"` for a turn,
    /// `(14:03:11) mount`, `(14:05:40) rewind to #1 …` for the others.
    pub fn label(&self) -> String {
        let time = clock(&self.info.began_at);
        match (self.turn, &self.info.prompt, &self.info.rewind) {
            (_, _, Some(r)) => {
                let mut r = r.clone();
                if let Some(t) = &self.target {
                    r.target = t.clone();
                }
                format!("({time}) {}", rewind_label(&r))
            }
            (Some(n), Some(p), _) => format!("#{n} ({time}) \"{p}\""),
            (Some(n), None, _) => format!("#{n} ({time})"),
            (None, _, None) => format!("({time}) {}", self.info.kind.as_str()),
        }
    }

    /// Who changed how many paths: `changed: tool 2, shell 1`, or `no changes`.
    pub fn who(&self) -> String {
        let counts = self.counts();
        if counts.is_empty() {
            return "no changes".into();
        }
        let parts: Vec<String> = counts
            .iter()
            .map(|(a, n)| format!("{} {n}", a.as_str()))
            .collect();
        format!("changed: {}", parts.join(", "))
    }

    /// Distinct paths changed by each actor, in [`ACTORS`] order, only those with any.
    pub fn counts(&self) -> Vec<(Actor, usize)> {
        let mut n = [0usize; ACTORS.len()];
        for who in self.paths.values() {
            for a in who {
                n[a.0 as usize] += 1;
            }
        }
        ACTORS
            .iter()
            .zip(n)
            .filter(|(_, n)| *n > 0)
            .map(|(a, n)| (*a, n))
            .collect()
    }
}

/// `14:03:11` of an RFC 3339 time (UTC, as every reply gives it).
pub fn clock(rfc3339: &str) -> &str {
    rfc3339.get(11..19).unwrap_or(rfc3339)
}

/// What a `rewind` checkpoint stands for: `rewind to UUID (scope agent); \`rewindfs undo\`
/// undoes it next`.
pub fn rewind_label(r: &RewindInfo) -> String {
    let what = match (r.action, r.scope) {
        (RewindAction::Rewind, Some(scope)) => {
            format!("rewind to {} (scope {})", r.target, scope.as_str())
        }
        (action, _) => format!("{} of rewind {}", action.as_str(), r.target),
    };
    let state = match r.state {
        RewindState::Done => String::new(),
        s => format!(", {}", s.as_str()),
    };
    let next = match r.next.map(NextStep::command) {
        Some(cmd) => format!("; `rewindfs {cmd}` {cmd}es it next"),
        None => String::new(),
    };
    format!("{what}{state}{next}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Op;

    fn cp(
        uuid: &str,
        session: Option<&str>,
        kind: CheckpointKind,
        prompt: Option<&str>,
    ) -> CheckpointInfo {
        CheckpointInfo {
            uuid: uuid.into(),
            session_id: session.map(Into::into),
            began_at: "2026-11-28T14:03:11.123Z".into(),
            kind,
            paths_changed: 0,
            bytes_captured: 0,
            prompt: prompt.map(Into::into),
            bound: true,
            origin: None,
            rewind: None,
        }
    }

    fn change(cp: &str, path: &str, actor: Actor) -> LogLine {
        LogLine {
            seq: 0,
            time: String::new(),
            op: Op::Write,
            path: path.into(),
            path2: None,
            actor,
            pid: 1,
            process: "x".into(),
            checkpoint: Some(cp.into()),
            tool_use_id: None,
            session: None,
            via: None,
        }
    }

    #[test]
    fn turns_are_numbered_per_session_and_count_distinct_paths_by_actor() {
        let t = Timeline::new(
            vec![
                cp("m", None, CheckpointKind::Mount, None),
                cp("a1", Some("A"), CheckpointKind::Message, Some("make notes")),
                cp("b1", Some("B"), CheckpointKind::Message, None),
                cp("a2", Some("A"), CheckpointKind::Message, Some("shout")),
            ],
            &[
                change("a1", "n.txt", Actor::Tool),
                change("a1", "n.txt", Actor::Tool),
                change("a1", "n.txt", Actor::Shell),
                change("a1", "gen/x", Actor::Shell),
                change("a2", "n.txt", Actor::External),
            ],
        );
        let labels: Vec<String> = t.rows.iter().map(Row::label).collect();
        assert_eq!(
            labels,
            [
                "(14:03:11) mount",
                "#1 (14:03:11) \"make notes\"",
                "#1 (14:03:11)",
                "#2 (14:03:11) \"shout\"",
            ]
        );
        assert_eq!(t.rows[1].who(), "changed: tool 1, shell 2");
        assert_eq!(t.rows[3].who(), "changed: external 1");
        assert_eq!(t.rows[2].who(), "no changes");
        assert_eq!(t.sessions(), [None, Some("A"), Some("B")]);
        let a: Vec<&str> = t
            .turns_of(Some("A"))
            .map(|r| r.info.uuid.as_str())
            .collect();
        assert_eq!(a, ["a1", "a2"]);
    }
}
