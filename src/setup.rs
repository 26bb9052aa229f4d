//! `rewindfs setup claude`: writes the hooks of `rewindfs hook` into a Claude Code settings
//! file (a project's `.claude/settings.json`, or the user's `~/.claude/settings.json`), and
//! takes them out again with `--remove`. Idempotent: hooks already there are not added twice,
//! and everything else in the file is kept as it was.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// The events `rewindfs hook` handles, and whether the event takes a tool matcher.
const EVENTS: &[(&str, bool)] = &[
    ("UserPromptSubmit", false),
    ("PreToolUse", true),
    ("PostToolUse", true),
    ("PostToolUseFailure", true),
    ("Stop", false),
    ("SessionEnd", false),
];

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

/// Whether a hook command is one of ours: `<…/rewindfs> hook`.
fn is_ours(command: &str) -> bool {
    let mut words = command.split_whitespace();
    let exe = words.next().unwrap_or("");
    Path::new(exe).file_name().is_some_and(|n| n == "rewindfs")
        && words.next() == Some("hook")
        && words.next().is_none()
}

fn read(path: &Path) -> Result<Map<String, Value>, SetupError> {
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

fn write(path: &Path, settings: &Map<String, Value>) -> Result<(), SetupError> {
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

/// Adds `command` (the rewindfs binary and `hook`) for every event of `EVENTS` to the
/// settings file at `path`, unless a rewindfs hook is there already.
///
/// # Errors
/// The file cannot be read or written, or is not a JSON object.
pub fn install(path: &Path, command: &str) -> Result<Outcome, SetupError> {
    let mut settings = read(path)?;
    let hooks = settings
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    if !hooks.is_object() {
        *hooks = Value::Object(Map::new());
    }
    let hooks = hooks.as_object_mut().expect("made an object above");
    let mut changed = 0;
    for (event, matcher) in EVENTS {
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
        let mut group = json!({"hooks": [{"type": "command", "command": command}]});
        if *matcher {
            group["matcher"] = json!("*");
        }
        list.push(group);
        changed += 1;
    }
    write(path, &settings)?;
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
        let first = install(&p, "/usr/local/bin/rewindfs hook").unwrap();
        assert_eq!(first.changed, EVENTS.len());
        let again = install(&p, "/other/place/rewindfs hook").unwrap();
        assert_eq!(again.changed, 0, "installed twice");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["model"], json!("x"));
        assert_eq!(v["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        assert_eq!(v["hooks"]["PreToolUse"][1]["matcher"], json!("*"));
        assert!(v["hooks"]["Stop"][0].get("matcher").is_none());
        let gone = remove(&p).unwrap();
        assert_eq!(gone.changed, EVENTS.len());
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v, theirs, "only ours went");
        assert_eq!(remove(&p).unwrap().changed, 0);
        std::fs::write(&p, "[1]").unwrap();
        let e = install(&p, "rewindfs hook").unwrap_err().to_string();
        assert!(
            e.contains("settings.json") && e.contains("not a JSON object"),
            "{e}"
        );
    }
}
