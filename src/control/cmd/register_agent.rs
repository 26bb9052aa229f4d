//! `register_agent`: a process becomes the agent (its writes are `tool`, its descendants'
//! `shell`).

use serde::{Deserialize, Deserializer, Serialize};

use super::{Command, Empty};
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Registers `pid` as an agent, of `session_id` if given (without it: of whichever session
/// began a message last, as before sessions were told apart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterAgent {
    #[serde(deserialize_with = "positive_pid")]
    pub pid: u32,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::store::optional_session_id"
    )]
    pub session_id: Option<String>,
}

fn positive_pid<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(serde::de::Error::custom("must be a positive integer")),
        p => Ok(p),
    }
}

impl Command for RegisterAgent {
    const SUBTYPE: &'static str = "register_agent";
    type Reply = Empty;
}

impl RegisterAgent {
    pub(super) fn apply(self, d: &Daemon) -> Result<Empty, ControlError> {
        if !crate::sys::process_alive(self.pid) {
            return Err(ControlError::NoProcess(self.pid));
        }
        // On the host, every process descends from init (and kthreadd's children are the
        // kernel's): as the agent, it would make every process on the host the agent's shell. In
        // a container's own pid namespace pid 1 may well be the agent (its entrypoint). The
        // daemon is never an agent of its own workspace.
        let host_init = self.pid <= 2 && crate::sys::in_initial_pid_namespace();
        if host_init || self.pid == crate::sys::getpid() {
            return Err(ControlError::Invalid(format!(
                "register_agent: pid {} is {}; register the agent's own process (the Claude Code \
                 CLI's pid)",
                self.pid,
                if host_init {
                    "the root of every process on the host (every process would be the agent's)"
                } else {
                    "the rewindfs daemon itself"
                }
            )));
        }
        d.turns.register_agent(self.pid, self.session_id.as_deref());
        Ok(Empty {})
    }
}
