//! The SDK's own answers, replayed: every scenario in `tests/clients/scenarios/` records what
//! the real Claude Code CLI 2.1.330 / Agent SDK answered to each `rewind_files` (dry run and
//! real) and the trees it left (`expect`; tests/clients/FINDINGS.md). Here each scenario's file
//! operations run through a mount with the stand-in agent (its Write/Edit/NotebookEdit as the
//! CLI's tools write: a temp file renamed over the target, inside a tool span; its Bash as a
//! child process), and rewindfs's tool scope must give the same answers and the same trees.
//!
//! The real CLI through a mount is the real-clients suite's; this one checks the semantics
//! against the recordings, on every run, without the clients installed.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use crate::agent::{Agent, uuid};
use crate::support::require_fuse;

/// Scenarios this replay cannot speak for, and why.
const NOT_HERE: &[(&str, &str)] = &[
    (
        "errors",
        "tool-result message ids and ids that are not UUIDs come from the CLI's transcript \
         (the real-clients suite)",
    ),
    (
        "custom_uuid_forms",
        "message ids that are not UUIDs (the real-clients suite)",
    ),
];

fn scenarios() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/scenarios");
    let mut v: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    v
}

/// `{ws}` in the recordings is the workspace's absolute path.
fn subst(v: &Value, ws: &str) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace("{ws}", ws)),
        Value::Array(a) => Value::Array(a.iter().map(|x| subst(x, ws)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.replace("{ws}", ws), subst(x, ws)))
                .collect(),
        ),
        x => x.clone(),
    }
}

/// One scenario's replay.
struct Replay {
    a: Agent,
    ws: String,
    /// Step names → message uuids.
    ids: BTreeMap<String, String>,
    /// Named tree steps: path → inode.
    inodes: BTreeMap<String, BTreeMap<String, u64>>,
    /// What did not match, step by step.
    mismatches: Vec<String>,
    /// The files the agent read or wrote, as it last saw each (its "read state", which the CLI
    /// refreshes before each model response): a Write or Edit of one changed since is refused
    /// as stale (FINDINGS §2, "A Write refused as stale").
    seen: BTreeMap<String, Option<(i64, i64, u64)>>,
}

impl Replay {
    fn rel<'p>(&self, abs: &'p str) -> &'p str {
        abs.strip_prefix("{ws}/")
            .unwrap_or_else(|| panic!("{abs} is not in the workspace"))
    }

    /// A file's state as the CLI's read state compares it: mtime and size.
    fn state(&self, rel: &str) -> Option<(i64, i64, u64)> {
        fs::metadata(self.a.m.p(rel))
            .ok()
            .map(|m| (m.mtime(), m.mtime_nsec(), m.size()))
    }

    /// Before each model response the CLI refreshes what it read.
    fn refresh(&mut self) {
        let paths: Vec<String> = self.seen.keys().cloned().collect();
        for p in paths {
            let st = self.state(&p);
            self.seen.insert(p, st);
        }
    }

    /// Whether the CLI refuses a Write or Edit of `rel` as stale: the agent saw the file, and
    /// it changed since (within this model response).
    fn stale(&self, rel: &str) -> bool {
        self.seen
            .get(rel)
            .is_some_and(|was| *was != self.state(rel))
    }

    /// A tool call of a prompt, as the CLI runs it.
    fn tool(&mut self, call: &Value) {
        let input = &call["input"];
        let path = input["file_path"]
            .as_str()
            .or(input["notebook_path"].as_str())
            .map(|p| self.rel(p).to_string());
        let writes = matches!(
            call["tool"].as_str(),
            Some("Write" | "Edit" | "NotebookEdit")
        );
        if let Some(rel) = &path {
            if writes && self.stale(rel) {
                return;
            }
        }
        self.run_tool(call);
        if let Some(rel) = path {
            let st = self.state(&rel);
            self.seen.insert(rel, st);
        }
    }

    fn run_tool(&mut self, call: &Value) {
        let input = &call["input"];
        match call["tool"].as_str().unwrap() {
            "Read" => {}
            "Bash" => {
                self.a.bash(input["command"].as_str().unwrap());
            }
            "Write" => {
                let rel = self.rel(input["file_path"].as_str().unwrap()).to_string();
                self.a
                    .tool_write(&rel, input["content"].as_str().unwrap().as_bytes());
            }
            "Edit" => {
                let rel = self.rel(input["file_path"].as_str().unwrap()).to_string();
                let p = self.a.m.p(&rel);
                // The CLI refuses to edit through a symlink (and writes nothing).
                if fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                    return;
                }
                let text = fs::read_to_string(&p).unwrap();
                let (old, new) = (
                    input["old_string"].as_str().unwrap(),
                    input["new_string"].as_str().unwrap(),
                );
                assert!(text.contains(old), "Edit of {rel}: {old:?} not in {text:?}");
                let text = if input["replace_all"].as_bool() == Some(true) {
                    text.replace(old, new)
                } else {
                    text.replacen(old, new, 1)
                };
                self.a.tool_write(&rel, text.as_bytes());
            }
            "NotebookEdit" => {
                let rel = self
                    .rel(input["notebook_path"].as_str().unwrap())
                    .to_string();
                let mut nb: Value =
                    serde_json::from_slice(&fs::read(self.a.m.p(&rel)).unwrap()).unwrap();
                for cell in nb["cells"].as_array_mut().unwrap() {
                    if cell["id"] == input["cell_id"] {
                        cell["source"] = input["new_source"].clone();
                    }
                }
                // The CLI writes notebooks as JSON indented by one space.
                let mut out = Vec::new();
                let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
                nb.serialize(&mut serde_json::Serializer::with_formatter(&mut out, fmt))
                    .unwrap();
                self.a.tool_write(&rel, &out);
            }
            other => panic!("no stand-in for the {other} tool"),
        }
    }

    /// The workspace as the harness lists it (`run_session.tree`): per path its type, mode,
    /// links, size, text or symlink target.
    fn tree(&self) -> BTreeMap<String, (Value, u64)> {
        fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<String, (Value, u64)>) {
            let mut names: Vec<_> = fs::read_dir(root.join(rel))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            for n in names {
                let r = rel.join(&n);
                let p = root.join(&r);
                let md = fs::symlink_metadata(&p).unwrap();
                let mut e = json!({
                    "mode": format!("0o{:o}", md.permissions().mode() & 0o7777),
                    "nlink": md.nlink(),
                });
                let ft = md.file_type();
                if ft.is_symlink() {
                    e["type"] = json!("symlink");
                    e["target"] = json!(fs::read_link(&p).unwrap().to_string_lossy());
                } else if ft.is_dir() {
                    e["type"] = json!("dir");
                } else if ft.is_file() {
                    let data = fs::read(&p).unwrap();
                    e["type"] = json!("file");
                    e["size"] = json!(data.len());
                    match std::str::from_utf8(&data) {
                        Ok(t) if data.len() <= 200 => e["text"] = json!(t),
                        _ => e["sha256"] = json!("?"),
                    }
                } else if ft.is_fifo() {
                    e["type"] = json!("fifo");
                } else {
                    e["type"] = json!("other");
                }
                out.insert(r.to_string_lossy().into_owned(), (e, md.ino()));
                if ft.is_dir() {
                    walk(root, &r, out);
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.a.m.dir, Path::new(""), &mut out);
        out
    }

    fn step(&mut self, i: usize, step: &Value) {
        let expect = subst(&step["expect"], &self.ws);
        let mut mismatches = Vec::new();
        let mut mismatch = |what: String, got: &Value| {
            if *got != expect {
                mismatches.push(format!(
                    "step {i} ({what}):\n  expected {expect}\n  got      {got}"
                ));
            }
        };
        if let Some(prompt) = step.get("prompt") {
            let u = self.a.turn();
            if let Some(name) = step["name"].as_str() {
                self.ids.insert(name.to_string(), u);
            }
            for batch in step["responses"].as_array().unwrap() {
                self.refresh();
                for call in batch.as_array().unwrap() {
                    self.tool(call);
                }
            }
            let _ = prompt;
        } else if let Some(cmd) = step.get("shell") {
            let out = self.a.bash(cmd.as_str().unwrap());
            if step.get("record").is_some() {
                mismatch(format!("shell {cmd}"), &json!(out));
            }
        } else if let Some(to) = step.get("rewind") {
            let to = to.as_str().unwrap();
            let id = self.ids.get(to).cloned().unwrap_or_else(|| to.to_string());
            let dry = step["dry_run"].as_bool() == Some(true);
            let got = match self.a.rewind(&id, "tool", dry) {
                // The SDK's fields; rewindfs's additions are left out of the comparison.
                Ok(r) => {
                    let r = serde_json::to_value(&r).unwrap();
                    Value::Object(
                        expect
                            .as_object()
                            .unwrap()
                            .keys()
                            .map(|k| (k.clone(), r[k].clone()))
                            .collect(),
                    )
                }
                Err(e) => json!({ "error": e }),
            };
            mismatch(format!("rewind to {to}, dry run {dry}"), &got);
        } else if step.get("tree").is_some() {
            let tree = self.tree();
            let exp = expect.as_object().unwrap();
            let got: serde_json::Map<String, Value> = tree
                .iter()
                .map(|(p, (e, _))| {
                    let want = exp.get(p).and_then(Value::as_object);
                    let fields = e
                        .as_object()
                        .unwrap()
                        .iter()
                        .filter(|(k, _)| want.is_some_and(|w| w.contains_key(*k)))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    (p.clone(), Value::Object(fields))
                })
                .collect();
            mismatch("tree".into(), &Value::Object(got));
            for (p, name) in step["same_inode"].as_object().into_iter().flatten() {
                let before = self.inodes[name.as_str().unwrap()].get(p).copied();
                let now = tree.get(p).map(|(_, ino)| *ino);
                if before.is_none() || before != now {
                    mismatches.push(format!(
                        "step {i}: {p} does not keep the inode it had in tree {name} ({before:?} → {now:?})"
                    ));
                }
            }
            if let Some(name) = step["name"].as_str() {
                let inodes = tree.iter().map(|(p, (_, ino))| (p.clone(), *ino)).collect();
                self.inodes.insert(name.to_string(), inodes);
            }
        } else if step.get("restart").is_some() {
            // A new CLI process resuming the session: nothing changes for the mount.
        } else {
            panic!("step {i}: no replay for {step}");
        }
        self.mismatches.extend(mismatches);
    }
}

#[test]
fn the_tool_scope_gives_the_sdks_recorded_answers_and_trees_in_every_scenario() {
    require_fuse();
    let mut failed = Vec::new();
    let mut ran = 0;
    for path in scenarios() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if let Some((_, why)) = NOT_HERE.iter().find(|(n, _)| *n == name) {
            eprintln!("scenario {name}: not replayed here: {why}");
            continue;
        }
        let scenario: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        let a = Agent::new(|_| {});
        let mut r = Replay {
            ws: a.m.dir.to_string_lossy().into_owned(),
            a,
            ids: BTreeMap::new(),
            inodes: BTreeMap::new(),
            mismatches: Vec::new(),
            seen: BTreeMap::new(),
        };
        // Each scenario is a session of its own.
        r.a.session = format!("session-{}", uuid());
        for (i, step) in scenario["steps"].as_array().unwrap().iter().enumerate() {
            r.step(i, step);
        }
        ran += 1;
        if !r.mismatches.is_empty() {
            failed.push(format!("{name}:\n{}", r.mismatches.join("\n")));
        }
    }
    assert!(ran >= 30, "only {ran} scenarios replayed");
    assert!(
        failed.is_empty(),
        "{} of {ran} scenarios differ from the SDK's recording:\n\n{}",
        failed.len(),
        failed.join("\n\n")
    );
}
