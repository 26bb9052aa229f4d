//! The wire format: one JSON object per line, in the Claude Agent SDK's control envelope
//! (see `schema/protocol.md` and `schema/protocol.schema.json`). Requests are parsed in one
//! place, into [`Request`]; a malformed line becomes an error naming what is wrong.

use serde_json::{Map, Value, json};

use crate::rewind::Scope;

/// Longest request line accepted.
pub const MAX_LINE: usize = 1 << 20;

/// `tool_use` phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pre,
    Post,
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    BeginMessage {
        session_id: String,
        user_message_id: String,
    },
    ToolUse {
        phase: Phase,
        tool_name: String,
        tool_use_id: String,
        file_path: Option<String>,
    },
    RegisterAgent {
        pid: u32,
    },
    RewindFiles {
        user_message_id: String,
        dry_run: bool,
        scope: Scope,
        force: bool,
        paths: Vec<String>,
        session_id: Option<String>,
    },
    UndoRewind,
    ListCheckpoints {
        session_id: Option<String>,
    },
    Diff {
        user_message_id: String,
        path: Option<String>,
        scope: Scope,
    },
    Log {
        path: Option<String>,
        limit: i64,
    },
    Status,
    /// Retention pass; `None` fields take the daemon's configured limits.
    Gc {
        max_store_bytes: Option<u64>,
        max_age_seconds: Option<u64>,
    },
}

impl Request {
    /// Whether a failure of this request is reported as `success` with `canRewind: false`
    /// (the SDK's dry-run rule) rather than as an `error` response.
    pub fn is_dry_run(&self) -> bool {
        matches!(self, Request::RewindFiles { dry_run: true, .. })
    }
}

fn field<'a>(m: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    m.get(name).filter(|v| !v.is_null())
}

fn string(m: &Map<String, Value>, name: &str) -> Result<String, String> {
    match field(m, name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("field {name:?} must be a string")),
        None => Err(format!("missing field {name:?}")),
    }
}

fn opt_string(m: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match field(m, name) {
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("field {name:?} must be a string")),
        None => Ok(None),
    }
}

fn opt_bool(m: &Map<String, Value>, name: &str) -> Result<bool, String> {
    match field(m, name) {
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("field {name:?} must be true or false")),
        None => Ok(false),
    }
}

fn uuid_field(m: &Map<String, Value>, name: &str) -> Result<String, String> {
    let s = string(m, name)?;
    uuid::Uuid::parse_str(&s)
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| format!("field {name:?} is not a UUID: {s:?}"))
}

fn scope(m: &Map<String, Value>, default: Scope) -> Result<Scope, String> {
    match opt_string(m, "scope")? {
        None => Ok(default),
        Some(s) => Scope::parse(&s).ok_or_else(|| {
            format!("field \"scope\" must be \"tool\", \"agent\" or \"all\", not {s:?}")
        }),
    }
}

/// Parses one line. On failure returns the request id (if it could be read) and the error.
///
/// # Errors
/// `(request_id, message)` for anything malformed.
pub fn parse(line: &[u8]) -> Result<(String, Request), (String, String)> {
    let v: Value =
        serde_json::from_slice(line).map_err(|e| (String::new(), format!("invalid JSON: {e}")))?;
    let Value::Object(env) = v else {
        return Err((String::new(), "a request must be a JSON object".into()));
    };
    let id = match env.get("request_id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err((String::new(), "missing field \"request_id\"".into())),
    };
    let fail = |e: String| (id.clone(), e);
    match env.get("type") {
        Some(Value::String(t)) if t == "control_request" => {}
        Some(_) => return Err(fail("field \"type\" must be \"control_request\"".into())),
        None => return Err(fail("missing field \"type\"".into())),
    }
    let Some(Value::Object(r)) = env.get("request") else {
        return Err(fail("missing object \"request\"".into()));
    };
    let subtype =
        string(r, "subtype").map_err(|_| fail("missing field \"request.subtype\"".into()))?;
    let req = match subtype.as_str() {
        "begin_message" => Request::BeginMessage {
            session_id: string(r, "session_id").map_err(fail)?,
            user_message_id: uuid_field(r, "user_message_id").map_err(fail)?,
        },
        "tool_use" => {
            let phase = match string(r, "phase").map_err(fail)?.as_str() {
                "pre" => Phase::Pre,
                "post" => Phase::Post,
                p => {
                    return Err(fail(format!(
                        "field \"phase\" must be \"pre\" or \"post\", not {p:?}"
                    )));
                }
            };
            Request::ToolUse {
                phase,
                tool_name: string(r, "tool_name").map_err(fail)?,
                tool_use_id: string(r, "tool_use_id").map_err(fail)?,
                file_path: opt_string(r, "file_path").map_err(fail)?,
            }
        }
        "register_agent" => {
            let pid = field(r, "pid")
                .and_then(Value::as_u64)
                .filter(|p| *p > 0 && *p <= u32::MAX as u64);
            Request::RegisterAgent {
                pid: pid.ok_or_else(|| fail("field \"pid\" must be a positive integer".into()))?
                    as u32,
            }
        }
        "rewind_files" => {
            let paths = match field(r, "paths") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|p| {
                        p.as_str().map(str::to_string).ok_or_else(|| {
                            fail("field \"paths\" must be an array of strings".into())
                        })
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(fail("field \"paths\" must be an array of strings".into())),
            };
            Request::RewindFiles {
                user_message_id: uuid_field(r, "user_message_id").map_err(fail)?,
                dry_run: opt_bool(r, "dry_run").map_err(fail)?,
                scope: scope(r, Scope::Tool).map_err(fail)?,
                force: opt_bool(r, "force").map_err(fail)?,
                paths,
                session_id: opt_string(r, "session_id").map_err(fail)?,
            }
        }
        "undo_rewind" => Request::UndoRewind,
        "list_checkpoints" => Request::ListCheckpoints {
            session_id: opt_string(r, "session_id").map_err(fail)?,
        },
        "diff" => Request::Diff {
            user_message_id: uuid_field(r, "user_message_id").map_err(fail)?,
            path: opt_string(r, "path").map_err(fail)?,
            scope: scope(r, Scope::All).map_err(fail)?,
        },
        "log" => {
            let limit = match field(r, "limit") {
                None => 1000,
                Some(v) => v
                    .as_i64()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| fail("field \"limit\" must be a positive integer".into()))?,
            };
            Request::Log {
                path: opt_string(r, "path").map_err(fail)?,
                limit,
            }
        }
        "status" => Request::Status,
        "gc" => {
            let num = |name: &str| match field(r, name) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| fail(format!("field {name:?} must be a non-negative integer"))),
            };
            Request::Gc {
                max_store_bytes: num("max_store_bytes")?,
                max_age_seconds: num("max_age_seconds")?,
            }
        }
        other => return Err(fail(format!("unknown request subtype {other:?}"))),
    };
    Ok((id, req))
}

/// `{"type":"control_response","response":{"subtype":"success",...}}`
pub fn success(request_id: &str, response: Value) -> Value {
    json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}})
}

/// `{"type":"control_response","response":{"subtype":"error",...}}`
pub fn error(request_id: &str, message: &str) -> Value {
    json!({"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any bytes: a parse or an error, never a panic.
        #[test]
        fn the_parser_takes_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
            let _ = parse(&bytes);
        }

        /// Envelopes of every subtype with fields of random JSON types.
        #[test]
        fn the_parser_takes_any_field_types(
            sub in prop::sample::select(vec!["begin_message", "tool_use", "register_agent", "rewind_files", "undo_rewind", "list_checkpoints", "diff", "log", "status", "gc"]),
            fields in prop::collection::vec((prop::sample::select(vec!["session_id", "user_message_id", "phase", "tool_name", "tool_use_id", "file_path", "pid", "dry_run", "scope", "force", "paths", "path", "limit", "max_store_bytes", "max_age_seconds"]), any::<(bool, i64, String)>()), 0..6),
        ) {
            let mut req = Map::new();
            req.insert("subtype".into(), json!(sub));
            for (i, (k, (b, n, s))) in fields.into_iter().enumerate() {
                let v = match i % 4 { 0 => json!(b), 1 => json!(n), 2 => json!(s), _ => json!([s]) };
                req.insert(k.to_string(), v);
            }
            let line = serde_json::to_vec(&json!({"type": "control_request", "request_id": "f", "request": req})).unwrap();
            match parse(&line) {
                Ok((id, _)) => prop_assert_eq!(id, "f"),
                Err((id, e)) => { prop_assert_eq!(id, "f"); prop_assert!(!e.is_empty()); }
            }
        }
    }

    #[test]
    fn malformed_lines_get_errors_that_name_the_problem() {
        let cases: &[(&str, &str)] = &[
            ("not json", "invalid JSON"),
            ("[1]", "JSON object"),
            (
                r#"{"type":"control_request","request":{"subtype":"status"}}"#,
                "request_id",
            ),
            (
                r#"{"type":"x","request_id":"a","request":{"subtype":"status"}}"#,
                "control_request",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{}}"#,
                "subtype",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"nope"}}"#,
                "unknown request subtype",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"begin_message","session_id":"s","user_message_id":"zz"}}"#,
                "not a UUID",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"rewind_files","user_message_id":"43a0616f-86de-4176-b8c4-b711ba2d9691","scope":"most"}}"#,
                "scope",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"rewind_files","user_message_id":"43a0616f-86de-4176-b8c4-b711ba2d9691","dry_run":"yes"}}"#,
                "dry_run",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"register_agent","pid":-1}}"#,
                "pid",
            ),
        ];
        for (line, want) in cases {
            let (_, e) = parse(line.as_bytes()).expect_err(line);
            assert!(e.contains(want), "{line}: {e:?} lacks {want:?}");
        }
    }

    #[test]
    fn a_rewind_request_parses_with_its_defaults() {
        let line = r#"{"type":"control_request","request_id":"r1","request":{"subtype":"rewind_files","user_message_id":"43A0616F-86DE-4176-B8C4-B711BA2D9691","dry_run":true}}"#;
        let (id, r) = parse(line.as_bytes()).unwrap();
        assert_eq!(id, "r1");
        assert_eq!(
            r,
            Request::RewindFiles {
                user_message_id: "43a0616f-86de-4176-b8c4-b711ba2d9691".into(),
                dry_run: true,
                scope: Scope::Tool,
                force: false,
                paths: vec![],
                session_id: None
            }
        );
    }
}
