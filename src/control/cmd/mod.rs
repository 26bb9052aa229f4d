//! The control requests, one file each (mini-redis `cmd/` shape).
//!
//! Each request is a typed struct that both the server parses and the client sends; its reply
//! is a typed struct both sides share. The wire is defined here and nowhere else: the server
//! never builds a reply from `json!` literals and the client never reads one back by key.
//! [`Request`] is the one place a request's subtype chooses its type and its handler.

mod begin_message;
mod begin_prompt;
mod bind_message;
mod diff;
mod end_turn;
mod export;
mod fork;
mod gc;
mod import;
mod list_checkpoints;
mod log;
mod ls;
mod redo_rewind;
mod register_agent;
mod rewind_code;
mod rewind_files;
mod show;
mod status;
mod tool_use;
mod undo_rewind;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use self::begin_message::{BeginMessage, BeginMessageReply};
pub use self::begin_prompt::{BeginPrompt, BeginPromptReply};
pub use self::bind_message::BindMessage;
pub use self::diff::{Diff, DiffReply, DiffStat};
pub use self::end_turn::EndTurn;
pub use self::export::{Export, ExportReply};
pub use self::fork::{Fork, ForkReply};
pub use self::gc::{Gc, GcReply};
pub use self::import::{Import, ImportReply};
pub use self::list_checkpoints::{
    CheckpointInfo, CheckpointList, ListCheckpoints, NextStep, OriginInfo, RewindAction, RewindInfo,
};
pub use self::log::{Log, LogLine, LogReply};
pub use self::ls::{Ls, LsEntry, LsReply};
pub use self::redo_rewind::{RedoReply, RedoRewind};
pub use self::register_agent::RegisterAgent;
pub use self::rewind_code::RewindCode;
pub use self::rewind_files::{RewindFiles, RewindReply};
pub use self::show::{Show, ShowReply};
pub use self::status::{
    Passthrough, Status, StatusReply, UnprotectedProcess, unprotected_processes,
    unprotected_warning,
};
pub use self::tool_use::{Phase, ToolUse, Unbound};
pub use self::undo_rewind::{UndoReply, UndoRewind};
use super::Daemon;
use super::error::ControlError;

/// A request type: its subtype on the wire and the type of its success payload.
pub trait Command: Serialize + DeserializeOwned {
    /// `request.subtype`.
    const SUBTYPE: &'static str;
    /// The `response` of a `success` frame.
    type Reply: Serialize + DeserializeOwned;
}

/// The success payload of requests that answer nothing but success (`{}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    BeginMessage(BeginMessage),
    BeginPrompt(BeginPrompt),
    BindMessage(BindMessage),
    EndTurn(EndTurn),
    ToolUse(ToolUse),
    RegisterAgent(RegisterAgent),
    RewindFiles(RewindFiles),
    /// The older CLIs' name for `rewind_files` (tool scope, no dry run).
    RewindCode(RewindCode),
    UndoRewind(UndoRewind),
    RedoRewind(RedoRewind),
    ListCheckpoints(ListCheckpoints),
    Diff(Diff),
    Log(Log),
    Status(Status),
    Gc(Gc),
    Show(Show),
    Ls(Ls),
    Fork(Fork),
    Export(Export),
    Import(Import),
}

/// Decodes one command from the request object, naming the field at fault.
fn decode<C: Command>(fields: Map<String, Value>) -> Result<C, String> {
    // `null` means absent, as the SDKs send it for options left unset.
    let fields: Map<String, Value> = fields.into_iter().filter(|(_, v)| !v.is_null()).collect();
    serde_path_to_error::deserialize(Value::Object(fields)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            inner
        } else {
            format!("field \"{path}\": {inner}")
        }
    })
}

impl Request {
    /// The request of subtype `subtype` from the fields of `request` (the `subtype` key is
    /// ignored, as are fields no request knows).
    ///
    /// # Errors
    /// A message naming the unknown subtype or the field at fault.
    pub fn decode(subtype: &str, fields: Map<String, Value>) -> Result<Request, String> {
        Ok(match subtype {
            BeginMessage::SUBTYPE => Request::BeginMessage(decode(fields)?),
            BeginPrompt::SUBTYPE => Request::BeginPrompt(decode(fields)?),
            BindMessage::SUBTYPE => Request::BindMessage(decode(fields)?),
            EndTurn::SUBTYPE => Request::EndTurn(decode(fields)?),
            ToolUse::SUBTYPE => Request::ToolUse(decode(fields)?),
            RegisterAgent::SUBTYPE => Request::RegisterAgent(decode(fields)?),
            RewindFiles::SUBTYPE => Request::RewindFiles(decode(fields)?),
            RewindCode::SUBTYPE => Request::RewindCode(decode(fields)?),
            UndoRewind::SUBTYPE => Request::UndoRewind(decode(fields)?),
            RedoRewind::SUBTYPE => Request::RedoRewind(decode(fields)?),
            ListCheckpoints::SUBTYPE => Request::ListCheckpoints(decode(fields)?),
            Diff::SUBTYPE => Request::Diff(decode(fields)?),
            Log::SUBTYPE => Request::Log(decode(fields)?),
            Status::SUBTYPE => Request::Status(decode(fields)?),
            Gc::SUBTYPE => Request::Gc(decode(fields)?),
            Show::SUBTYPE => Request::Show(decode(fields)?),
            Ls::SUBTYPE => Request::Ls(decode(fields)?),
            Fork::SUBTYPE => Request::Fork(decode(fields)?),
            Export::SUBTYPE => Request::Export(decode(fields)?),
            Import::SUBTYPE => Request::Import(decode(fields)?),
            other => return Err(format!("unknown request subtype {other:?}")),
        })
    }

    /// Whether a failure of this request is reported as `success` with `canRewind: false`
    /// (the SDK's dry-run rule) rather than as an `error` response.
    pub fn is_dry_run(&self) -> bool {
        matches!(self, Request::RewindFiles(r) if r.dry_run)
    }

    /// Runs the request (blocking: it touches SQLite and the disk) and returns its reply.
    ///
    /// # Errors
    /// What an `error` response says.
    pub fn apply(self, d: &Daemon) -> Result<Value, ControlError> {
        match self {
            Request::BeginMessage(c) => reply(c.apply(d)),
            Request::BeginPrompt(c) => reply(c.apply(d)),
            Request::BindMessage(c) => reply(c.apply(d)),
            Request::EndTurn(c) => reply(c.apply(d)),
            Request::ToolUse(c) => reply(c.apply(d)),
            Request::RegisterAgent(c) => reply(c.apply(d)),
            Request::RewindFiles(c) => reply(c.run(d)),
            Request::RewindCode(c) => reply(c.apply(d)),
            Request::UndoRewind(c) => reply(c.apply(d)),
            Request::RedoRewind(c) => reply(c.apply(d)),
            Request::ListCheckpoints(c) => reply(c.apply(d)),
            Request::Diff(c) => reply(c.apply(d)),
            Request::Log(c) => reply(c.apply(d)),
            Request::Status(c) => reply(c.apply(d)),
            Request::Gc(c) => reply(c.apply(d)),
            Request::Show(c) => reply(c.apply(d)),
            Request::Ls(c) => reply(c.apply(d)),
            Request::Fork(c) => reply(c.apply(d)),
            Request::Export(c) => reply(c.apply(d)),
            Request::Import(c) => reply(c.apply(d)),
        }
    }
}

fn reply<R: Serialize>(r: Result<R, ControlError>) -> Result<Value, ControlError> {
    // Serializing plain structs of strings and numbers cannot fail.
    r.map(|r| serde_json::to_value(r).unwrap_or_default())
}

#[cfg(test)]
mod schema_check;
