//! The trust the Codex CLI needs before it runs a hook, written by `rewindfs setup codex`.
//!
//! Codex skips a hook that is not trusted, silently, so hooks written without trust install
//! nothing that runs. What it checks (read from openai/codex's `codex-rs/hooks`, and confirmed
//! against the 0.171.0 binary's own `hooks/list` hashes):
//! - a hook is trusted when the user's `$CODEX_HOME/config.toml` holds
//!   `[hooks.state."<hooks.json path>:<event>:<group>:<handler>"] trusted_hash = "sha256:<hex>"`
//!   with the hash of that hook as it is now (a changed hook needs trust again). Only the user's
//!   config counts: a project cannot trust its own hooks;
//! - the key names the hooks file by its absolute path, the event in snake case
//!   (`user_prompt_submit`), and the group's and the handler's places, from 0;
//! - the hash is sha256 of the compact JSON, keys sorted, of
//!   `{"event_name", "matcher"?, "hooks": [handler]}`, the handler with its defaults filled in
//!   (`timeout` 600, `async` false), the matcher left out for UserPromptSubmit and Stop;
//! - a project's `.codex/` (its hooks.json too) is read only when the project is trusted:
//!   `[projects."<dir>"] trust_level = "trusted"` in the same config.
//!
//! Everything else in config.toml is kept as it was, comments and layout included.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toml_edit::{DocumentMut, Item, Table, value};

use super::setup::{SetupError, is_ours};

/// A trust entry: the hook's key and the hash it has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub hash: String,
}

/// What a trust change did to config.toml.
#[derive(Debug, PartialEq, Eq)]
pub struct Trusted {
    pub config: PathBuf,
    /// Trust entries added or changed (setup), or taken out (remove).
    pub changed: usize,
    /// The project was marked trusted by this run (its `.codex/` is read from now on).
    pub project_trusted: bool,
}

/// Codex's name of a hook event in trust keys and hashes.
fn label(event: &str) -> String {
    let mut out = String::new();
    for (i, c) in event.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The hash Codex checks a hook's trust by.
fn hash(event: &str, matcher: Option<&str>, handler: &Value) -> String {
    let mut h = Map::new();
    h.insert("type".into(), json!("command"));
    h.insert("command".into(), handler["command"].clone());
    let default_timeout = if event == "SessionEnd" { 1 } else { 600 };
    let timeout = handler["timeout"]
        .as_u64()
        .unwrap_or(default_timeout)
        .max(1);
    h.insert("timeout".into(), json!(timeout));
    h.insert(
        "async".into(),
        json!(handler["async"].as_bool().unwrap_or(false)),
    );
    if let Some(m) = handler["statusMessage"].as_str() {
        h.insert("statusMessage".into(), json!(m));
    }
    let mut identity = Map::new();
    identity.insert("event_name".into(), json!(label(event)));
    if let Some(m) = matcher.filter(|_| !matches!(event, "UserPromptSubmit" | "Stop")) {
        identity.insert("matcher".into(), json!(m));
    }
    identity.insert("hooks".into(), json!([Value::Object(h)]));
    let text = sorted(&Value::Object(identity)).to_string();
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `v` with every object's keys in sorted order (serde_json keeps insertion order here).
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The trust entries of the hooks that run exactly `command` (this binary's `hook`) in the hooks
/// file at `hooks_json`: the only ones setup may trust. A hook that merely looks like ours — a
/// `…/rewindfs hook` elsewhere, which a cloned repository's `.codex/hooks.json` could name — is
/// never trusted by setup.
pub fn entries_running(
    hooks_json: &Path,
    settings: &Map<String, Value>,
    command: &str,
) -> Vec<Entry> {
    entries_where(hooks_json, settings, |c| c == command)
}

/// The trust entries of every rewindfs hook in the hooks file at `hooks_json` (its contents
/// `settings`), by their places in it: what `--remove` takes out.
pub fn our_entries(hooks_json: &Path, settings: &Map<String, Value>) -> Vec<Entry> {
    entries_where(hooks_json, settings, is_ours)
}

fn entries_where(
    hooks_json: &Path,
    settings: &Map<String, Value>,
    pick: impl Fn(&str) -> bool,
) -> Vec<Entry> {
    let mut out = Vec::new();
    let Some(hooks) = settings.get("hooks").and_then(Value::as_object) else {
        return out;
    };
    for (event, groups) in hooks {
        for (g, group) in groups.as_array().into_iter().flatten().enumerate() {
            let matcher = group["matcher"].as_str();
            for (h, handler) in group["hooks"].as_array().into_iter().flatten().enumerate() {
                if handler["command"].as_str().is_some_and(&pick) {
                    out.push(Entry {
                        key: format!("{}:{}:{g}:{h}", hooks_json.display(), label(event)),
                        hash: hash(event, matcher, handler),
                    });
                }
            }
        }
    }
    out
}

/// Codex's config.toml at `config` (an empty document when missing).
///
/// # Errors
/// The file cannot be read or is not TOML.
pub fn read_config(config: &Path) -> Result<DocumentMut, SetupError> {
    let text = match std::fs::read_to_string(config) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(SetupError::Io {
                path: config.display().to_string(),
                source,
            });
        }
    };
    text.parse::<DocumentMut>()
        .map_err(|e| SetupError::NotSettings {
            path: config.display().to_string(),
            why: format!("not TOML: {}", e.to_string().trim()),
        })
}

/// Writes a Codex config.toml, beside and renamed over.
///
/// # Errors
/// The file cannot be written.
pub fn write_config(config: &Path, doc: &DocumentMut) -> Result<(), SetupError> {
    let err = |source| SetupError::Io {
        path: config.display().to_string(),
        source,
    };
    if let Some(dir) = config.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    // Written beside and renamed over: an interrupted setup leaves the old file whole.
    let tmp = config.with_extension("toml.rewindfs-tmp");
    std::fs::write(&tmp, doc.to_string()).map_err(err)?;
    std::fs::rename(&tmp, config).map_err(err)
}

/// The table at `key` of `parent`, made (implicit, so only its sub-tables are written as
/// headers) when missing; `None` when the key holds something else.
fn table<'a>(parent: &'a mut Table, key: &str) -> Option<&'a mut Table> {
    let item = parent.entry(key).or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    item.as_table_mut()
}

/// Trusts `entries` in Codex's `config` (and, for a project's hooks, the project `project`),
/// writing the file only when something changes.
///
/// # Errors
/// The file cannot be read or written or is not TOML; hooks are switched off there; the
/// project is marked untrusted there (the user said so: it is theirs to change).
pub fn trust(
    config: &Path,
    entries: &[Entry],
    project: Option<&Path>,
) -> Result<Trusted, SetupError> {
    let mut doc = read_config(config)?;
    let refuse = |why: String| SetupError::NotSettings {
        path: config.display().to_string(),
        why,
    };
    if doc
        .get("features")
        .and_then(|f| f.get("hooks"))
        .and_then(Item::as_bool)
        == Some(false)
    {
        return Err(refuse(
            "it switches Codex's hooks off (`[features] hooks = false`), so the rewindfs hooks would never run; take that line out".into(),
        ));
    }
    let mut project_trusted = false;
    if let Some(project) = project {
        let key = project.display().to_string();
        let projects = table(doc.as_table_mut(), "projects")
            .ok_or_else(|| refuse("its `projects` is not a table".into()))?;
        let p = table(projects, &key)
            .ok_or_else(|| refuse(format!("its `projects.\"{key}\"` is not a table")))?;
        match p.get("trust_level").and_then(Item::as_str) {
            Some("trusted") => {}
            Some(other) => {
                return Err(refuse(format!(
                    "it marks the project {key} `{other}`, and Codex reads no hooks of a project that is not trusted; trust the project in Codex (or set its trust_level = \"trusted\")"
                )));
            }
            None => {
                p.insert("trust_level", value("trusted"));
                p.set_implicit(false);
                project_trusted = true;
            }
        }
    }
    let hooks = table(doc.as_table_mut(), "hooks")
        .ok_or_else(|| refuse("its `hooks` is not a table".into()))?;
    let state =
        table(hooks, "state").ok_or_else(|| refuse("its `hooks.state` is not a table".into()))?;
    let mut changed = 0;
    for e in entries {
        let t = table(state, &e.key)
            .ok_or_else(|| refuse(format!("its `hooks.state.\"{}\"` is not a table", e.key)))?;
        if t.get("trusted_hash").and_then(Item::as_str) != Some(e.hash.as_str()) {
            t.insert("trusted_hash", value(e.hash.clone()));
            t.set_implicit(false);
            changed += 1;
        }
    }
    if changed > 0 || project_trusted {
        write_config(config, &doc)?;
    }
    Ok(Trusted {
        config: config.to_path_buf(),
        changed,
        project_trusted,
    })
}

/// Takes the trust of `entries` out of Codex's `config` (the hooks are gone); the project's
/// own trust stays, since the user may rely on it for more than our hooks.
///
/// # Errors
/// The file cannot be read or written or is not TOML.
pub fn untrust(config: &Path, entries: &[Entry]) -> Result<Trusted, SetupError> {
    let mut doc = read_config(config)?;
    let mut changed = 0;
    if let Some(state) = doc
        .get_mut("hooks")
        .and_then(|h| h.get_mut("state"))
        .and_then(Item::as_table_like_mut)
    {
        for e in entries {
            if state.remove(&e.key).is_some() {
                changed += 1;
            }
        }
        if state.is_empty() {
            if let Some(hooks) = doc.get_mut("hooks").and_then(Item::as_table_like_mut) {
                hooks.remove("state");
            }
        }
    }
    if doc
        .get("hooks")
        .and_then(Item::as_table_like)
        .is_some_and(|h| h.is_empty())
    {
        doc.remove("hooks");
    }
    if changed > 0 {
        write_config(config, &doc)?;
    }
    Ok(Trusted {
        config: config.to_path_buf(),
        changed,
        project_trusted: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hashes the real Codex 0.171.0 reported for these hooks (`codex app-server`'s
    /// `hooks/list` `currentHash`), so a change in how we hash fails here, not silently in a
    /// user's Codex.
    #[test]
    fn hashes_are_codexs_own() {
        let cases = [
            (
                "PreToolUse",
                Some("*"),
                json!({"type": "command", "command": "echo hi", "timeout": 30}),
                "sha256:6e4e918f",
            ),
            (
                "UserPromptSubmit",
                None,
                json!({"type": "command", "command": "echo a"}),
                "sha256:12ed8294",
            ),
            (
                "UserPromptSubmit",
                Some("ignored"),
                json!({"type": "command", "command": "echo b", "statusMessage": "s"}),
                "sha256:7ff74f65",
            ),
        ];
        for (event, matcher, handler, want) in cases {
            let got = hash(event, matcher, &handler);
            assert!(got.starts_with(want), "{event}: {got}, Codex says {want}…");
        }
        assert_eq!(label("UserPromptSubmit"), "user_prompt_submit");
        assert_eq!(label("Stop"), "stop");
    }

    #[test]
    fn trust_keeps_the_rest_of_config_and_remove_takes_only_ours() {
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("config.toml");
        let mine = "# my settings\nmodel = \"gpt-5.5\" # the model\n\n[projects.\"/elsewhere\"]\ntrust_level = \"trusted\"\n\n[hooks.state.\"/x/hooks.json:stop:0:0\"]\ntrusted_hash = \"sha256:00\"\n";
        std::fs::write(&config, mine).unwrap();
        let hooks_json = d.path().join("proj/.codex/hooks.json");
        let settings: Map<String, Value> = serde_json::from_value(json!({"hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "audit.sh"},
                                {"type": "command", "command": "/bin/rewindfs hook", "timeout": 30}]}],
            "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "/bin/rewindfs hook", "timeout": 30}]}],
        }}))
        .unwrap();
        let entries = our_entries(&hooks_json, &settings);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries_running(&hooks_json, &settings, "/bin/rewindfs hook"),
            entries,
            "this binary's hooks"
        );
        assert!(
            entries_running(&hooks_json, &settings, "/usr/bin/rewindfs hook").is_empty(),
            "a look-alike elsewhere is never trusted"
        );
        assert!(
            entries[0].key.ends_with("/proj/.codex/hooks.json:stop:0:1"),
            "{entries:?}"
        );
        assert!(entries[1].key.ends_with(":pre_tool_use:0:0"), "{entries:?}");
        let project = d.path().join("proj");
        let t = trust(&config, &entries, Some(&project)).unwrap();
        assert_eq!((t.changed, t.project_trusted), (2, true));
        let text = std::fs::read_to_string(&config).unwrap();
        // Every line of the user's stays, in its order (ours go beside their kin).
        let mut rest = text.as_str();
        for line in mine.lines() {
            let at = rest
                .find(line)
                .unwrap_or_else(|| panic!("{line:?} lost: {text}"));
            rest = &rest[at + line.len()..];
        }
        let doc: DocumentMut = text.parse().unwrap();
        let key = project.display().to_string();
        assert_eq!(
            doc["projects"][key.as_str()]["trust_level"].as_str(),
            Some("trusted")
        );
        assert_eq!(
            doc["hooks"]["state"][entries[0].key.as_str()]["trusted_hash"].as_str(),
            Some(entries[0].hash.as_str())
        );
        let again = trust(&config, &entries, Some(&project)).unwrap();
        assert_eq!(
            (again.changed, again.project_trusted),
            (0, false),
            "idempotent"
        );
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            text,
            "not rewritten"
        );
        let gone = untrust(&config, &entries).unwrap();
        assert_eq!(gone.changed, 2);
        let after = std::fs::read_to_string(&config).unwrap();
        assert!(
            after.contains("/x/hooks.json:stop:0:0"),
            "theirs stays: {after}"
        );
        assert!(
            after.contains("# the model") && after.contains(&key),
            "{after}"
        );
        assert!(!after.contains(&entries[1].key), "{after}");
    }

    #[test]
    fn a_project_the_user_marked_untrusted_or_hooks_switched_off_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("config.toml");
        let project = d.path().join("proj");
        std::fs::write(
            &config,
            format!(
                "[projects.\"{}\"]\ntrust_level = \"untrusted\"\n",
                project.display()
            ),
        )
        .unwrap();
        let e = trust(&config, &[], Some(&project)).unwrap_err().to_string();
        assert!(e.contains("config.toml") && e.contains("untrusted"), "{e}");
        std::fs::write(&config, "[features]\nhooks = false\n").unwrap();
        let e = trust(&config, &[], None).unwrap_err().to_string();
        assert!(e.contains("hooks = false"), "{e}");
        std::fs::write(&config, "not = [toml").unwrap();
        let e = trust(&config, &[], None).unwrap_err().to_string();
        assert!(e.contains("not TOML"), "{e}");
    }
}
