#!/usr/bin/env python3
"""Fake Gemini API for the real-agent suite (tests/test_real_agents.py): the real Gemini CLI runs against it, offline.
Started from shared/live-agents/gemini-cli-0.61.0/fake_gemini.py; owned by this project (FAKE_PORT default 8767).


Stdlib only. Run it ONLY inside a loopback-only network namespace (unshare -n); point the CLI at it
with GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:$FAKE_PORT and any GEMINI_API_KEY.

Answers:
  POST /v1beta/models/<m>:streamGenerateContent?alt=sse   SSE, one `data: <GenerateContentResponse>` per chunk
  POST /v1beta/models/<m>:generateContent                 JSON GenerateContentResponse (side calls: routing
                                                          classifier, next-speaker check, summaries, ...);
                                                          a JSON-schema request gets a JSON object built
                                                          from the schema
  POST /v1beta/models/<m>:countTokens                     {"totalTokens": N}
  POST /v1beta/models/<m>:embedContent / :batchEmbedContents   zero vectors
  GET  /v1beta/models[/<m>]                               a small model list
  anything else                                           404 google.rpc-style JSON error

The scenario is picked from a keyword in the newest user text of the request (a user turn whose parts hold
text, not a functionResponse):
  SCN_TEXT      plain text answer
  SCN_QUESTION  plain text ending with a question to the user
  SCN_LS        functionCall list_directory "." (read-only, offered in every mode), then text
  SCN_SHELL     functionCall run_shell_command `ls` (read-only), then text
  SCN_TOUCH     functionCall run_shell_command `touch made_by_agent.txt` (needs approval), then text
  SCN_WRITE     functionCall write_file made_by_agent.txt (needs approval), then text
  SCN_ASK       functionCall ask_user (one choice question: Blue / Green), then text
  SCN_AGENT     functionCall invoke_agent (generalist subagent); the subagent's own requests (they offer
                complete_task) get a complete_task call at once; then the closing text
  SCN_ERR429    HTTP 429 RESOURCE_EXHAUSTED ("Please retry in 1s") for the first $FAKE_FAIL_N stream
                requests of that prompt, then text
  SCN_ERR500    HTTP 500 INTERNAL on every stream request
  SCN_ERR400    HTTP 400 INVALID_ARGUMENT on every stream request (not retried)
  SCN_SLOW      text streamed slowly: one word every $FAKE_SLOW_S s (default 0.5), 40 words
A request whose last content is a user turn of functionResponse parts gets the closing text.
No keyword: "Hello from the fake Gemini. This is a plain answer."

Every request is appended to $FAKE_LOG (JSON lines: t, method, path, selected headers, body, and the
plan chosen).
"""
import json
import os
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = os.environ.get("FAKE_LOG", "")
PORT = int(os.environ.get("FAKE_PORT", "8767"))
FAIL_N = int(os.environ.get("FAKE_FAIL_N", "2"))
SLOW_S = float(os.environ.get("FAKE_SLOW_S", "0.5"))
MODEL_VERSION = os.environ.get("FAKE_MODEL_VERSION", "")  # empty: echo the requested model
_lock = threading.Lock()
_fail_counts = {}

KEEP_HEADERS = ("user-agent", "x-goog-api-client", "x-goog-api-key", "content-type", "accept",
                "x-gemini-api-privileged-user-id", "authorization")

SCENARIOS = ("SCN_TEXT", "SCN_QUESTION", "SCN_LS", "SCN_SHELL", "SCN_TOUCH", "SCN_WRITE", "SCN_ASK", "SCN_AGENT", "SCN_ERR429",
             "SCN_ERR500", "SCN_ERR400", "SCN_SLOW")

TOOL_CALLS = {
    "SCN_LS": ("list_directory", {"dir_path": "."}),
    "SCN_SHELL": ("run_shell_command", {"command": "ls", "description": "List the files in the project folder."}),
    "SCN_TOUCH": ("run_shell_command", {"command": "touch made_by_agent.txt",
                                        "description": "Create an empty file made_by_agent.txt."}),
    "SCN_WRITE": ("write_file", {"file_path": "made_by_agent.txt", "content": "written by the fake model\n"}),
    "SCN_AGENT": ("invoke_agent", {"agent_name": "generalist",
                                   "prompt": "Say hello from the subagent and finish at once."}),
    "SCN_ASK": ("ask_user", {"questions": [{
        "question": "Which colour should the button be?", "header": "Colour", "type": "choice",
        "options": [{"label": "Blue", "description": "A calm blue button"},
                    {"label": "Green", "description": "A fresh green button"}]}]}),
}
CLOSING = {
    "SCN_LS": "The folder holds notes.txt.",
    "SCN_SHELL": "The command ran. Those are the files in this folder.",
    "SCN_TOUCH": "Done: I created made_by_agent.txt.",
    "SCN_WRITE": "Done: I wrote made_by_agent.txt.",
    "SCN_ASK": "Thanks for choosing: the button gets that colour.",
    "SCN_AGENT": "The subagent reported back: it said hello.",
}


def log(entry):
    if not LOG:
        return
    entry["t"] = round(time.time(), 3)
    with _lock:
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


# ---------------------------------------------------------------- reading the request
def user_texts(contents):
    """Texts of user turns that are real prompts (not functionResponse turns), oldest first."""
    out = []
    for c in contents or []:
        if not isinstance(c, dict) or c.get("role", "user") != "user":
            continue
        parts = c.get("parts") or []
        if any(isinstance(p, dict) and "functionResponse" in p for p in parts):
            continue
        txt = "\n".join(p.get("text", "") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
        if txt:
            out.append(txt)
    return out


def last_is_function_response(contents):
    if not contents:
        return False
    last = contents[-1]
    return isinstance(last, dict) and any(isinstance(p, dict) and "functionResponse" in p
                                          for p in (last.get("parts") or []))


def find_scenario(texts):
    for t in reversed(texts):
        hits = [(t.rfind(s), s) for s in SCENARIOS if s in t]
        if hits:
            return max(hits)[1]
    return None


def tool_names(body):
    names = []
    for t in body.get("tools") or []:
        for fd in (t or {}).get("functionDeclarations") or []:
            names.append(fd.get("name"))
    return names


def tool_decl(body, name):
    for t in body.get("tools") or []:
        for fd in (t or {}).get("functionDeclarations") or []:
            if fd.get("name") == name:
                return fd
    return None


def plan_for(body):
    """('text', str) | ('call', name, args) | ('error', status, code_name, msg) | ('slow', str)."""
    contents = body.get("contents") or []
    done = tool_decl(body, "complete_task")
    if done is not None:  # a subagent's request: finish it at once
        if last_is_function_response(contents):
            return ("text", "The subagent is done.")
        schema = done.get("parametersJsonSchema") or done.get("parameters") or {}
        args = from_schema(schema) or {}
        for k, v in list(args.items()):
            if v == "fake":
                args[k] = "Hello from the fake subagent."
        return ("call", "complete_task", args)
    texts = user_texts(contents)
    newest = find_scenario(texts[-1:])
    anyscn = find_scenario(texts)
    if last_is_function_response(contents):
        return ("text", CLOSING.get(anyscn, "The tool ran. Here is the result."))
    if newest in TOOL_CALLS:
        name, args = TOOL_CALLS[newest]
        if name not in tool_names(body):
            return ("text", "No %s tool was offered (tools: %s)." % (name, ",".join(map(str, tool_names(body)))))
        return ("call", name, dict(args))
    if newest == "SCN_ERR429":
        key = texts[-1]
        with _lock:
            n = _fail_counts.get(key, 0)
            _fail_counts[key] = n + 1
        if n < FAIL_N:
            return ("error", 429, "RESOURCE_EXHAUSTED",
                    "Resource has been exhausted (e.g. check quota). Please retry in 1s.")
        return ("text", "Recovered after the rate limit: here is the answer.")
    if newest == "SCN_ERR500":
        return ("error", 500, "INTERNAL", "An internal error has occurred. Please retry or report it.")
    if newest == "SCN_ERR400":
        return ("error", 400, "INVALID_ARGUMENT", "Request contains an invalid argument.")
    if newest == "SCN_SLOW":
        return ("slow", " ".join("word%d" % i for i in range(40)) + ".")
    if newest == "SCN_QUESTION":
        return ("text", "I can do that in two ways. Which one do you want: A or B?")
    return ("text", "Hello from the fake Gemini. This is a plain answer.")


# ---------------------------------------------------------------- JSON side answers
def from_schema(schema, depth=0):
    if not isinstance(schema, dict) or depth > 6:
        return None
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), None)
    typ = (typ or ("object" if "properties" in schema else "string")).lower()
    if "enum" in schema and schema["enum"]:
        en = schema["enum"]
        for pref in ("user", "flash", "simple", "SIMPLE", "false"):
            if pref in en:
                return pref
        return en[0]
    if typ == "object":
        props = schema.get("properties") or {}
        return {k: from_schema(v, depth + 1) for k, v in props.items()}
    if typ == "array":
        return []
    if typ in ("number", "integer"):
        lo = schema.get("minimum", 1)
        return int(lo) if typ == "integer" else lo
    if typ == "boolean":
        return False
    return "fake"


def side_json(body):
    gc = body.get("generationConfig") or {}
    schema = gc.get("responseJsonSchema") or gc.get("responseSchema")
    if schema:
        return json.dumps(from_schema(schema))
    if gc.get("responseMimeType") == "application/json":
        return json.dumps({"reasoning": "fake", "next_speaker": "user"})
    return None


# ---------------------------------------------------------------- response shapes
def usage(prompt=120, cand=12, thoughts=0, cached=0):
    u = {"promptTokenCount": prompt, "candidatesTokenCount": cand,
         "totalTokenCount": prompt + cand + thoughts,
         "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if thoughts:
        u["thoughtsTokenCount"] = thoughts
    if cached:
        u["cachedContentTokenCount"] = cached
    return u


def response_obj(model, parts, finish=None, use=None):
    cand = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    out = {"candidates": [cand], "modelVersion": MODEL_VERSION or model,
           "responseId": "fake-" + uuid.uuid4().hex[:16]}
    if use:
        out["usageMetadata"] = use
    return out


def chunk(wfile, data):
    wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    wfile.flush()


def sse_event(wfile, obj):
    chunk(wfile, ("data: " + json.dumps(obj) + "\r\n\r\n").encode())


def send_json(h, status, obj):
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json; charset=UTF-8")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def send_error(h, status, code_name, msg):
    err = {"error": {"code": status, "message": msg, "status": code_name}}
    if status == 429:
        err["error"]["details"] = [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]
    send_json(h, status, err)


def stream(h, model, plan):
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Cache-Control", "no-cache")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    w = h.wfile
    if plan[0] in ("text", "slow"):
        words = plan[1].split(" ")
        step = 1 if plan[0] == "slow" else max(1, len(words) // 3)
        pieces = [" ".join(words[i:i + step]) for i in range(0, len(words), step)]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            text = piece + ("" if last else " ")
            sse_event(w, response_obj(model, [{"text": text}], "STOP" if last else None,
                                      usage(cand=len(words)) if last else None))
            if plan[0] == "slow" and not last:
                time.sleep(SLOW_S)
    else:  # call
        _, name, args = plan
        sse_event(w, response_obj(model, [{"text": "I will use a tool. "}]))
        sse_event(w, response_obj(model, [{"functionCall": {"name": name, "args": args}}], "STOP", usage(cand=20)))
    chunk(w, b"")


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else {}
        except Exception:
            return {"_raw": raw.decode("utf-8", "replace")[:2000]}

    def _log(self, body, plan):
        hdrs = {k: self.headers.get(k) for k in KEEP_HEADERS if self.headers.get(k) is not None}
        if "x-goog-api-key" in hdrs:
            hdrs["x-goog-api-key"] = hdrs["x-goog-api-key"][:4] + "..."
        log({"method": self.command, "path": self.path, "headers": hdrs, "plan": plan, "body": body})

    def do_GET(self):
        path = self.path.split("?")[0]
        self._log(None, None)
        m = re.search(r"/models/([^/:]+)$", path)
        if m:
            return send_json(self, 200, {"name": "models/" + m.group(1), "displayName": m.group(1),
                                         "inputTokenLimit": 1048576, "outputTokenLimit": 65536})
        if path.endswith("/models"):
            return send_json(self, 200, {"models": [{"name": "models/" + n} for n in (
                "gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3-pro-preview",
                "gemini-3-flash-preview")]})
        send_error(self, 404, "NOT_FOUND", "fake: no such GET %s" % path)

    def do_POST(self):
        body = self._body()
        path = self.path.split("?")[0]
        m = re.search(r"/models/([^/:]+):(\w+)$", path)
        if not m:
            self._log(body, None)
            return send_error(self, 404, "NOT_FOUND", "fake: no such POST %s" % path)
        model, method = m.group(1), m.group(2)
        if method == "countTokens":
            self._log(body, ["countTokens"])
            n = len(json.dumps(body)) // 4
            return send_json(self, 200, {"totalTokens": n})
        if method in ("embedContent", "batchEmbedContents"):
            self._log(body, [method])
            vec = {"values": [0.0] * 8}
            if method == "embedContent":
                return send_json(self, 200, {"embedding": vec})
            return send_json(self, 200, {"embeddings": [vec for _ in body.get("requests") or []]})
        if method == "generateContent":
            js = side_json(body)
            if js is not None:
                plan = ("text", js)
            else:
                plan = plan_for(body)
                if plan[0] in ("call", "error"):
                    plan = ("text", "Fake side answer.")
            self._log(body, list(plan))
            text = plan[1] if plan[0] in ("text", "slow") else "ok"
            return send_json(self, 200, response_obj(model, [{"text": text}], "STOP", usage(cand=8)))
        if method == "streamGenerateContent":
            plan = plan_for(body)
            self._log(body, list(plan))
            if plan[0] == "error":
                return send_error(self, plan[1], plan[2], plan[3])
            try:
                return stream(self, model, plan)
            except (BrokenPipeError, ConnectionResetError):
                log({"event": "client_closed_stream", "path": self.path})
                return
        self._log(body, None)
        send_error(self, 404, "NOT_FOUND", "fake: no such method %s" % method)

    def log_message(self, *a):
        pass


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", PORT), H)
    srv.daemon_threads = True
    log({"event": "listening", "port": PORT})
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
