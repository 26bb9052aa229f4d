//! What a scope leaves out: paths changed since the checkpoint that a rewind in the chosen
//! scope does not restore (a shell's `sed -i` or `rm -rf` under the default `tool` scope, the
//! user's editor under `agent`). A rewind that silently changed nothing while the tree is full
//! of changes since the checkpoint is the surprise this exists to prevent: every answer says how
//! many were left out, by whom, and the command that includes them.
//!
//! Counted from the captures and directory renames since the checkpoint (no content is read):
//! a path changed and then changed back counts too.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::history::History;
use super::{RewindError, Rewinder, Scope, inside};
use crate::store::Actor;

/// Paths changed since the checkpoint that the scope leaves out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Omitted {
    /// How many paths.
    pub count: u64,
    /// How many each actor changed (a path changed by two counts for both).
    pub by_actor: BTreeMap<String, u64>,
    /// The scope that would include them all.
    pub scope: Option<Scope>,
}

impl Rewinder {
    /// The paths changed since checkpoint `c` that a rewind in `scope` leaves out (for `tool`,
    /// the files a tool of `session` never touched; for `agent`, the paths only someone else
    /// changed; `all` leaves nothing out).
    pub(super) fn omitted(
        &self,
        c: i64,
        session: Option<&str>,
        scope: Scope,
    ) -> Result<Omitted, RewindError> {
        if scope == Scope::All {
            return Ok(Omitted::default());
        }
        let hist = History::load(&self.g.store, c)?;
        // The session whose tracked files tool scope restores, found as the plan finds it.
        let session = session
            .map(str::to_string)
            .or_else(|| self.g.recorder.current().2);
        let tracked: HashSet<Vec<u8>> = match (scope, &session) {
            (Scope::Tool, Some(s)) => self
                .g
                .store
                .tracked(s)?
                .into_iter()
                .map(|t| t.path.into_bytes())
                .collect(),
            _ => HashSet::new(),
        };
        let mut out = Omitted::default();
        let mut wider = Scope::Agent;
        let mut count = |bits: u8, out: &mut Omitted| {
            out.count += 1;
            for a in [Actor::Tool, Actor::Shell, Actor::External, Actor::Rewind] {
                if bits & a.bit() != 0 {
                    *out.by_actor.entry(a.as_str().to_string()).or_default() += 1;
                }
            }
            if bits & inside(Scope::Agent) == 0 {
                wider = Scope::All;
            }
        };
        for p in hist.by_path.keys() {
            let bits = hist.actors(p);
            let in_scope = match scope {
                Scope::Tool => tracked.contains(p),
                _ => bits & inside(scope) != 0,
            };
            if !in_scope && bits != 0 {
                count(bits, &mut out);
            }
        }
        for m in &hist.moves {
            if m.actor.bit() & inside(scope) == 0 || scope == Scope::Tool {
                count(m.actor.bit(), &mut out);
            }
        }
        out.scope = (out.count > 0).then_some(wider);
        Ok(out)
    }
}
