#!/usr/bin/env python3
"""The model stand-in the real-agent suite (tests/test_real_agents.py) runs the
real Claude Code and Codex CLIs against, offline. Started from
shared/live-agents/fake_model.py; owned by this project.

Speaks just enough of the Anthropic Messages API (POST /v1/messages, SSE) and
the OpenAI Responses API (POST /v1/responses, SSE) for scripted conversations.
Run it ONLY inside a loopback-only network namespace (unshare -n).

The scenario is picked from a keyword in the newest user text of the request:
  SCN_TEXT    plain text answer
  SCN_BASH    tool call `ls` (Claude: Bash; Codex: its shell tool), then text
  SCN_WRITE   tool call that needs permission (Claude: Bash `touch made_by_agent.txt`;
              Codex: shell `touch ...` with escalation requested), then text
  SCN_ERR429  HTTP 429 rate_limit_error for the first FAIL_N requests, then text
  SCN_ERR529  HTTP 529 overloaded_error (Codex: 500) on every request
  SCN_SLOW    text streamed slowly (one word per 0.5 s, ~20 s) for Esc tests
  SCN_QUESTION plain text ending with a question to the user
  SCN_ASK     Claude: AskUserQuestion tool call; Codex: request_user_input (when offered)
  SCN_PLAN    Claude: ExitPlanMode tool call (run the agent with --permission-mode plan)
  SCN_AGENT   Claude: Agent/Task tool call whose subagent prompt says SCN_PAUSE
  SCN_BGAGENT as SCN_AGENT with run_in_background: true
  SCN_PAUSE   plain text after a pause of FAKE_PAUSE seconds (3)
  SCN_PROPOSE Codex (Plan mode): an answer with a <proposed_plan> block
  SCN_TASKSTOP Claude: TaskStop of the background agent an earlier tool result launched
              (its ``agentId``), then "I stopped the helper."
  SCN_FIXIT   (a Stop hook's feedback) text "Fixed after the hook"
  `!` command (``<bash-input>`` in the newest user text, Claude 2.1.332 bash mode): text
              "Ran your command"
  SCN_SLEEP   a tool call that takes 30 s (Claude: Bash python3 time.sleep; Codex: shell
              `sleep 30`, held for 30 s), for Esc during a tool
A request whose last input is a tool result gets the closing text.
Requests without tools (titles, summaries, side calls) get a short text.

Every request is appended to $FAKE_LOG (JSON lines: time, method, path,
selected headers, body).
"""
import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = os.environ.get("FAKE_LOG", "fake_requests.jsonl")
PORT = int(os.environ.get("FAKE_PORT", "8765"))
FAIL_N = int(os.environ.get("FAKE_FAIL_N", "2"))
RETRY_AFTER = os.environ.get("FAKE_RETRY_AFTER", "1")  # empty: no retry-after header
_lock = threading.Lock()
_fail_counts = {}

KEEP_HEADERS = ("user-agent", "anthropic-version", "anthropic-beta", "x-app",
                "content-type", "accept", "originator", "version", "session_id",
                "x-stainless-retry-count", "x-stainless-timeout",
                "x-claude-code-session-id", "x-codex-turn-metadata",
                "openai-beta", "chatgpt-account-id", "x-client-request-id")


def log(entry):
    entry["t"] = time.time()
    with _lock:
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


# ---------------------------------------------------------------- helpers
def _text_of(content):
    if isinstance(content, str):
        return content
    out = []
    if isinstance(content, list):
        for b in content:
            if isinstance(b, dict):
                if b.get("type") in ("text", "input_text", "output_text"):
                    out.append(b.get("text", ""))
                elif b.get("type") == "tool_result":
                    out.append("<tool_result>")
    return "\n".join(out)


PAUSE = float(os.environ.get("FAKE_PAUSE", "3"))
SCENARIOS = ("SCN_TEXT", "SCN_BASH", "SCN_WRITE", "SCN_ERR429", "SCN_ERR529",
             "SCN_SLOW", "SCN_QUESTION", "SCN_ASK", "SCN_PLAN", "SCN_BGAGENT", "SCN_AGENT", "SCN_PAUSE",
             "SCN_SLEEP", "SCN_PROPOSE", "SCN_TASKSTOP", "SCN_FIXIT")


def find_scenario(texts):
    """texts: user texts, newest last. Returns the scenario of the newest one with a keyword."""
    for t in reversed(texts):
        for s in SCENARIOS:
            if s in t:
                return s
    return None


# ---------------------------------------------------------------- Anthropic
def anthropic_plan(body):
    """Returns ('text', str) | ('tool', name, input) | ('error', status, type, msg) | ('slow', str)."""
    msgs = body.get("messages") or []
    tools = body.get("tools") or []
    # (2.1.332 may end the list with a "system" message, e.g. "## Exited Plan Mode")
    last = next((m for m in reversed(msgs) if isinstance(m, dict) and m.get("role") != "system"), {})
    last_content = last.get("content")
    has_tool_result = isinstance(last_content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in last_content)
    user_texts = [_text_of(m.get("content")) for m in msgs if m.get("role") == "user"]
    scn = find_scenario(user_texts[-1:]) if user_texts else None
    if not tools:
        return ("text", "Fake side answer.")
    if has_tool_result:
        scn_any = find_scenario(user_texts)
        if scn_any == "SCN_WRITE":
            return ("text", "Done: I created made_by_agent.txt.")
        if scn_any == "SCN_TASKSTOP":
            return ("text", "Done: I stopped the helper.")
        if scn_any in ("SCN_ASK", "SCN_PLAN", "SCN_AGENT", "SCN_BGAGENT"):
            return ("text", "Thanks, all done with %s." % scn_any.lower())
        return ("text", "The command ran. Those are the files in this folder.")
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    if user_texts and "<bash-input>" in user_texts[-1]:
        return ("text", "Ran your command: its output is above.")
    if scn == "SCN_FIXIT":
        return ("text", "Fixed after the hook: the tests pass now.")
    if scn == "SCN_TASKSTOP":
        launched = re.findall(r"agentId: ([A-Za-z0-9_-]+)", json.dumps(msgs))
        return ("tool", "TaskStop", {"task_id": launched[-1] if launched else "none"})
    if scn == "SCN_PAUSE":
        time.sleep(PAUSE)
        return ("text", "Paused work done: plain answer.")
    if scn == "SCN_BASH":
        return ("tool", "Bash", {"command": "ls", "description": "List files in the current directory"})
    if scn == "SCN_SLEEP":
        # (2.1.332 blocks a standalone `sleep 30`)
        return ("tool", "Bash", {"command": "python3 -c 'import time; time.sleep(30)'",
                                 "description": "Wait thirty seconds"})
    if scn == "SCN_ASK" and "AskUserQuestion" in names:
        return ("tool", "AskUserQuestion", {"questions": [{
            "question": "Which colour should the file be?", "header": "Colour", "multiSelect": False,
            "options": [{"label": "Red", "description": "A red file"},
                        {"label": "Blue", "description": "A blue file"}]}]})
    if scn == "SCN_PLAN":  # (2.1.332 defers ExitPlanMode behind ToolSearch; it still runs it)
        return ("tool", "ExitPlanMode", {"plan": "1. Create made_by_agent.txt\n2. Report back"})
    if scn in ("SCN_AGENT", "SCN_BGAGENT"):
        tool = "Agent" if "Agent" in names else "Task"
        inp = {"description": "Look around", "prompt": "Work a while, then answer. SCN_PAUSE",
               "subagent_type": "general-purpose"}
        if scn == "SCN_BGAGENT":
            inp["run_in_background"] = True
        return ("tool", tool, inp)
    if scn == "SCN_WRITE":
        return ("tool", "Bash", {"command": "touch made_by_agent.txt",
                                 "description": "Create an empty file made_by_agent.txt"})
    if scn == "SCN_ERR429":
        key = "a429"
        with _lock:
            n = _fail_counts.get(key, 0)
            _fail_counts[key] = n + 1
        if n < FAIL_N:
            return ("error", 429, "rate_limit_error", "This request would exceed your account's rate limit. Please try again later.")
        with _lock:
            _fail_counts[key] = 0
        return ("text", "Recovered after the rate limit: here is the answer.")
    if scn == "SCN_ERR529":
        return ("error", 529, "overloaded_error", "Overloaded")
    if scn == "SCN_SLOW":
        return ("slow", " ".join("word%d" % i for i in range(40)) + ".")
    if scn == "SCN_QUESTION":
        return ("text", "I can do that in two ways. Which one do you want: A or B?")
    return ("text", "Hello from the fake model. This is a plain answer.")


def chunk(wfile, data):
    """One HTTP/1.1 chunk (Transfer-Encoding: chunked); b"" ends the body."""
    wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    wfile.flush()


def sse(wfile, event, data):
    chunk(wfile, ("event: %s\ndata: %s\n\n" % (event, json.dumps(data))).encode())


def anthropic_stream(h, body, plan):
    model = body.get("model", "claude-fake")
    mid = "msg_fake_" + uuid.uuid4().hex[:20]
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Cache-Control", "no-cache")
    h.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:20])
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    w = h.wfile
    usage = {"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    sse(w, "message_start", {"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}})
    if plan[0] in ("text", "slow"):
        text = plan[1]
        sse(w, "content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}})
        words = text.split(" ")
        for i, word in enumerate(words):
            sse(w, "content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta",
                                                     "text": word + (" " if i < len(words) - 1 else "")}})
            if plan[0] == "slow":
                time.sleep(0.5)
        sse(w, "content_block_stop", {"type": "content_block_stop", "index": 0})
        stop = "end_turn"
    else:  # tool
        _, name, inp = plan
        tid = "toolu_fake_" + uuid.uuid4().hex[:16]
        sse(w, "content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}})
        sse(w, "content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": "I will run a command."}})
        sse(w, "content_block_stop", {"type": "content_block_stop", "index": 0})
        sse(w, "content_block_start", {"type": "content_block_start", "index": 1,
                                       "content_block": {"type": "tool_use", "id": tid, "name": name, "input": {}}})
        js = json.dumps(inp)
        for i in range(0, len(js), 10):
            sse(w, "content_block_delta", {"type": "content_block_delta", "index": 1,
                                           "delta": {"type": "input_json_delta", "partial_json": js[i:i + 10]}})
        sse(w, "content_block_stop", {"type": "content_block_stop", "index": 1})
        stop = "tool_use"
    sse(w, "message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                             "usage": {"output_tokens": 20}})
    sse(w, "message_stop", {"type": "message_stop"})
    chunk(w, b"")


def anthropic_nonstream(h, body, plan):
    model = body.get("model", "claude-fake")
    text = plan[1] if plan[0] in ("text", "slow") else "ok"
    out = {"id": "msg_fake_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant",
           "model": model, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
           "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 5}}
    send_json(h, 200, out)


def send_json(h, status, obj, extra_headers=()):
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for k, v in extra_headers:
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


# ---------------------------------------------------------------- OpenAI Responses
def responses_plan(body):
    items = body.get("input") or []
    tools = body.get("tools") or []
    tool_names = [t.get("name") or (t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)]
    user_texts = []
    for it in items:
        if isinstance(it, dict) and it.get("type", "message") == "message" and it.get("role") == "user":
            user_texts.append(_text_of(it.get("content")))
    last = items[-1] if items else {}
    last_is_output = isinstance(last, dict) and last.get("type") in (
        "function_call_output", "custom_tool_call_output", "local_shell_call_output")
    scn = find_scenario(user_texts[-1:]) if user_texts else None
    if not tools:
        return ("text", "Fake side answer.")
    if last_is_output:
        if find_scenario(user_texts) == "SCN_WRITE":
            return ("text", "Done: I created made_by_agent.txt.")
        if find_scenario(user_texts) == "SCN_ASK":
            return ("text", "Thanks, all done with scn_ask.")
        return ("text", "The command ran. Those are the files in this folder.")
    if scn == "SCN_PAUSE":
        time.sleep(PAUSE)
        return ("text", "Paused work done: plain answer.")
    if scn == "SCN_PROPOSE":
        return ("text", "Here is the plan.\n\n<proposed_plan>\n1. Create made_by_agent.txt\n"
                        "2. Report back\n</proposed_plan>")
    if scn == "SCN_ASK" and "request_user_input" in tool_names:
        return ("call", "request_user_input", {"questions": [{
            "id": "colour", "header": "Colour", "question": "Which colour should the file be?",
            "options": [{"label": "Red (Recommended)", "description": "A red file"},
                        {"label": "Blue", "description": "A blue file"}]}]})
    if scn in ("SCN_BASH", "SCN_WRITE", "SCN_SLEEP"):
        cmd = {"SCN_BASH": "ls", "SCN_WRITE": "touch made_by_agent.txt", "SCN_SLEEP": "sleep 30"}[scn]
        esc = scn == "SCN_WRITE"
        if "exec_command" in tool_names:
            args = {"cmd": cmd}
            if scn == "SCN_SLEEP":
                args["yield_time_ms"] = 30000
            if esc:
                args.update({"sandbox_permissions": "require_escalated",
                             "justification": "Create a file in the workspace?"})
            return ("call", "exec_command", args)
        if "shell_command" in tool_names:
            args = {"command": cmd}
            if esc:
                args.update({"sandbox_permissions": "require_escalated",
                             "justification": "Create a file in the workspace?"})
            return ("call", "shell_command", args)
        if "shell" in tool_names:
            args = {"command": ["bash", "-lc", cmd]}
            if esc:
                args.update({"sandbox_permissions": "require_escalated",
                             "justification": "Create a file in the workspace?"})
            return ("call", "shell", args)
        return ("text", "No shell tool offered: %s" % ",".join(map(str, tool_names)))
    if scn == "SCN_ERR429":
        with _lock:
            n = _fail_counts.get("o429", 0)
            _fail_counts["o429"] = n + 1
        if n < FAIL_N:
            return ("error", 429, "rate_limit_exceeded", "Rate limit reached for requests. Please try again in 1s.")
        with _lock:
            _fail_counts["o429"] = 0
        return ("text", "Recovered after the rate limit: here is the answer.")
    if scn == "SCN_ERR529":
        return ("error", 500, "server_error", "The server had an error while processing your request.")
    if scn == "SCN_SLOW":
        return ("slow", " ".join("word%d" % i for i in range(40)) + ".")
    if scn == "SCN_QUESTION":
        return ("text", "I can do that in two ways. Which one do you want: A or B?")
    return ("text", "Hello from the fake model. This is a plain answer.")


def oai_sse(w, data):
    chunk(w, ("event: %s\ndata: %s\n\n" % (data["type"], json.dumps(data))).encode())


def responses_stream(h, body, plan):
    rid = "resp_fake_" + uuid.uuid4().hex[:20]
    model = body.get("model", "gpt-fake")
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Cache-Control", "no-cache")
    h.send_header("x-request-id", "req_" + uuid.uuid4().hex[:16])
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    w = h.wfile
    seq = [0]

    def ev(d):
        d["sequence_number"] = seq[0]
        seq[0] += 1
        oai_sse(w, d)

    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
            "status": "in_progress", "output": []}
    ev({"type": "response.created", "response": base})
    ev({"type": "response.in_progress", "response": base})
    outputs = []
    if plan[0] in ("text", "slow"):
        text = plan[1]
        iid = "msg_fake_" + uuid.uuid4().hex[:16]
        ev({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": iid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}})
        ev({"type": "response.content_part.added", "item_id": iid, "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}})
        words = text.split(" ")
        for i, word in enumerate(words):
            ev({"type": "response.output_text.delta", "item_id": iid, "output_index": 0, "content_index": 0,
                "delta": word + (" " if i < len(words) - 1 else "")})
            if plan[0] == "slow":
                time.sleep(0.5)
        ev({"type": "response.output_text.done", "item_id": iid, "output_index": 0, "content_index": 0,
            "text": text})
        part = {"type": "output_text", "text": text, "annotations": []}
        ev({"type": "response.content_part.done", "item_id": iid, "output_index": 0, "content_index": 0,
            "part": part})
        item = {"id": iid, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        ev({"type": "response.output_item.done", "output_index": 0, "item": item})
        outputs.append(item)
    else:  # call
        _, name, args = plan
        iid = "fc_fake_" + uuid.uuid4().hex[:16]
        cid = "call_fake_" + uuid.uuid4().hex[:16]
        a = json.dumps(args)
        ev({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": iid, "type": "function_call", "status": "in_progress", "name": name,
                     "call_id": cid, "arguments": ""}})
        ev({"type": "response.function_call_arguments.delta", "item_id": iid, "output_index": 0, "delta": a})
        ev({"type": "response.function_call_arguments.done", "item_id": iid, "output_index": 0, "arguments": a})
        item = {"id": iid, "type": "function_call", "status": "completed", "name": name, "call_id": cid,
                "arguments": a}
        ev({"type": "response.output_item.done", "output_index": 0, "item": item})
        outputs.append(item)
    done = dict(base, status="completed", output=outputs,
                usage={"input_tokens": 120, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": 140})
    ev({"type": "response.completed", "response": done})
    chunk(w, b"")


# ---------------------------------------------------------------- handler
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.headers.get("Content-Encoding") == "zstd" or self.headers.get("content-encoding") == "zstd":
            return raw, None
        try:
            return raw, json.loads(raw) if raw else None
        except Exception:
            return raw, None

    def _log(self, body, raw, note=None):
        hdr = {k: v for k, v in self.headers.items() if k.lower() in KEEP_HEADERS}
        b = body if isinstance(body, dict) else {}
        msgs = b.get("messages") or b.get("input") or []
        log({"method": self.command, "path": self.path, "headers": hdr, "model": b.get("model"),
             "tools": [t.get("name") or (t.get("function") or {}).get("name") or t.get("type")
                       for t in b.get("tools") or [] if isinstance(t, dict)],
             "last": json.dumps(msgs[-1])[:400] if msgs else None, "note": note})

    def do_GET(self):
        self._log(None, b"")
        p = self.path.split("?")[0]
        if p.endswith("/models"):
            if "codex" in (self.headers.get("user-agent") or "").lower() or self.headers.get("originator"):
                send_json(self, 200, {"models": []})
            else:
                send_json(self, 200, {"data": [{"type": "model", "id": "claude-sonnet-4-5",
                                                "display_name": "Fake", "created_at": "2025-01-01T00:00:00Z"}],
                                      "has_more": False, "first_id": None, "last_id": None})
            return
        send_json(self, 404, {"type": "error", "error": {"type": "not_found_error", "message": "fake: no such path"}})

    def do_HEAD(self):
        self._log(None, b"")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        raw, body = self._body()
        p = self.path.split("?")[0]
        if p.endswith("/v1/messages/count_tokens"):
            self._log(body, raw)
            send_json(self, 200, {"input_tokens": 100})
            return
        if p.endswith("/v1/messages"):
            plan = anthropic_plan(body or {})
            self._log(body, raw, note=list(plan[:3]))
            if plan[0] == "error":
                _, status, etype, msg = plan
                send_json(self, status, {"type": "error", "error": {"type": etype, "message": msg},
                                         "request_id": "req_fake_" + uuid.uuid4().hex[:12]},
                          extra_headers=[("retry-after", RETRY_AFTER)] if status == 429 and RETRY_AFTER else ())
                return
            if (body or {}).get("stream"):
                anthropic_stream(self, body, plan)
            else:
                anthropic_nonstream(self, body, plan)
            return
        if p.endswith("/responses"):
            plan = responses_plan(body or {})
            self._log(body, raw, note=list(plan[:3]))
            if plan[0] == "error":
                _, status, etype, msg = plan
                send_json(self, status, {"error": {"message": msg, "type": etype, "param": None, "code": etype}},
                          extra_headers=[("retry-after", "1")] if status == 429 else ())
                return
            responses_stream(self, body or {}, plan)
            return
        self._log(body, raw, note="unhandled")
        send_json(self, 404, {"type": "error", "error": {"type": "not_found_error", "message": "fake: no such path"}})


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", PORT), H)
    srv.daemon_threads = True
    print("fake model on 127.0.0.1:%d, log %s" % (PORT, LOG), file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
