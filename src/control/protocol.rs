//! The wire format: one JSON object per line, in the Claude Agent SDK's control envelope
//! (see `schema/protocol.md` and `schema/protocol.schema.json`). A line is parsed in one
//! place into a typed [`super::cmd::Request`]; a malformed line becomes an error
//! naming what is wrong. The frames are typed too, and shared with the client.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::cmd::Request;

/// Longest request line accepted.
pub const MAX_LINE: usize = 1 << 20;

/// `{"type":"control_request","request_id":…,"request":{"subtype":…,…}}`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestFrame {
    #[serde(rename = "type")]
    pub kind: String,
    pub request_id: String,
    pub request: Map<String, Value>,
}

/// `{"type":"control_response","response":{…}}`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResponseFrame {
    #[serde(rename = "type")]
    pub kind: String,
    pub response: Response,
}

/// A response: success with the request's reply, or error with a message.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "subtype", rename_all = "lowercase")]
pub enum Response {
    Success {
        request_id: String,
        response: Value,
    },
    Error {
        request_id: String,
        error: String,
        /// The errno of the system call that failed, when that is what stopped the request
        /// (`28`: the disk is full, `13`: permission denied …); absent otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        errno: Option<i32>,
    },
}

/// The `type` of request frames.
pub const CONTROL_REQUEST: &str = "control_request";
/// The `type` of response frames.
pub const CONTROL_RESPONSE: &str = "control_response";

/// Parses one line. On failure returns the request id (if it could be read) and the error.
///
/// # Errors
/// `(request_id, message)` for anything malformed.
pub fn parse(line: &[u8]) -> Result<(String, Request), (String, String)> {
    let v: Value =
        serde_json::from_slice(line).map_err(|e| (String::new(), format!("invalid JSON: {e}")))?;
    let Value::Object(mut env) = v else {
        return Err((String::new(), "a request must be a JSON object".into()));
    };
    let id = match env.get("request_id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err((String::new(), "missing field \"request_id\"".into())),
    };
    let fail = |e: String| (id.clone(), e);
    match env.get("type") {
        Some(Value::String(t)) if t == CONTROL_REQUEST => {}
        Some(_) => return Err(fail("field \"type\" must be \"control_request\"".into())),
        None => return Err(fail("missing field \"type\"".into())),
    }
    let Some(Value::Object(r)) = env.remove("request") else {
        return Err(fail("missing object \"request\"".into()));
    };
    let Some(Value::String(subtype)) = r.get("subtype").cloned() else {
        return Err(fail("missing field \"request.subtype\"".into()));
    };
    let req = Request::decode(&subtype, r).map_err(fail)?;
    Ok((id, req))
}

/// A `success` frame carrying `response`.
pub fn success(request_id: &str, response: Value) -> ResponseFrame {
    ResponseFrame {
        kind: CONTROL_RESPONSE.into(),
        response: Response::Success {
            request_id: request_id.into(),
            response,
        },
    }
}

/// An `error` frame.
pub fn error(request_id: &str, message: &str) -> ResponseFrame {
    error_with(request_id, message, None)
}

/// An `error` frame that names the errno of the system call that failed.
pub fn error_with(request_id: &str, message: &str, errno: Option<i32>) -> ResponseFrame {
    ResponseFrame {
        kind: CONTROL_RESPONSE.into(),
        response: Response::Error {
            request_id: request_id.into(),
            error: message.into(),
            errno,
        },
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::control::cmd::RewindFiles;
    use crate::rewind::Scope;

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
            sub in prop::sample::select(vec!["begin_message", "tool_use", "register_agent", "rewind_files", "undo_rewind", "list_checkpoints", "diff", "log", "status", "gc", "show", "ls", "fork", "export", "import"]),
            fields in prop::collection::vec((prop::sample::select(vec!["session_id", "user_message_id", "phase", "tool_name", "tool_use_id", "file_path", "pid", "dry_run", "scope", "force", "paths", "path", "limit", "max_store_bytes", "max_age_seconds", "to_message_id", "content", "offset", "length", "dir", "fork_dir", "since"]), any::<(bool, i64, String)>()), 0..6),
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
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"begin_message","session_id":"s","user_message_id":""}}"#,
                "not a message id",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"begin_message","user_message_id":"43a0616f-86de-4176-b8c4-b711ba2d9691"}}"#,
                "session_id",
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
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"register_agent","pid":0}}"#,
                "pid",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"log","limit":0}}"#,
                "limit",
            ),
            (
                r#"{"type":"control_request","request_id":"a","request":{"subtype":"rewind_files","user_message_id":"43a0616f-86de-4176-b8c4-b711ba2d9691","paths":[1]}}"#,
                "paths",
            ),
        ];
        for (line, want) in cases {
            let (_, e) = parse(line.as_bytes()).expect_err(line);
            assert!(e.contains(want), "{line}: {e:?} lacks {want:?}");
        }
    }

    #[test]
    fn a_rewind_request_parses_with_its_defaults() {
        let line = r#"{"type":"control_request","request_id":"r1","request":{"subtype":"rewind_files","user_message_id":"43A0616F-86DE-4176-B8C4-B711BA2D9691","dry_run":true,"force":null}}"#;
        let (id, r) = parse(line.as_bytes()).unwrap();
        assert_eq!(id, "r1");
        assert_eq!(
            r,
            Request::RewindFiles(RewindFiles {
                user_message_id: "43a0616f-86de-4176-b8c4-b711ba2d9691".into(),
                dry_run: true,
                scope: Scope::Tool,
                force: false,
                paths: vec![],
                session_id: None,
                trust_imported: false,
            })
        );
    }

    #[test]
    fn frames_have_the_sdks_shape() {
        let s = serde_json::to_value(success("r1", json!({"a": 1}))).unwrap();
        assert_eq!(
            s,
            json!({"type": "control_response", "response": {"subtype": "success", "request_id": "r1", "response": {"a": 1}}})
        );
        let e = serde_json::to_value(error("r2", "No file checkpoint found for this message."))
            .unwrap();
        assert_eq!(
            e,
            json!({"type": "control_response", "response": {"subtype": "error", "request_id": "r2", "error": "No file checkpoint found for this message."}})
        );
    }
}
