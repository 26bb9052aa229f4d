//! The JSON schema (`schema/protocol.schema.json`) held against the Rust types, both ways: every
//! property the schema gives a request or reply is a field of its Rust type, and every field of
//! the Rust type is a property the schema gives it. A field renamed or added on one side only
//! fails here, not in a client.
//!
//! The Rust side is read from serde itself: a deserializer that answers nothing but records the
//! field names a struct's `Deserialize` asks for (after `rename_all`, without skipped fields).

use std::collections::BTreeSet;

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde_json::Value;

use super::*;

/// Records the field names a struct's `Deserialize` asks for.
struct Probe<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The wire names of `T`'s fields.
fn fields<T: DeserializeOwned>() -> BTreeSet<String> {
    let mut f = None;
    let _ = T::deserialize(Probe(&mut f));
    f.unwrap_or_else(|| panic!("{} is not a struct", std::any::type_name::<T>()))
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn schema() -> Value {
    serde_json::from_str(include_str!("../../../schema/protocol.schema.json")).unwrap()
}

/// The properties the schema's definition `def` gives an object (following `$ref`, `allOf`,
/// `oneOf`/`anyOf` branches: their union).
fn props(s: &Value, def: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(r) = def["$ref"].as_str() {
        let name = r.trim_start_matches("#/$defs/");
        out.extend(props(s, &s["$defs"][name]));
    }
    if let Some(p) = def["properties"].as_object() {
        out.extend(p.keys().cloned());
    }
    for key in ["allOf", "oneOf", "anyOf"] {
        for branch in def[key].as_array().into_iter().flatten() {
            out.extend(props(s, branch));
        }
    }
    out
}

fn def_props(s: &Value, name: &str) -> BTreeSet<String> {
    assert!(
        s["$defs"][name].is_object(),
        "the schema has no definition {name}"
    );
    props(s, &s["$defs"][name])
}

/// The definition a property of `def` points at (its items' for an array).
fn nested<'a>(s: &'a Value, def: &'a Value, prop: &str) -> &'a Value {
    let mut d = &def["properties"][prop];
    if let Some(r) = d["$ref"].as_str() {
        d = &s["$defs"][r.trim_start_matches("#/$defs/")];
    }
    if d["items"].is_object() {
        d = &d["items"];
    }
    if let Some(r) = d["$ref"].as_str() {
        d = &s["$defs"][r.trim_start_matches("#/$defs/")];
    }
    d
}

fn same(what: &str, schema: BTreeSet<String>, rust: BTreeSet<String>) -> Vec<String> {
    let mut bad = Vec::new();
    for p in schema.difference(&rust) {
        bad.push(format!(
            "{what}: the schema has {p:?}, the Rust type does not"
        ));
    }
    for p in rust.difference(&schema) {
        bad.push(format!(
            "{what}: the Rust type has {p:?}, the schema does not"
        ));
    }
    bad
}

/// A request's fields against `request_<subtype>` (less `subtype`).
fn request<C: Command>(s: &Value) -> Vec<String> {
    let mut schema = def_props(s, &format!("request_{}", C::SUBTYPE));
    schema.remove("subtype");
    same(&format!("request {}", C::SUBTYPE), schema, fields::<C>())
}

/// A reply's fields against the definitions of its success payloads.
fn reply<R: DeserializeOwned>(s: &Value, what: &str, defs: &[&str]) -> Vec<String> {
    let schema = defs.iter().flat_map(|d| def_props(s, d)).collect();
    same(what, schema, fields::<R>())
}

#[test]
fn the_schema_and_the_rust_types_name_the_same_fields() {
    let s = schema();
    let mut bad = Vec::new();
    bad.extend(request::<BeginMessage>(&s));
    bad.extend(request::<BeginPrompt>(&s));
    bad.extend(request::<BindMessage>(&s));
    bad.extend(request::<EndTurn>(&s));
    bad.extend(request::<ToolUse>(&s));
    bad.extend(request::<RegisterAgent>(&s));
    bad.extend(request::<RewindFiles>(&s));
    bad.extend(request::<RewindCode>(&s));
    bad.extend(request::<UndoRewind>(&s));
    bad.extend(request::<RedoRewind>(&s));
    bad.extend(request::<ListCheckpoints>(&s));
    bad.extend(request::<Diff>(&s));
    bad.extend(request::<Log>(&s));
    bad.extend(request::<Status>(&s));
    bad.extend(request::<Gc>(&s));
    bad.extend(request::<Show>(&s));
    bad.extend(request::<Ls>(&s));
    bad.extend(request::<Fork>(&s));
    bad.extend(request::<Export>(&s));
    bad.extend(request::<Import>(&s));
    bad.extend(reply::<BeginMessageReply>(
        &s,
        "begin_message",
        &["response_begin_message"],
    ));
    bad.extend(reply::<BeginPromptReply>(
        &s,
        "begin_prompt",
        &["response_begin_prompt"],
    ));
    bad.extend(reply::<Unbound>(&s, "tool_use", &["response_unbound"]));
    // One reply type for the three: each subtype's schema names part of it.
    bad.extend(reply::<RewindReply>(
        &s,
        "rewind_files / undo_rewind / redo_rewind",
        &[
            "response_rewind_files_dry",
            "response_rewind_files",
            "response_undo_rewind",
            "response_redo_rewind",
        ],
    ));
    bad.extend(reply::<CheckpointList>(
        &s,
        "list_checkpoints",
        &["response_list_checkpoints"],
    ));
    bad.extend(reply::<DiffReply>(&s, "diff", &["response_diff"]));
    bad.extend(reply::<LogReply>(&s, "log", &["response_log"]));
    bad.extend(reply::<StatusReply>(&s, "status", &["response_status"]));
    bad.extend(reply::<GcReply>(&s, "gc", &["response_gc"]));
    bad.extend(reply::<ShowReply>(&s, "show", &["response_show"]));
    bad.extend(reply::<LsReply>(&s, "ls", &["response_ls"]));
    bad.extend(reply::<ForkReply>(&s, "fork", &["response_fork"]));
    bad.extend(reply::<ExportReply>(&s, "export", &["response_export"]));
    bad.extend(reply::<ImportReply>(&s, "import", &["response_import"]));
    // Objects inside replies.
    let d = |name: &str| s["$defs"][name].clone();
    let inner = |def: &str, prop: &str| props(&s, nested(&s, &d(def), prop));
    bad.extend(same(
        "list_checkpoints.checkpoints[]",
        inner("response_list_checkpoints", "checkpoints"),
        fields::<CheckpointInfo>(),
    ));
    bad.extend(same(
        "log.entries[]",
        inner("response_log", "entries"),
        fields::<LogLine>(),
    ));
    bad.extend(same(
        "ls.entries[]",
        inner("response_ls", "entries"),
        fields::<LsEntry>(),
    ));
    bad.extend(same(
        "diff.stats[]",
        inner("response_diff", "stats"),
        fields::<DiffStat>(),
    ));
    bad.extend(same(
        "withheld[]",
        props(&s, &d("withheld")["items"]),
        fields::<crate::rewind::Withheld>(),
    ));
    bad.extend(same(
        "attributeChanges[]",
        props(&s, &d("attribute_changes")["items"]),
        fields::<crate::rewind::AttrChange>(),
    ));
    assert!(
        bad.is_empty(),
        "the schema and the Rust types differ:\n{}",
        bad.join("\n")
    );
}
