//! `rewindfs setup` registers `rewindfs mcp` (the MCP server for the agent itself) where each
//! CLI looks for MCP servers, under the name `rewindfs`, and `--remove` takes it out:
//! - Claude Code: a project's `.mcp.json` (and its name in the project settings'
//!   `enabledMcpjsonServers`, which the CLI asks the user about otherwise), or the user's
//!   `~/.claude.json`;
//! - Codex: `[mcp_servers.rewindfs]` in the project's `.codex/config.toml` (read for a trusted
//!   project) or the user's `$CODEX_HOME/config.toml`;
//! - Gemini: `mcpServers` in the same settings file as its hooks;
//! - the Qoder CLI: `mcpServers` in the same settings file as its hooks (its binary reads the
//!   user's and the project's settings' `mcpServers`; not run here: qodercli needs an online
//!   login, and it may ask the user before it starts a project's server).
//!
//! An entry named `rewindfs` that runs something else is the user's, and is kept.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use toml_edit::{DocumentMut, Item, Table, value};

use super::setup::{Agent, SetupError, read, write};

/// Where the server is registered, and what changed.
#[derive(Debug, PartialEq, Eq)]
pub struct Registered {
    pub path: PathBuf,
    /// Added or updated (setup), or removed (remove).
    pub changed: bool,
    /// A `rewindfs` entry that is not ours is there: left as it is.
    pub theirs: bool,
}

/// The file `agent` reads MCP servers from: in project `project`, or the user's under `home`.
pub fn config_file(agent: Agent, project: Option<&Path>, home: &Path) -> PathBuf {
    match (agent, project) {
        (Agent::Claude, Some(p)) => p.join(".mcp.json"),
        (Agent::Claude, None) => home.join(".claude.json"),
        (Agent::Codex, Some(p)) => p.join(".codex/config.toml"),
        (Agent::Codex, None) => super::setup::codex_home(home).join("config.toml"),
        (Agent::Gemini | Agent::Qoder, Some(p)) => agent.settings_in(p),
        (Agent::Gemini | Agent::Qoder, None) => agent.user_settings(home),
    }
}

/// Whether a server entry's command is a rewindfs binary.
fn is_ours(command: Option<&str>) -> bool {
    command.is_some_and(|c| Path::new(c).file_name().is_some_and(|n| n == "rewindfs"))
}

/// Registers `exe mcp` as `rewindfs` in `path` (a JSON file with `mcpServers`, or Codex's TOML).
///
/// # Errors
/// The file cannot be read or written, or is not what it should be.
pub fn register(path: &Path, exe: &Path) -> Result<Registered, SetupError> {
    let exe = exe.display().to_string();
    if path.extension().is_some_and(|e| e == "toml") {
        return register_toml(path, &exe);
    }
    let mut doc = read(path)?;
    let servers = object(&mut doc, "mcpServers", path)?;
    let want = json!({"command": exe, "args": ["mcp"]});
    let (changed, theirs) = match servers.get("rewindfs") {
        Some(v) if !is_ours(v["command"].as_str()) => (false, true),
        Some(v) if *v == want => (false, false),
        _ => {
            servers.insert("rewindfs".into(), want);
            (true, false)
        }
    };
    if changed {
        write(path, &doc)?;
    }
    Ok(Registered {
        path: path.to_path_buf(),
        changed,
        theirs,
    })
}

/// Takes our `rewindfs` entry out of `path`.
///
/// # Errors
/// The file cannot be read or written, or is not what it should be.
pub fn unregister(path: &Path) -> Result<Registered, SetupError> {
    if path.extension().is_some_and(|e| e == "toml") {
        return unregister_toml(path);
    }
    let mut doc = read(path)?;
    let mut changed = false;
    if let Some(servers) = doc.get_mut("mcpServers").and_then(Value::as_object_mut) {
        if servers
            .get("rewindfs")
            .is_some_and(|v| is_ours(v["command"].as_str()))
        {
            servers.remove("rewindfs");
            changed = true;
        }
        if servers.is_empty() {
            doc.remove("mcpServers");
        }
    }
    if changed {
        write(path, &doc)?;
    }
    Ok(Registered {
        path: path.to_path_buf(),
        changed,
        theirs: false,
    })
}

/// Claude Code asks before it starts a project's `.mcp.json` server unless the project settings
/// name it in `enabledMcpjsonServers`: adds (or with `on == false` removes) `rewindfs` there.
///
/// # Errors
/// The settings file cannot be read or written, or is not a JSON object.
pub fn enable_in_claude_settings(settings: &Path, on: bool) -> Result<bool, SetupError> {
    let mut doc = read(settings)?;
    let list = doc
        .entry("enabledMcpjsonServers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let list = list.as_array_mut().expect("made an array above");
    let there = list.iter().any(|v| v == "rewindfs");
    let changed = match (on, there) {
        (true, false) => {
            list.push(json!("rewindfs"));
            true
        }
        (false, true) => {
            list.retain(|v| v != "rewindfs");
            true
        }
        _ => false,
    };
    if list.is_empty() {
        doc.remove("enabledMcpjsonServers");
    }
    if changed {
        write(settings, &doc)?;
    }
    Ok(changed)
}

fn object<'a>(
    doc: &'a mut Map<String, Value>,
    key: &str,
    path: &Path,
) -> Result<&'a mut Map<String, Value>, SetupError> {
    doc.entry(key)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| SetupError::NotSettings {
            path: path.display().to_string(),
            why: format!("its `{key}` is not an object"),
        })
}

fn write_toml(path: &Path, doc: &DocumentMut) -> Result<(), SetupError> {
    super::codex_trust::write_config(path, doc)
}

fn register_toml(path: &Path, exe: &str) -> Result<Registered, SetupError> {
    let mut doc = super::codex_trust::read_config(path)?;
    let bad = |why: &str| SetupError::NotSettings {
        path: path.display().to_string(),
        why: why.into(),
    };
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_mut()
        .ok_or_else(|| bad("its `mcp_servers` is not a table"))?;
    let current = servers.get("rewindfs");
    let command = current
        .and_then(|t| t.get("command"))
        .and_then(Item::as_str);
    if current.is_some() && !is_ours(command) {
        return Ok(Registered {
            path: path.to_path_buf(),
            changed: false,
            theirs: true,
        });
    }
    let args_ok = current
        .and_then(|t| t.get("args"))
        .and_then(Item::as_array)
        .is_some_and(|a| a.len() == 1 && a.get(0).and_then(|v| v.as_str()) == Some("mcp"));
    if command == Some(exe) && args_ok {
        return Ok(Registered {
            path: path.to_path_buf(),
            changed: false,
            theirs: false,
        });
    }
    let mut t = Table::new();
    t.insert("command", value(exe));
    let mut args = toml_edit::Array::new();
    args.push("mcp");
    t.insert("args", value(args));
    servers.insert("rewindfs", Item::Table(t));
    write_toml(path, &doc)?;
    Ok(Registered {
        path: path.to_path_buf(),
        changed: true,
        theirs: false,
    })
}

fn unregister_toml(path: &Path) -> Result<Registered, SetupError> {
    let mut doc = super::codex_trust::read_config(path)?;
    let mut changed = false;
    if let Some(servers) = doc.get_mut("mcp_servers").and_then(Item::as_table_like_mut) {
        let ours = servers
            .get("rewindfs")
            .and_then(|t| t.get("command"))
            .and_then(Item::as_str)
            .is_some_and(|c| is_ours(Some(c)));
        if ours {
            servers.remove("rewindfs");
            changed = true;
        }
        if servers.is_empty() {
            doc.remove("mcp_servers");
        }
    }
    if changed {
        write_toml(path, &doc)?;
    }
    Ok(Registered {
        path: path.to_path_buf(),
        changed,
        theirs: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_once_in_json_and_toml_keeps_theirs_and_removes_only_ours() {
        let d = tempfile::tempdir().unwrap();
        let exe = Path::new("/opt/bin/rewindfs");
        for name in ["settings.json", "config.toml"] {
            let p = d.path().join(name);
            let first = register(&p, exe).unwrap();
            assert!(first.changed && !first.theirs, "{name}");
            assert!(!register(&p, exe).unwrap().changed, "{name}: idempotent");
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(
                text.contains("/opt/bin/rewindfs") && text.contains("mcp"),
                "{text}"
            );
            assert!(
                register(&p, Path::new("/new/rewindfs")).unwrap().changed,
                "moved"
            );
            assert!(unregister(&p).unwrap().changed, "{name}");
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(!text.contains("rewindfs"), "{name}: {text}");
        }
        let p = d.path().join("theirs.json");
        std::fs::write(
            &p,
            r#"{"mcpServers": {"rewindfs": {"command": "my-wrapper"}}}"#,
        )
        .unwrap();
        assert!(register(&p, exe).unwrap().theirs);
        assert!(!unregister(&p).unwrap().changed);
        assert!(std::fs::read_to_string(&p).unwrap().contains("my-wrapper"));
        let s = d.path().join(".claude/settings.json");
        assert!(enable_in_claude_settings(&s, true).unwrap());
        assert!(!enable_in_claude_settings(&s, true).unwrap());
        assert!(enable_in_claude_settings(&s, false).unwrap());
        assert_eq!(std::fs::read_to_string(&s).unwrap().trim(), "{}");
    }
}
