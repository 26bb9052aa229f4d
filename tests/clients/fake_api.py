#!/usr/bin/env python3
"""A scripted fake of the Anthropic Messages API, for running the real Claude Code CLI
and the Claude Agent SDKs offline. Standard library only.

Run it::

    python3 fake_api.py --script scenario.json [--port 0] [--port-file F] [--log F]

or use it from Python::

    from fake_api import FakeAPI
    api = FakeAPI(script, log_path="/tmp/api.jsonl").start()   # api.port, api.base_url
    ...
    api.stop()

Point the CLI at it with ``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`` and any
``ANTHROPIC_API_KEY`` (see FINDINGS.md for the full environment).

Script format (JSON)::

    {
      "turns": [
        {"match": "TURN-A",                     # optional: substring of the prompt text
         "responses": [                         # one entry per model call in that turn
            [{"type": "text", "text": "Writing."},
             {"type": "tool_use", "name": "Write",
              "input": {"file_path": "/abs/a.txt", "content": "hi\\n"}}],
            [{"type": "tool_use", "name": "Bash", "input": {"command": "ls"}},
             {"type": "tool_use", "name": "Bash", "input": {"command": "pwd"}}]
         ]},
        ...
      ],
      "default_text": "Done."                   # answer once a turn's script is exhausted
    }

Shorthands: the top level may be the list of turns; a turn may be just its list of
responses; a block may be a bare string (text) or ``{"tool": NAME, "input": {...}}``.
A tool_use block may carry its own ``"id"``; otherwise ``toolu_fake_<n>`` is generated.

Which turn a request belongs to: the *prompt* is the last user message of the request
that holds no ``tool_result`` block and some text besides ``<system-reminder>`` blocks
(the CLI puts reminders as extra text blocks into the prompt's message). If a turn's ``match`` occurs in the prompt's text,
that turn is used; otherwise prompts are given the unmatched turns in order, the first
time each prompt is seen (a prompt is identified by its text and position). Which
response of the turn: the number of assistant messages after the prompt (so retries and
resumed sessions get the same answer). Past the end: a plain ``end_turn`` text.

Side requests (title generation, summaries, quota checks, prompt suggestions…) are
answered with a harmless text and never consume the script. A request is a side request
when it carries no ``tools`` (the main agent loop always sends its tool list), or when
its system prompt does not look like the agent's. Every request and the answer's
summary are appended as one JSON line to the log file.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import urlsplit

__all__ = ["FakeAPI", "normalize_script"]


def _norm_block(b: Any) -> dict:
    if isinstance(b, str):
        return {"type": "text", "text": b}
    if not isinstance(b, dict):
        raise ValueError(f"bad block: {b!r}")
    if "tool" in b and "type" not in b:
        out = {"type": "tool_use", "name": b["tool"], "input": b.get("input", {})}
        if "id" in b:
            out["id"] = b["id"]
        return out
    if b.get("type") == "tool_use":
        if "name" not in b:
            raise ValueError(f"tool_use block without name: {b!r}")
        b = dict(b)
        b.setdefault("input", {})
        return b
    if b.get("type") == "text":
        return {"type": "text", "text": str(b.get("text", ""))}
    raise ValueError(f"unknown block type: {b!r}")


def normalize_script(script: Any) -> dict:
    """Validates a script and brings it to the canonical form
    ``{"turns": [{"match": str|None, "responses": [[block, ...], ...]}], "default_text": str}``."""
    if isinstance(script, list):
        script = {"turns": script}
    turns = []
    for t in script.get("turns", []):
        if isinstance(t, list):
            t = {"responses": t}
        responses = []
        for r in t.get("responses", []):
            if isinstance(r, (str, dict)):
                r = [r]
            responses.append([_norm_block(b) for b in r])
        turns.append({"match": t.get("match"), "responses": responses})
    return {"turns": turns, "default_text": script.get("default_text", "Done.")}


def _prompt_text(content: Any) -> str:
    """The text a person typed: text blocks that are not ``<system-reminder>`` wrappers."""
    if isinstance(content, str):
        return "" if content.lstrip().startswith("<system-reminder>") else content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") for b in content
            if isinstance(b, dict) and b.get("type") == "text"
            and not b.get("text", "").lstrip().startswith("<system-reminder>")
        )
    return ""


def _is_prompt(m: dict) -> bool:
    return (m.get("role") == "user" and not _has_tool_result(m.get("content"))
            and _prompt_text(m.get("content")).strip() != "")


def _has_tool_result(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def _estimate_tokens(body: Any) -> int:
    return max(1, len(json.dumps(body)) // 4)


class _Script:
    def __init__(self, script: dict):
        self.script = normalize_script(script)
        self.lock = threading.Lock()
        self.assigned: dict[tuple, int] = {}  # prompt key -> turn index
        self.used: set[int] = set()
        self.ids = itertools.count(1)

    def next_id(self) -> int:
        with self.lock:
            return next(self.ids)

    def turn_for(self, key: tuple, text: str) -> Optional[int]:
        with self.lock:
            if key in self.assigned:
                return self.assigned[key]
            turns = self.script["turns"]
            idx = None
            for i, t in enumerate(turns):
                if t["match"] and t["match"] in text:
                    idx = i
                    break
            if idx is None:
                for i, t in enumerate(turns):
                    if i not in self.used and not t["match"]:
                        idx = i
                        break
            if idx is not None:
                self.used.add(idx)
            self.assigned[key] = idx
            return idx

    def reset(self, script: Optional[dict] = None) -> None:
        with self.lock:
            if script is not None:
                self.script = normalize_script(script)
            self.assigned.clear()
            self.used.clear()


def is_side_request(body: dict) -> Optional[str]:
    """Why a request is not the main agent loop (None if it is)."""
    if not body.get("tools"):
        return "no tools"
    return None


class FakeAPI:
    """The fake server. ``start()`` returns self; ``port``/``base_url`` are then set."""

    def __init__(self, script: Any = None, log_path: Optional[str] = None,
                 host: str = "127.0.0.1", port: int = 0, side_text: str = "OK"):
        self.script = _Script(script if script is not None else {"turns": []})
        self.log_path = log_path
        self.host = host
        self.port = port
        self.side_text = side_text
        self._log_lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self.requests: list[dict] = []  # in memory, summaries of every request

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ---- logging -------------------------------------------------------------------
    def log(self, entry: dict) -> None:
        entry = {"t": round(time.time(), 3), **entry}
        with self._log_lock:
            self.requests.append(entry)
            if self.log_path:
                with open(self.log_path, "a") as f:
                    f.write(json.dumps(entry) + "\n")

    # ---- planning an answer ----------------------------------------------------------
    def plan(self, body: dict) -> tuple[list[dict], dict]:
        """Returns (content blocks, info for the log)."""
        side = is_side_request(body)
        if side:
            return [{"type": "text", "text": self.side_text}], {"side": side}
        msgs = body.get("messages") or []
        prompt_i = None
        for i in range(len(msgs) - 1, -1, -1):
            if _is_prompt(msgs[i]):
                prompt_i = i
                break
        if prompt_i is None:
            return [{"type": "text", "text": self.script.script["default_text"]}], {"no_prompt": True}
        text = _prompt_text(msgs[prompt_i].get("content"))
        n_prompts_before = sum(1 for m in msgs[:prompt_i] if _is_prompt(m))
        turn = self.script.turn_for((n_prompts_before, text), text)
        step = sum(1 for m in msgs[prompt_i + 1:] if m.get("role") == "assistant")
        info = {"turn": turn, "step": step, "prompt": text[-200:]}
        responses = self.script.script["turns"][turn]["responses"] if turn is not None else []
        if step < len(responses):
            blocks = []
            for b in responses[step]:
                b = dict(b)
                if b["type"] == "tool_use" and "id" not in b:
                    b["id"] = f"toolu_fake_{self.script.next_id():04d}"
                blocks.append(b)
            return blocks, info
        info["exhausted"] = True
        return [{"type": "text", "text": self.script.script["default_text"]}], info

    # ---- server --------------------------------------------------------------------
    def start(self) -> "FakeAPI":
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # silence stderr
                pass

            def _read_body(self) -> Any:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
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
                self.send_header("request-id", f"req_fake_{api.script.next_id()}")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                api.log({"method": "GET", "path": self.path})
                if path.rstrip("/") == "/v1/models":
                    self._json(200, {"data": [], "has_more": False, "first_id": None, "last_id": None})
                else:
                    self._json(200, {})

            def do_HEAD(self) -> None:
                api.log({"method": "HEAD", "path": self.path})
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                path = urlsplit(self.path).path
                body = self._read_body()
                headers = {k.lower(): v for k, v in self.headers.items()
                           if k.lower() not in ("x-api-key", "authorization")}
                if path == "/v1/messages/count_tokens":
                    api.log({"method": "POST", "path": self.path, "body": body})
                    self._json(200, {"input_tokens": _estimate_tokens(body)})
                    return
                if path != "/v1/messages" or not isinstance(body, dict):
                    api.log({"method": "POST", "path": self.path, "body": body, "headers": headers})
                    self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                                "message": f"fake api: no {path}"}})
                    return
                blocks, info = api.plan(body)
                stream = bool(body.get("stream"))
                api.log({"method": "POST", "path": self.path, "model": body.get("model"),
                         "stream": stream, "answer": blocks, **info, "headers": headers,
                         "body": body})
                model = body.get("model") or "claude-fake"
                stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                msg_id = f"msg_fake_{api.script.next_id():04d}"
                in_tok = _estimate_tokens(body.get("messages"))
                out_tok = max(1, len(json.dumps(blocks)) // 4)
                usage = {"input_tokens": in_tok, "output_tokens": out_tok,
                         "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
                if not stream:
                    self._json(200, {"id": msg_id, "type": "message", "role": "assistant",
                                     "model": model, "content": blocks, "stop_reason": stop,
                                     "stop_sequence": None, "usage": usage})
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("request-id", f"req_fake_{msg_id}")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True

                def ev(name: str, data: dict) -> None:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

                try:
                    ev("message_start", {"type": "message_start", "message": {
                        "id": msg_id, "type": "message", "role": "assistant", "model": model,
                        "content": [], "stop_reason": None, "stop_sequence": None,
                        "usage": {**usage, "output_tokens": 1}}})
                    ev("ping", {"type": "ping"})
                    for i, b in enumerate(blocks):
                        if b["type"] == "text":
                            ev("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "text", "text": ""}})
                            ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": b["text"]}})
                        else:
                            ev("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "tool_use", "id": b["id"],
                                                                         "name": b["name"], "input": {}}})
                            js = json.dumps(b["input"])
                            # two deltas, to exercise the client's partial-JSON assembly
                            cut = len(js) // 2
                            for part in (js[:cut], js[cut:]):
                                ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                                           "delta": {"type": "input_json_delta",
                                                                     "partial_json": part}})
                        ev("content_block_stop", {"type": "content_block_stop", "index": i})
                    ev("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": stop, "stop_sequence": None},
                                         "usage": {"output_tokens": out_tok}})
                    ev("message_stop", {"type": "message_stop"})
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeAPI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--script", help="scenario script (JSON); default: no turns (every answer is text)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the chosen port here (atomically)")
    ap.add_argument("--log", help="append one JSON line per request here")
    a = ap.parse_args(argv)
    script = json.load(open(a.script)) if a.script else None
    api = FakeAPI(script, log_path=a.log, host=a.host, port=a.port).start()
    print(api.port, flush=True)
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{api.port}\n")
        os.replace(tmp, a.port_file)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
