//! A stand-in agent for tests: this test process is registered as the agent, writes files
//! in-process the way Claude Code's Write/Edit do (temp file + rename), and runs shell
//! commands as child processes.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rewindfs::control::client::Client;
use rewindfs::control::cmd::{
    BeginMessage, Phase, RegisterAgent, RewindFiles, RewindReply, ToolUse,
};
use rewindfs::store::Scope;

use crate::support::{Mounted, sh};

pub struct Agent {
    pub m: Mounted,
    pub c: Client,
    pub session: String,
    n: u64,
}

pub fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl Agent {
    /// A reply's `filesChanged`, relative to the workspace: each must be absolute and
    /// under the workspace, as the SDK answers (docs/design.md §2). Sorted.
    pub fn files(&self, files_changed: &[String]) -> Vec<String> {
        let mut f: Vec<String> = files_changed
            .iter()
            .map(|x| {
                let p = std::path::Path::new(x);
                p.strip_prefix(&self.m.dir)
                    .unwrap_or_else(|_| {
                        panic!(
                            "{} is not an absolute path in the workspace {}",
                            p.display(),
                            self.m.dir.display()
                        )
                    })
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        f.sort();
        f
    }

    pub fn new(setup: impl FnOnce(&Path)) -> Agent {
        Self::with_args(setup, &[])
    }

    /// An agent on a mount made with extra `rewindfs mount` arguments.
    pub fn with_args(setup: impl FnOnce(&Path), args: &[&str]) -> Agent {
        Self::on(Mounted::with_args(setup, args))
    }

    /// An agent on a mount whose daemon runs with `env` set (the tests' fault injection).
    pub fn with_env(setup: impl FnOnce(&Path), env: &[(&str, &str)]) -> Agent {
        Self::on(Mounted::with_env(setup, env))
    }

    fn on(m: Mounted) -> Agent {
        let mut c = Client::connect(&m.socket()).unwrap();
        // No request in these tests takes long: a stuck daemon fails the test, not the run.
        c.set_timeout(std::time::Duration::from_secs(120)).unwrap();
        c.call(&RegisterAgent {
            pid: std::process::id(),
            session_id: None,
        })
        .unwrap();
        Agent {
            m,
            c,
            session: format!("session-{}", uuid()),
            n: 0,
        }
    }

    /// Begins a new user message; returns its uuid.
    pub fn turn(&mut self) -> String {
        let u = uuid();
        self.c
            .call(&BeginMessage {
                session_id: self.session.clone(),
                user_message_id: u.clone(),
            })
            .unwrap();
        u
    }

    /// Write/Edit: a temp file beside the target, renamed over it, inside a tool span.
    pub fn tool_write(&mut self, rel: &str, data: &[u8]) {
        self.n += 1;
        let id = format!("toolu_{}", self.n);
        let target = self.m.p(rel);
        let span = |phase| ToolUse {
            phase,
            tool_name: "Write".into(),
            tool_use_id: id.clone(),
            file_path: Some(target.display().to_string()),
            file_paths: Vec::new(),
            session_id: None,
        };
        self.c.call(&span(Phase::Pre)).unwrap();
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        let mode = fs::metadata(&target).ok().map(|m| m.permissions().mode());
        let tmp = target.with_file_name(format!(
            "{}.tmp.{}.{}",
            target.file_name().unwrap().to_str().unwrap(),
            std::process::id(),
            1_700_000_000_000u64 + self.n
        ));
        fs::write(&tmp, data).unwrap();
        if let Some(mode) = mode {
            fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).unwrap();
        }
        fs::rename(&tmp, &target).unwrap();
        self.c.call(&span(Phase::Post)).unwrap();
    }

    /// Bash: a child process.
    pub fn bash(&self, cmd: &str) -> String {
        sh(&self.m.dir, cmd)
    }

    /// A rewind (or its dry run) to `uuid`'s checkpoint in `scope`, through the typed client.
    pub fn rewind(
        &mut self,
        uuid: &str,
        scope: &str,
        dry_run: bool,
    ) -> Result<RewindReply, String> {
        let scope = Scope::parse(scope).unwrap_or_else(|| panic!("no scope {scope:?}"));
        self.c
            .call(&RewindFiles {
                dry_run,
                ..RewindFiles::to(uuid, scope)
            })
            .map_err(|e| e.to_string())
    }

    pub fn read(&self, rel: &str) -> Option<String> {
        fs::read_to_string(self.m.p(rel)).ok()
    }
}
