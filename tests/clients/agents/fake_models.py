#!/usr/bin/env python3
"""A scripted fake model server for running the real Codex CLI and Gemini CLI offline.
Standard library only. One server answers both wires:

* the OpenAI **Responses API** as Codex uses it (``POST /v1/responses``, SSE), pointed at
  by a custom provider ``base_url = "http://127.0.0.1:PORT/v1"``;
* the **Gemini API** as gemini-cli uses it with ``GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT``
  (``POST /v1beta/models/<m>:streamGenerateContent?alt=sse``, ``:generateContent``,
  ``:countTokens``).

Run it::

    python3 fake_models.py --script scenario.json [--port 0] [--port-file F] [--log F]

or from Python::

    from fake_models import FakeModels
    srv = FakeModels(script, log_path="/tmp/models.jsonl").start()   # srv.port, srv.base_url
    ...
    srv.stop()

Script format (JSON; the same script drives either CLI, each step written in the
CLI-neutral form below)::

    {
      "turns": [
        {"match": "TURN-1",                     # substring of the turn's prompt
         "responses": [                         # one entry per model call in that turn
            [{"apply_patch": "*** Begin Patch\\n*** Add File: a.txt\\n+hello\\n*** End Patch\\n"}],
            [{"exec": "echo hi > b.txt"}],
            [{"call": "write_file", "args": {"file_path": "c.txt", "content": "x\\n"}},
             "some text"]
         ],
         "final": "Turn 1 done."}               # optional: text once the responses are used up
      ],
      "default_text": "Done."                   # final text for turns without "final",
    }                                           # and for prompts no turn matches

A step is a list of items (or a single item). Items:

* a string, or ``{"text": "..."}``: assistant text;
* ``{"apply_patch": PATCH}``: Codex's freeform ``apply_patch`` tool (``custom_tool_call``);
* ``{"exec": CMD}``: Codex ``exec_command {"cmd": CMD}`` / Gemini ``run_shell_command
  {"command": CMD}``, so a shell step can be shared by both CLIs;
* ``{"call": NAME, "args": {...}}``: any function call by name (``function_call`` for
  Codex, a ``functionCall`` part for Gemini).
* ``{"tool_search": QUERY}`` (optional ``"limit": N``): Codex's client-side search of its
  deferred tools (it defers MCP tools: the request lists "Deferred tool namespaces" and
  offers a ``{"type": "tool_search", "execution": "client"}`` tool). Sent as
  ``{"type": "tool_search_call", "call_id", "execution": "client", "arguments":
  {"query": QUERY}}``; Codex answers with ``{"type": "tool_search_output", "call_id",
  "execution": "client", "tools": [{"type": "namespace", "name": "mcp__SERVER", "tools":
  [{"type": "function", "name": TOOL, ...}]}]}``, which counts as the step's result.
  Gemini offers MCP tools up front: there the item is dropped, and so is a step left
  empty by that.
* ``{"mcp": SERVER, "tool": TOOL, "args": {...}}``: a call of an MCP server's tool.
  Codex: ``{"type": "function_call", "namespace": "mcp__SERVER", "name": TOOL,
  "arguments": JSON}`` (its output comes back as a ``function_call_output`` whose
  ``output`` is a list of ``input_text`` parts; Codex 0.171 runs the call even without a
  ``tool_search`` first). Gemini: a ``functionCall`` named ``mcp_SERVER_TOOL``.

Which turn: the first turn whose ``match`` occurs in the request's latest prompt (the
last user message that is neither a tool result nor one of the CLI's own context
wrappers). Which step of it: counted from the tool results that follow that prompt in the
request -- step *k* is answered once the tool calls of steps 0..k-1 all have their
results. Nothing is remembered between requests, so retries, resumed sessions and even a
fresh server (one per CLI run) give the same answers. Past the last step the turn's
``final`` text is sent, which ends the CLI's turn.

Requests that are not the agent loop (no ``tools`` offered: Gemini's next-speaker and
other JSON side queries, title or summary requests) get a harmless answer and never
consume the script. Every request is appended as one JSON line to the log file, if any.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import urlsplit

__all__ = ["FakeModels", "normalize_script"]


# ---- script ------------------------------------------------------------------------------

def _norm_item(it: Any) -> dict:
    if isinstance(it, str):
        return {"kind": "text", "text": it}
    if not isinstance(it, dict):
        raise ValueError(f"bad script item: {it!r}")
    if "text" in it:
        return {"kind": "text", "text": str(it["text"])}
    if "apply_patch" in it:
        return {"kind": "patch", "input": str(it["apply_patch"])}
    if "exec" in it:
        return {"kind": "exec", "cmd": str(it["exec"])}
    if "call" in it:
        return {"kind": "call", "name": str(it["call"]), "args": dict(it.get("args") or {})}
    if "tool_search" in it:
        return {"kind": "tool_search", "query": str(it["tool_search"]),
                "limit": it.get("limit")}
    if "mcp" in it:
        return {"kind": "mcp", "server": str(it["mcp"]), "tool": str(it["tool"]),
                "args": dict(it.get("args") or {})}
    raise ValueError(f"unknown script item: {it!r}")


def normalize_script(script: Any) -> dict:
    """Validates a script and brings it to the canonical form
    ``{"turns": [{"match", "responses": [[item, ...], ...], "final"}], "default_text"}``."""
    if script is None:
        script = {}
    if isinstance(script, list):
        script = {"turns": script}
    default = str(script.get("default_text", "Done."))
    turns = []
    for t in script.get("turns", []):
        steps = []
        for r in t.get("responses", []):
            items = r if isinstance(r, list) else [r]
            steps.append([_norm_item(i) for i in items])
        turns.append({"match": t.get("match"), "responses": steps,
                      "final": str(t.get("final", default))})
    return {"turns": turns, "default_text": default}


def _n_calls(step: list[dict]) -> int:
    return sum(1 for i in step if i["kind"] != "text")


def _pick_step(turn: Optional[dict], n_results: int) -> tuple[Optional[list[dict]], int]:
    """The step to answer after ``n_results`` tool results, and its index (None: final).

    A step with several calls gets several results, so steps are consumed by the number of
    calls they made rather than one per result."""
    if turn is None:
        return None, -1
    seen = 0
    for k, step in enumerate(turn["responses"]):
        if seen >= n_results:
            return step, k
        seen += _n_calls(step)
    return None, len(turn["responses"])


def _for_gemini(turn: dict) -> dict:
    """The turn as Gemini plays it: without ``tool_search`` items (gemini-cli offers MCP
    tools up front, so there is no search and no result of one), and without the steps
    left empty by that, so the steps still count by the results Gemini sends back."""
    steps = [[i for i in step if i["kind"] != "tool_search"] for step in turn["responses"]]
    return {**turn, "responses": [s for s in steps if s]}


# ---- Codex (Responses API) ------------------------------------------------------------------

# Codex injects its own context as user messages (AGENTS.md, <environment_context>, ...);
# they are not what the user typed, so they must not be taken for the prompt.
_CODEX_WRAPPERS = re.compile(r"^\s*(<environment_context>|<user_instructions>|# AGENTS\.md|"
                             r"<INSTRUCTIONS>|<permissions|<collaboration_mode|<skills|"
                             r"<user_shell_command>|<turn_aborted>|<subagent|<apps_instructions|"
                             r"<personality)", re.S)
_CODEX_RESULTS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output",
                  "tool_search_output", "mcp_tool_call_output"}


def _codex_text(item: dict) -> str:
    c = item.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def _codex_prompt(items: list) -> tuple[Optional[int], str]:
    for i in range(len(items) - 1, -1, -1):
        it = items[i]
        if (isinstance(it, dict) and it.get("type", "message") == "message"
                and it.get("role") == "user"):
            text = _codex_text(it)
            if text.strip() and not _CODEX_WRAPPERS.match(text):
                return i, text
    return None, ""


# ---- Gemini ---------------------------------------------------------------------------------

def _gemini_prompt(contents: list) -> tuple[Optional[int], str]:
    for i in range(len(contents) - 1, -1, -1):
        c = contents[i]
        if not isinstance(c, dict) or c.get("role", "user") != "user":
            continue
        parts = c.get("parts") or []
        if any(isinstance(p, dict) and "functionResponse" in p for p in parts):
            continue
        # The first prompt of a session shares its message with the CLI's own
        # <session_context> part (date, directory listing...): leave that out.
        text = "\n".join(p.get("text", "") for p in parts if isinstance(p, dict)
                         and not p.get("text", "").lstrip().startswith("<session_context>"))
        if text.strip():
            return i, text
    return None, ""


def _fill_schema(schema: Any) -> Any:
    """A minimal value satisfying a JSON schema, for Gemini's structured side queries."""
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    t = (t[0] if isinstance(t, list) and t else t) or ""
    t = str(t).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if t == "object" or "properties" in schema:
        return {k: _fill_schema(v) for k, v in (schema.get("properties") or {}).items()}
    if t == "array":
        return []
    if t in ("number", "integer"):
        return 0
    if t == "boolean":
        return False
    return ""


def _gemini_mcp_name(server: str, tool: str) -> str:
    """gemini-cli's name for an MCP tool (``generateValidName`` in its mcp-tool.ts):
    ``mcp_<server>_<tool>``, other characters than ``[A-Za-z0-9_.:-]`` made ``_``."""
    return "mcp_" + re.sub(r"[^a-zA-Z0-9_\-.:]", "_", f"{server}_{tool}")


def _side_json(gen_cfg: dict) -> str:
    schema = gen_cfg.get("responseJsonSchema") or gen_cfg.get("responseSchema") or {}
    value = _fill_schema(schema) or {}
    if isinstance(value, dict):
        # The next-speaker check: "user" means the turn is over. Anything else would make
        # the CLI send "Please continue." and run another model call.
        if "next_speaker" in value:
            value["next_speaker"] = "user"
        for k in ("reasoning", "explanation"):
            if k in value:
                value[k] = "fake"
    return json.dumps(value)


# ---- server ---------------------------------------------------------------------------------

class FakeModels:
    """The fake server. ``start()`` returns self; ``port``/``base_url`` are then set."""

    def __init__(self, script: Any = None, log_path: Optional[str] = None,
                 host: str = "127.0.0.1", port: int = 0, side_text: str = "OK"):
        self.script = normalize_script(script)
        self.log_path = log_path
        self.host = host
        self.port = port
        self.side_text = side_text
        self.requests: list[dict] = []  # in memory, the same entries as the log
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # Ids must not repeat across the fresh servers of successive runs of one session
        # (hooks and transcripts key tool calls by them), so each server has its own tag.
        self._tag = os.urandom(3).hex()
        self._server: Optional[ThreadingHTTPServer] = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def set_script(self, script: Any) -> None:
        self.script = normalize_script(script)

    def next_id(self) -> str:
        with self._lock:
            return f"{self._tag}_{next(self._ids):03d}"

    def log(self, entry: dict) -> None:
        entry = {"t": round(time.time(), 3), **entry}
        with self._lock:
            self.requests.append(entry)
            if self.log_path:
                with open(self.log_path, "a") as f:
                    f.write(json.dumps(entry) + "\n")

    def _turn(self, prompt: str) -> tuple[Optional[int], Optional[dict]]:
        for i, t in enumerate(self.script["turns"]):
            if t["match"] and t["match"] in prompt:
                return i, t
        return None, None

    def plan(self, prompt_idx: Optional[int], prompt: str, n_results: int,
             wire: str = "codex") -> tuple[list[dict], dict]:
        """The items to answer with (CLI-neutral), and what to log about the choice."""
        if prompt_idx is None:
            return [_norm_item(self.script["default_text"])], {"no_prompt": True}
        ti, turn = self._turn(prompt)
        if turn is not None and wire == "gemini":
            turn = _for_gemini(turn)
        step, k = _pick_step(turn, n_results)
        info = {"turn": ti, "step": k, "results": n_results, "prompt": prompt[-200:]}
        if step is None:
            final = turn["final"] if turn else self.script["default_text"]
            return [_norm_item(final)], {**info, "final": True}
        return step, info

    # -- Codex --
    def codex_answer(self, body: dict) -> tuple[list[dict], dict]:
        if not body.get("tools"):
            return [{"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": self.side_text}]}], {"side": "no tools"}
        items = body.get("input") or []
        pi, prompt = _codex_prompt(items)
        n = sum(1 for it in items[(pi or 0) + 1:]
                if isinstance(it, dict) and it.get("type") in _CODEX_RESULTS)
        plan, info = self.plan(pi, prompt, n)
        out = []
        for it in plan:
            cid = f"call_fake_{self.next_id()}"
            if it["kind"] == "text":
                out.append({"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": it["text"], "annotations": []}]})
            elif it["kind"] == "patch":
                out.append({"type": "custom_tool_call", "status": "completed", "call_id": cid,
                            "name": "apply_patch", "input": it["input"]})
            elif it["kind"] == "exec":
                out.append({"type": "function_call", "status": "completed", "call_id": cid,
                            "name": "exec_command", "arguments": json.dumps({"cmd": it["cmd"]})})
            elif it["kind"] == "tool_search":
                args = {"query": it["query"]}
                if it.get("limit") is not None:
                    args["limit"] = it["limit"]
                out.append({"type": "tool_search_call", "status": "completed", "call_id": cid,
                            "execution": "client", "arguments": args})
            elif it["kind"] == "mcp":
                out.append({"type": "function_call", "status": "completed", "call_id": cid,
                            "namespace": f"mcp__{it['server']}", "name": it["tool"],
                            "arguments": json.dumps(it["args"])})
            else:
                out.append({"type": "function_call", "status": "completed", "call_id": cid,
                            "name": it["name"], "arguments": json.dumps(it["args"])})
        return out, info

    # -- Gemini --
    def gemini_answer(self, body: dict) -> tuple[list[dict], dict]:
        gen_cfg = body.get("generationConfig") or {}
        if not body.get("tools"):
            if gen_cfg.get("responseMimeType") == "application/json":
                return [{"text": _side_json(gen_cfg)}], {"side": "json"}
            return [{"text": self.side_text}], {"side": "no tools"}
        contents = body.get("contents") or []
        pi, prompt = _gemini_prompt(contents)
        n = sum(1 for c in contents[(pi or 0) + 1:] if isinstance(c, dict)
                for p in (c.get("parts") or []) if isinstance(p, dict) and "functionResponse" in p)
        plan, info = self.plan(pi, prompt, n, wire="gemini")
        parts = []
        for it in plan:
            if it["kind"] == "text":
                parts.append({"text": it["text"]})
            elif it["kind"] == "exec":
                parts.append({"functionCall": {"name": "run_shell_command",
                                               "args": {"command": it["cmd"]}}})
            elif it["kind"] == "call":
                parts.append({"functionCall": {"name": it["name"], "args": it["args"]}})
            elif it["kind"] == "mcp":
                parts.append({"functionCall": {"name": _gemini_mcp_name(it["server"], it["tool"]),
                                               "args": it["args"]}})
            else:
                raise ValueError("apply_patch is a Codex tool; Gemini has none")
        return parts, info

    def start(self) -> "FakeModels":
        self._server = ThreadingHTTPServer((self.host, self.port), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="fake-models", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeModels":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _usage_codex(body: Any, out: Any) -> dict:
    i, o = max(1, len(json.dumps(body)) // 4), max(1, len(json.dumps(out)) // 4)
    return {"input_tokens": i, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": i + o}


def _handler(srv: FakeModels) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # keep the CLI's stderr clean
            pass

        def _body(self) -> Any:
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
            if self.headers.get("content-encoding", "").lower() == "zstd":
                return {"_undecodable": "zstd"}  # the stdlib has no zstd; not seen so far
            if self.headers.get("content-encoding", "").lower() == "gzip":
                import gzip
                raw = gzip.decompress(raw)
            if not raw:
                return None
            try:
                return json.loads(raw)
            except ValueError:
                return raw.decode("utf-8", "replace")

        def _json(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse_start(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            # No chunked encoding in the stdlib: close the connection to end the stream.
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True

        def _sse(self, data: dict, event: Optional[str] = None) -> None:
            head = f"event: {event}\n" if event else ""
            self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            srv.log({"method": "GET", "path": self.path})
            if path.rstrip("/").endswith("/models"):
                # Both an OpenAI-style and a Gemini-style empty list, in one object.
                self._json(200, {"object": "list", "data": [], "models": []})
            else:
                self._json(200, {})

        def do_HEAD(self) -> None:
            srv.log({"method": "HEAD", "path": self.path})
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            body = self._body()
            headers = {k.lower(): v for k, v in self.headers.items()
                       if k.lower() not in ("authorization", "x-goog-api-key")}
            try:
                if path.endswith("/responses") and isinstance(body, dict):
                    self._codex(body, headers)
                elif ":" in path.rsplit("/", 1)[-1] and isinstance(body, dict):
                    self._gemini(path, body, headers)
                else:
                    srv.log({"method": "POST", "path": self.path, "headers": headers, "body": body})
                    self._json(404, {"error": {"code": 404, "message": f"fake models: no {path}"}})
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _codex(self, body: dict, headers: dict) -> None:
            out, info = srv.codex_answer(body)
            srv.log({"method": "POST", "path": self.path, "api": "codex", "model": body.get("model"),
                     "answer": out, **info, "headers": headers, "body": body})
            rid = f"resp_fake_{srv.next_id()}"
            resp = {"id": rid, "object": "response", "created_at": int(time.time()),
                    "status": "in_progress", "model": body.get("model"), "output": []}
            if not body.get("stream", True):
                self._json(200, {**resp, "status": "completed", "output": out,
                                 "usage": _usage_codex(body, out)})
                return
            self._sse_start()
            seq = itertools.count()
            self._sse({"type": "response.created", "sequence_number": next(seq), "response": resp},
                      "response.created")
            for idx, item in enumerate(out):
                item = {"id": f"item_fake_{srv.next_id()}", **item}
                added = dict(item)
                if item["type"] == "message":
                    added["content"] = []
                self._sse({"type": "response.output_item.added", "sequence_number": next(seq),
                           "output_index": idx, "item": added}, "response.output_item.added")
                if item["type"] == "message":
                    text = item["content"][0]["text"]
                    self._sse({"type": "response.output_text.delta", "sequence_number": next(seq),
                               "item_id": item["id"], "output_index": idx, "content_index": 0,
                               "delta": text}, "response.output_text.delta")
                self._sse({"type": "response.output_item.done", "sequence_number": next(seq),
                           "output_index": idx, "item": item}, "response.output_item.done")
            done = {**resp, "status": "completed", "output": out, "usage": _usage_codex(body, out)}
            self._sse({"type": "response.completed", "sequence_number": next(seq), "response": done},
                      "response.completed")

        def _gemini(self, path: str, body: dict, headers: dict) -> None:
            model, _, method = path.rsplit("/", 1)[-1].partition(":")
            if method == "countTokens":
                srv.log({"method": "POST", "path": self.path, "api": "gemini"})
                self._json(200, {"totalTokens": max(1, len(json.dumps(body)) // 4)})
                return
            if method == "embedContent":
                srv.log({"method": "POST", "path": self.path, "api": "gemini"})
                self._json(200, {"embedding": {"values": [0.0] * 8}})
                return
            if method not in ("generateContent", "streamGenerateContent"):
                srv.log({"method": "POST", "path": self.path, "api": "gemini", "body": body})
                self._json(404, {"error": {"code": 404, "message": f"fake models: no {method}"}})
                return
            parts, info = srv.gemini_answer(body)
            srv.log({"method": "POST", "path": self.path, "api": "gemini", "model": model,
                     "answer": parts, **info, "headers": headers, "body": body})
            n_in = max(1, len(json.dumps(body.get("contents"))) // 4)
            n_out = max(1, len(json.dumps(parts)) // 4)
            chunk = {"candidates": [{"content": {"role": "model", "parts": parts},
                                     "finishReason": "STOP", "index": 0}],
                     "usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": n_out,
                                       "totalTokenCount": n_in + n_out},
                     "modelVersion": model, "responseId": f"fake_{srv.next_id()}"}
            if method == "generateContent":
                self._json(200, chunk)
                return
            self._sse_start()
            self._sse(chunk)

    return Handler


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--script", help="scenario script (JSON); default: every answer is text")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the chosen port here (atomically), once listening")
    ap.add_argument("--log", help="append one JSON line per request here")
    a = ap.parse_args(argv)
    script = json.load(open(a.script)) if a.script else None
    srv = FakeModels(script, log_path=a.log, host=a.host, port=a.port).start()
    print(srv.port, flush=True)
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{srv.port}\n")
        os.replace(tmp, a.port_file)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
