//! `rewindfs setup claude|qoder|codex|gemini`: writes the hooks of `rewindfs hook` into an agent
//! CLI's hook settings, and takes them out again with `--remove`:
//! - Claude Code: a project's `.claude/settings.json` or the user's `~/.claude/settings.json`;
//! - the Qoder CLI: `.qoder/settings.json` (it reads command hooks in Claude Code's form);
//! - the Codex CLI: `.codex/hooks.json` or `$CODEX_HOME/hooks.json`, and the trust Codex needs
//!   before it runs them, in `$CODEX_HOME/config.toml` (`codex_trust.rs`);
//! - the Gemini CLI: `.gemini/settings.json` or the user's (`$GEMINI_CLI_HOME/.gemini/`).
//!
//! All four take hooks in one JSON form, `{"hooks": {EVENT: [{"matcher", "hooks": [HANDLER]}]}}`;
//! they differ in the events, the matcher and the handler's fields ([`Agent::events`],
//! [`Agent::handler`]). Idempotent: hooks already there are not added twice, a file that needs no
//! change is not written, and everything else in the file is kept as it was, in its order. The
//! hook's command names the binary by its absolute path, quoted for the shell the CLI runs it
//! with when the path needs it.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// An agent CLI whose settings take command hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Claude Code (`.claude/settings.json`).
    Claude,
    /// The Qoder CLI (`.qoder/settings.json`).
    Qoder,
    /// The Codex CLI (`.codex/hooks.json`).
    Codex,
    /// The Gemini CLI (`.gemini/settings.json`).
    Gemini,
}

/// How long Codex gives the hook, in seconds, and Gemini, in milliseconds: the hook takes a few
/// milliseconds, and never blocks the agent for long when the daemon is slow.
const CODEX_TIMEOUT_S: u64 = 30;
const GEMINI_TIMEOUT_MS: u64 = 30_000;

impl Agent {
    /// The agent a `setup` argument names.
    pub fn parse(s: &str) -> Option<Agent> {
        match s {
            "claude" => Some(Agent::Claude),
            "qoder" => Some(Agent::Qoder),
            "codex" => Some(Agent::Codex),
            "gemini" => Some(Agent::Gemini),
            _ => None,
        }
    }

    /// Its hook settings file in project `dir`.
    pub fn settings_in(self, dir: &Path) -> PathBuf {
        match self {
            Agent::Claude => dir.join(".claude/settings.json"),
            Agent::Qoder => dir.join(".qoder/settings.json"),
            Agent::Codex => dir.join(".codex/hooks.json"),
            Agent::Gemini => dir.join(".gemini/settings.json"),
        }
    }

    /// Its hook settings file for every project of the user whose home is `home`, where the CLI
    /// looks for it: Codex under `$CODEX_HOME` (default `~/.codex`), Gemini under
    /// `$GEMINI_CLI_HOME` (default the home directory).
    pub fn user_settings(self, home: &Path) -> PathBuf {
        let var = |name| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        match self {
            Agent::Codex => codex_home(home).join("hooks.json"),
            Agent::Gemini => var("GEMINI_CLI_HOME")
                .unwrap_or_else(|| home.to_path_buf())
                .join(".gemini/settings.json"),
            Agent::Claude | Agent::Qoder => self.settings_in(home),
        }
    }

    /// Its name for people.
    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Qoder => "qodercli",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
        }
    }

    /// The events `rewindfs hook` handles for this CLI, and whether each takes a tool matcher.
    pub fn events(self) -> &'static [(&'static str, bool)] {
        match self {
            // PreSkillShellCommand (Claude Code 2.1.332): a skill's or command's shell line is
            // about to run (no PreToolUse or PostToolUse comes for it); older CLIs ignore it.
            Agent::Claude => &[
                ("UserPromptSubmit", false),
                ("PreToolUse", true),
                ("PostToolUse", true),
                ("PostToolUseFailure", true),
                ("PreSkillShellCommand", true),
                ("Stop", false),
                ("SessionEnd", false),
            ],
            Agent::Qoder => &[
                ("UserPromptSubmit", false),
                ("PreToolUse", true),
                ("PostToolUse", true),
                ("PostToolUseFailure", true),
                ("Stop", false),
                ("SessionEnd", false),
            ],
            Agent::Codex => &[
                ("UserPromptSubmit", false),
                ("PreToolUse", true),
                ("PostToolUse", true),
                ("Stop", false),
            ],
            Agent::Gemini => &[
                ("BeforeAgent", false),
                ("BeforeTool", true),
                ("AfterTool", true),
                ("AfterAgent", false),
                ("SessionEnd", false),
            ],
        }
    }

    /// The matcher of a group for an event that takes one (`None`: the group has none).
    fn matcher(self, takes_one: bool) -> Option<&'static str> {
        match self {
            // The Qoder CLI tests a matcher as a regular expression (where `*` alone matches
            // nothing) and runs a group without one for every tool.
            Agent::Qoder => None,
            // Claude Code's and Codex's "every tool" is `*`; Gemini runs a `*` group for
            // every event (measured).
            Agent::Claude | Agent::Codex => takes_one.then_some("*"),
            Agent::Gemini => Some("*"),
        }
    }

    /// The handler that runs `command`, with the fields this CLI wants.
    pub fn handler(self, command: &str) -> Value {
        match self {
            Agent::Claude | Agent::Qoder => json!({"type": "command", "command": command}),
            Agent::Codex => {
                json!({"type": "command", "command": command, "timeout": CODEX_TIMEOUT_S})
            }
            Agent::Gemini => json!({
                "name": "rewindfs",
                "type": "command",
                "command": command,
                "timeout": GEMINI_TIMEOUT_MS,
            }),
        }
    }
}

/// Codex's home: `$CODEX_HOME` as Codex reads it (canonicalised when set, so the hooks' trust
/// keys name the path Codex will), else `~/.codex`.
pub fn codex_home(home: &Path) -> PathBuf {
    match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
        Some(h) => std::fs::canonicalize(&h).unwrap_or_else(|_| PathBuf::from(h)),
        None => home.join(".codex"),
    }
}

/// What `setup` did to the file.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub path: PathBuf,
    /// Hook entries added (setup) or removed (remove).
    pub changed: usize,
}

/// Errors of `setup`, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{path}: {source}; fix or move the file, then run this again")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a JSON object ({why}); fix it, then run this again")]
    NotSettings { path: String, why: String },
}

/// The hook command for the binary at `exe`: `<exe> hook`, the path single-quoted for the shell
/// when it holds anything but letters, digits and `/._-+,:@%=` (a space, say).
pub fn command_for(exe: &Path) -> String {
    let p = exe.to_string_lossy();
    let plain = !p.is_empty()
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        format!("{p} hook")
    } else {
        format!("'{}' hook", p.replace('\'', r"'\''"))
    }
}

/// Whether a hook command is one of ours: `<…/rewindfs> hook`, the path plain or single-quoted
/// (as [`command_for`] writes it).
pub(crate) fn is_ours(command: &str) -> bool {
    let command = command.trim();
    let (exe, rest) = match command.strip_prefix('\'') {
        // 'a'\''b' hook: the quoted path, with any quote in it written as '\''.
        Some(q) => {
            let mut exe = String::new();
            let mut rest = q;
            loop {
                let Some(end) = rest.find('\'') else {
                    return false;
                };
                exe.push_str(&rest[..end]);
                rest = &rest[end + 1..];
                match rest.strip_prefix("\\''") {
                    Some(more) => {
                        exe.push('\'');
                        rest = more;
                    }
                    None => break,
                }
            }
            (exe, rest)
        }
        None => {
            // Written unquoted by an older rewindfs, a path with spaces in it.
            if let Some(exe) = command.strip_suffix(" hook") {
                if Path::new(exe.trim_end())
                    .file_name()
                    .is_some_and(|n| n == "rewindfs")
                {
                    return true;
                }
            }
            let end = command.find(char::is_whitespace).unwrap_or(command.len());
            (command[..end].to_string(), &command[end..])
        }
    };
    // The word after the path is `hook`, apart from it (`'…/rewindfs'hook` is one word).
    let mut words = rest.split_whitespace();
    rest.starts_with(char::is_whitespace)
        && Path::new(&exe).file_name().is_some_and(|n| n == "rewindfs")
        && words.next() == Some("hook")
        && words.next().is_none()
}

/// The settings file at `path`, an empty object when it is missing or empty.
///
/// # Errors
/// The file cannot be read, or is not a JSON object.
pub fn read(path: &Path) -> Result<Map<String, Value>, SetupError> {
    let err = |source| SetupError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => return Err(err(e)),
    };
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(SetupError::NotSettings {
            path: path.display().to_string(),
            why: "its top level is not an object".into(),
        }),
        Err(e) => Err(SetupError::NotSettings {
            path: path.display().to_string(),
            why: e.to_string(),
        }),
    }
}

/// Writes the settings file at `path` (pretty JSON), beside and renamed over.
///
/// # Errors
/// The file cannot be written.
pub fn write(path: &Path, settings: &Map<String, Value>) -> Result<(), SetupError> {
    let err = |source| SetupError::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut text = serde_json::to_string_pretty(settings).unwrap_or_default();
    text.push('\n');
    // Written beside and renamed over: an interrupted setup leaves the old file whole.
    let tmp = path.with_extension("json.rewindfs-tmp");
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Adds `command` (the rewindfs binary and `hook`) for every event of `agent` to the settings
/// file at `path`, unless a rewindfs hook is there already.
///
/// # Errors
/// The file cannot be read or written, or is not a JSON object.
pub fn install(path: &Path, command: &str, agent: Agent) -> Result<Outcome, SetupError> {
    let mut settings = read(path)?;
    let hooks = settings
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    if !hooks.is_object() {
        *hooks = Value::Object(Map::new());
    }
    let hooks = hooks.as_object_mut().expect("made an object above");
    let mut changed = 0;
    for (event, takes_matcher) in agent.events() {
        let list = hooks
            .entry(*event)
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        let list = list.as_array_mut().expect("made an array above");
        let present = list.iter().any(|group| {
            group["hooks"].as_array().is_some_and(|hs| {
                hs.iter()
                    .any(|h| h["command"].as_str().is_some_and(is_ours))
            })
        });
        if present {
            continue;
        }
        let mut group = Map::new();
        if let Some(m) = agent.matcher(*takes_matcher) {
            group.insert("matcher".into(), json!(m));
        }
        group.insert("hooks".into(), json!([agent.handler(command)]));
        list.push(Value::Object(group));
        changed += 1;
    }
    if changed > 0 {
        write(path, &settings)?;
    }
    Ok(Outcome {
        path: path.to_path_buf(),
        changed,
    })
}

/// Takes every rewindfs hook out of the settings file at `path` (groups and events left
/// empty go too); the rest of the file stays.
///
/// # Errors
/// The file cannot be read or written, or is not a JSON object.
pub fn remove(path: &Path) -> Result<Outcome, SetupError> {
    let mut settings = read(path)?;
    let mut changed = 0;
    if let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) {
        for list in hooks.values_mut() {
            let Some(groups) = list.as_array_mut() else {
                continue;
            };
            for group in groups.iter_mut() {
                if let Some(hs) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                    let before = hs.len();
                    hs.retain(|h| !h["command"].as_str().is_some_and(is_ours));
                    changed += before - hs.len();
                }
            }
            groups.retain(|g| g["hooks"].as_array().is_none_or(|hs| !hs.is_empty()));
        }
        hooks.retain(|_, list| list.as_array().is_none_or(|l| !l.is_empty()));
        if hooks.is_empty() {
            settings.remove("hooks");
        }
    }
    if changed > 0 {
        write(path, &settings)?;
    }
    Ok(Outcome {
        path: path.to_path_buf(),
        changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_is_idempotent_keeps_other_settings_and_remove_takes_only_ours() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".claude/settings.json");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let theirs = json!({"model": "x", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}]}});
        std::fs::write(&p, theirs.to_string()).unwrap();
        let first = install(&p, "/usr/local/bin/rewindfs hook", Agent::Claude).unwrap();
        assert_eq!(first.changed, Agent::Claude.events().len());
        let again = install(&p, "/other/place/rewindfs hook", Agent::Claude).unwrap();
        assert_eq!(again.changed, 0, "installed twice");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["model"], json!("x"));
        assert_eq!(v["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        assert_eq!(v["hooks"]["PreToolUse"][1]["matcher"], json!("*"));
        assert!(v["hooks"]["Stop"][0].get("matcher").is_none());
        let gone = remove(&p).unwrap();
        assert_eq!(gone.changed, Agent::Claude.events().len());
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v, theirs, "only ours went");
        assert_eq!(remove(&p).unwrap().changed, 0);
        std::fs::write(&p, "[1]").unwrap();
        let e = install(&p, "rewindfs hook", Agent::Claude)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("settings.json") && e.contains("not a JSON object"),
            "{e}"
        );
    }

    /// A binary path with a space (or a quote) is quoted for the shell, and found again as
    /// ours; a settings file that needs nothing is not written; keys keep their order.
    #[test]
    fn a_path_with_spaces_is_quoted_and_nothing_is_rewritten_needlessly() {
        assert_eq!(
            command_for(Path::new("/usr/bin/rewindfs")),
            "/usr/bin/rewindfs hook"
        );
        let spaced = command_for(Path::new("/opt/my tools/it's/rewindfs"));
        assert_eq!(spaced, r"'/opt/my tools/it'\''s/rewindfs' hook");
        // What the CLI's shell runs: the quoted path is one word, the same path.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s|' {}", spaced))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "/opt/my tools/it's/rewindfs|hook|"
        );
        for (cmd, ours) in [
            (spaced.as_str(), true),
            ("/usr/bin/rewindfs hook", true),
            ("'/a b/rewindfs' hook", true),
            ("'/a b/rewindfs' hook --x", false),
            ("'/a b/other' hook", false),
            ("'/unterminated hook", false),
            ("'/x/rewindfs'hook", false),
            ("/opt/my tools/rewindfs hook", true),
            ("audit.sh", false),
        ] {
            assert_eq!(is_ours(cmd), ours, "{cmd}");
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("settings.json");
        std::fs::write(&p, r#"{"zeta": 1, "alpha": {"b": 2, "a": 1}}"#).unwrap();
        assert_eq!(
            install(&p, &spaced, Agent::Claude).unwrap().changed,
            Agent::Claude.events().len()
        );
        let text = std::fs::read_to_string(&p).unwrap();
        let z = text.find("\"zeta\"").unwrap();
        assert!(
            z < text.find("\"alpha\"").unwrap(),
            "keys stay in order: {text}"
        );
        assert!(
            text.find("\"b\"").unwrap() < text.find("\"a\"").unwrap(),
            "{text}"
        );
        let before = std::fs::metadata(&p).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(
            install(&p, &spaced, Agent::Claude).unwrap().changed,
            0,
            "found as ours"
        );
        assert_eq!(
            std::fs::metadata(&p).unwrap().modified().unwrap(),
            before,
            "not written again"
        );
    }
}
