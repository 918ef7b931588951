"""Hardening, access: who can read the exporter, and what it gives away.

- ``--web.config.file`` in the exporter-toolkit format, with real TLS (a
  self-signed certificate made here), bcrypt ``basic_auth_users`` and client
  certificates: wrong, unknown, over-long and malformed credentials get 401;
  plain HTTP and old TLS versions are refused; silent connections cannot
  block the others; unsupported keys stop the start with the key named.
- The default listen address is loopback only.
- Per-session series are capped (``metrics.max_sessions``, with
  ``coding_agent_session_series_dropped``) and expire
  (``metrics.session_ttl_seconds``).
- Hook routes (issue 22): the hook secret (``state_dir/hook-secret``, 0600)
  is required, the body must be ``application/json``, a foreign ``Origin``
  and a ``Host`` that is not allowed are refused on every route, a hook
  speaks only for a transcript on disk under a watched root that names its
  session, and pages per session are rate-limited.
- A secret planted all over transcript content (prompts, answers, tool input
  and output, thinking, errors, titles, malformed and oversized lines; the
  session registry's ``name`` and the ``.key`` file beside its record) never
  appears on ``/metrics``, the status page's JSON, in the log (debug level included), in default
  alert bodies or in the state files.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
import yaml

from coding_agent_exporter.cli import DEFAULT_LISTEN, build_parser
from harness import ROOT, claude_path, codex_path
from test_hardening_support import ClaudeSession, CodexSession, Daemon, Receiver, alerts_for, wait_for, write


# -- certificates ------------------------------------------------------------------
def _make_certs(d: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost signed by it, and a
    client certificate signed by it (PEM files in ``d``)."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        return _make_certs_openssl(d)
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def save(stem, k, cert):
        (d / f"{stem}.key").write_bytes(k.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
        (d / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    ca_key = key()
    ca = (x509.CertificateBuilder().subject_name(name("test ca")).issuer_name(name("test ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    save("ca", ca_key, ca)
    for stem, usage, sans in (("server", ExtendedKeyUsageOID.SERVER_AUTH,
                               [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                              ("client", ExtendedKeyUsageOID.CLIENT_AUTH, [x509.DNSName("scraper")])):
        k = key()
        cert = (x509.CertificateBuilder().subject_name(name(stem)).issuer_name(ca.subject)
                .public_key(k.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        save(stem, k, cert)
    return {n: d / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def _make_certs_openssl(d: Path) -> dict[str, Path]:
    if not shutil.which("openssl"):
        pytest.skip("neither the cryptography package nor the openssl command is available")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
        "-subj", "/CN=test ca", "-keyout", "ca.key", "-out", "ca.crt")
    for stem, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
                      ("client", "subjectAltName=DNS:scraper\nextendedKeyUsage=clientAuth")):
        (d / f"{stem}.ext").write_text(ext + "\n")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={stem}",
            "-keyout", f"{stem}.key", "-out", f"{stem}.csr")
        run("x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "1", "-extfile", f"{stem}.ext", "-out", f"{stem}.crt")
    return {n: d / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


PASSWORD = "correct horse battery staple"


def _get(url: str, ctx: ssl.SSLContext | None = None, auth: tuple[str, str] | None = None,
         header: str | None = None, timeout: float = 10.0) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    if header:
        req.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@pytest.fixture(scope="module")
def tls_exporter(tmp_path_factory):
    root = tmp_path_factory.mktemp("tls")
    certs = _make_certs(root)
    web = root / "web.yml"
    web.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(certs["server.crt"]), "key_file": str(certs["server.key"])},
        "basic_auth_users": {"alice": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()},
        "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
    }))
    exp = Daemon(root, extra_args=["--web.config.file", str(web)], scheme="https")
    ctx = ssl.create_default_context(cafile=str(certs["ca.crt"]))

    def ready():
        if exp.proc.poll() is not None:
            raise AssertionError(f"exporter exited with {exp.proc.returncode}:\n{exp.log()}")
        try:
            return _get(f"https://127.0.0.1:{exp.port}/-/ready", ctx, ("alice", PASSWORD), timeout=2)[0] == 200
        except OSError:
            return False
    exp.ready_check = ready
    exp.start()
    base = f"https://127.0.0.1:{exp.port}"
    yield exp, base, ctx, certs
    exp.stop()


def test_tls_and_basic_auth(tls_exporter):
    exp, base, ctx, _certs = tls_exporter
    status, headers, body = _get(f"{base}/metrics", ctx, ("alice", PASSWORD))
    assert status == 200 and b"coding_agent_sessions" in body
    assert headers.get("X-Content-Type-Options") == "nosniff"
    for auth, header in ((None, None), (("alice", "wrong"), None), (("alice", ""), None),
                         (("mallory", PASSWORD), None), (("alice", PASSWORD + "x" * 80), None),
                         (("alice", "x" * 200), None), (None, "Basic !!!notbase64"),
                         (None, "Basic " + base64.b64encode(b"alice").decode()), (None, "Bearer abc"),
                         (None, "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode())):
        for path in ("/metrics", "/", "/-/healthy", "/api/v1/sessions", "/api/v1/health"):
            status, headers, _ = _get(f"{base}{path}", ctx, auth, header)
            assert status == 401, (auth, header, path, status)
            assert headers.get("WWW-Authenticate", "").startswith("Basic")
    # the status page and its JSON sit behind the same TLS and basic auth
    for path in ("/api/v1/sessions", "/api/v1/health"):
        status, headers, body = _get(f"{base}{path}", ctx, ("alice", PASSWORD))
        assert status == 200 and headers["Content-Type"] == "application/json" and json.loads(body), path
    status, _, body = _get(f"{base}/", ctx, ("alice", PASSWORD))
    assert status == 200 and b"api/v1/sessions" in body
    assert "Traceback" not in exp.log()
    # the certificate is the one configured (verified against its CA, by IP)
    with socket.create_connection(("127.0.0.1", exp.port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


def _healthcheck(port: int) -> int:
    """The image's HEALTHCHECK command, as the Dockerfile runs it."""
    return subprocess.run([sys.executable, "-m", "coding_agent_exporter.healthcheck", f"127.0.0.1:{port}"],
                          capture_output=True, timeout=30).returncode


def test_container_healthcheck_with_tls_and_basic_auth(tls_exporter, tmp_path):
    exp, _base, _ctx, _certs = tls_exporter
    assert _healthcheck(exp.port) == 0  # TLS and basic auth on: 401 over https is a server answering
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {"bob": bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()}}))
    plain = Daemon(tmp_path, extra_args=["--web.config.file", str(web)])

    def answers() -> bool:
        try:
            return _get(f"http://127.0.0.1:{plain.port}/-/ready", timeout=2)[0] == 401
        except OSError:
            return False
    plain.ready_check = answers
    try:
        plain.start()
        assert _healthcheck(plain.port) == 0  # basic auth over plain HTTP: 401
    finally:
        plain.stop()
    assert _healthcheck(plain.port) == 1  # nothing listening
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert '"-m", "coding_agent_exporter.healthcheck"' in dockerfile


def test_plain_http_and_old_tls_refused(tls_exporter):
    exp, base, ctx, _certs = tls_exporter
    with pytest.raises((OSError, urllib.error.URLError)):
        urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/metrics", timeout=5).read()
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(_certs["ca.crt"]))
    try:
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.minimum_version = ssl.TLSVersion.TLSv1
    except (ValueError, ssl.SSLError):
        pytest.skip("this OpenSSL cannot even offer TLS 1.1")
    with pytest.raises((ssl.SSLError, OSError)):
        with socket.create_connection(("127.0.0.1", exp.port), timeout=5) as raw:
            old.wrap_socket(raw, server_hostname="127.0.0.1")
    assert _get(f"{base}/-/healthy", ctx, ("alice", PASSWORD))[0] == 200


def test_silent_connections_do_not_block_scrapes(tls_exporter):
    """Connections that never send a byte (never start the TLS handshake)
    used to hold the accept loop: nobody else got in."""
    exp, base, ctx, _certs = tls_exporter
    silent = [socket.create_connection(("127.0.0.1", exp.port), timeout=5) for _ in range(8)]
    try:
        t0 = time.monotonic()
        status, _, _ = _get(f"{base}/metrics", ctx, ("alice", PASSWORD), timeout=5)
        assert status == 200
        assert time.monotonic() - t0 < 3
    finally:
        for s in silent:
            s.close()


def test_unknown_user_costs_as_much_as_a_wrong_password(tls_exporter):
    """No user enumeration by timing: an unknown user is checked against a
    dummy hash of the same cost."""
    exp, base, ctx, _certs = tls_exporter

    def timed(user):
        out = []
        for i in range(5):
            t0 = time.perf_counter()
            assert _get(f"{base}/-/healthy", ctx, (user, f"nope{i}"))[0] == 401
            out.append(time.perf_counter() - t0)
        return statistics.median(out)
    known, unknown = timed("alice"), timed("nobody-here")
    assert unknown > 0.4 * known, (known, unknown)


def test_client_certificates(tmp_path):
    certs = _make_certs(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"tls_server_config": {
        "cert_file": str(certs["server.crt"]), "key_file": str(certs["server.key"]),
        "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": str(certs["ca.crt"])}}))
    exp = Daemon(tmp_path, extra_args=["--web.config.file", str(web)])
    with_cert = ssl.create_default_context(cafile=str(certs["ca.crt"]))
    with_cert.load_cert_chain(str(certs["client.crt"]), str(certs["client.key"]))
    without = ssl.create_default_context(cafile=str(certs["ca.crt"]))

    def ready():
        if exp.proc.poll() is not None:
            raise AssertionError(exp.log())
        try:
            return _get(f"https://127.0.0.1:{exp.port}/-/ready", with_cert, timeout=2)[0] == 200
        except OSError:
            return False
    exp.ready_check = ready
    exp.start()
    base = f"https://127.0.0.1:{exp.port}"
    try:
        assert _get(f"{base}/metrics", with_cert)[0] == 200
        with pytest.raises((ssl.SSLError, OSError)):
            _get(f"{base}/metrics", without)
        assert exp.alive()
    finally:
        exp.stop()


@pytest.mark.parametrize("web,needle", [
    ({"tls_server_config": {"cert_file": "CERT", "key_file": "KEY", "cipher_suites": ["TLS_AES_128_GCM_SHA256"]}},
     "tls_server_config.cipher_suites: not supported"),
    ({"tls_server_config": {"cert_file": "CERT", "key_file": "KEY", "client_auth_type": "RequireAndVerifyClientCert"}},
     "needs client_ca_file"),
    ({"tls_server_config": {"cert_file": "CERT", "key_file": "KEY", "min_version": "TLS99"}},
     "tls_server_config.min_version"),
    ({"tls_server_config": {"cert_file": "/nonexistent.crt", "key_file": "/nonexistent.key"}},
     "cannot load cert_file"),
    ({"basic_auth_users": {"alice": "$2b$10$tooshort"}}, "basic_auth_users.alice"),
    ({"basic_auth_users": {"alice": "hunter2"}}, "basic_auth_users.alice: not a bcrypt hash"),
    ({"http_server_config": {"headers": {"X-A": "b\r\nInjected: 1"}}}, "http_server_config.headers"),
    ({"tls_server_config": {"key_file": "/some.key"}}, "cert_file and key_file go together"),
], ids=["cipher_suites", "client_auth_no_ca", "min_version", "missing_cert", "short_hash", "plain_password",
        "header_injection", "key_only"])
def test_bad_web_config_stops_at_start_naming_the_key(tmp_path, web, needle):
    certs = _make_certs(tmp_path) if "CERT" in json.dumps(web) else {}
    text = json.dumps(web).replace("CERT", str(certs.get("server.crt", ""))).replace(
        "KEY", str(certs.get("server.key", "")))
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(json.loads(text)))
    r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "run", "--web.config.file", str(path),
                        "--web.listen-address", "127.0.0.1:0", "--config.file", "/dev/null"],
                       cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert needle in r.stderr and str(path) in r.stderr, r.stderr


# -- default bind ------------------------------------------------------------------------
def _listening(port: int, pid: int | str = "self") -> set[str]:
    """Local addresses listening on ``port`` (IPv4 and IPv6) in the network
    namespace of process ``pid``."""
    out = set()
    for name, fam in ((f"/proc/{pid}/net/tcp", 4), (f"/proc/{pid}/net/tcp6", 6)):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            addr, p = f[1].split(":")
            if int(p, 16) != port or f[3] != "0A":  # 0A: LISTEN
                continue
            raw = bytes.fromhex(addr)
            if fam == 4:
                out.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:
                out.add(socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))
    return out


def test_default_listen_address_is_loopback(tmp_path):
    """With no --web.listen-address it serves on 127.0.0.1:9877 only. In a
    network namespace of its own (a loopback of its own): the port is free
    there whatever this machine runs, an exporter of the user's on :9877 too."""
    assert DEFAULT_LISTEN.startswith("127.0.0.1:")
    assert build_parser().parse_args(["run"]).listen == DEFAULT_LISTEN
    port = int(DEFAULT_LISTEN.rsplit(":", 1)[1])
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare and ip (util-linux, iproute2; .ci/run installs them) are needed for a namespace")
    probe = subprocess.run(["unshare", "-U", "-r", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user and network namespaces here: {probe.stderr.decode(errors='replace').strip()}")
    exp = Daemon(tmp_path, listen="",  # no --web.listen-address at all
                 prefix=["unshare", "-U", "-r", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"'])

    def serving():
        if exp.proc.poll() is not None:
            raise AssertionError(f"exporter exited with {exp.proc.returncode}:\n{exp.log()}")
        return _listening(port, exp.proc.pid)
    exp.ready_check = serving
    try:
        exp.start()
        # /proc/PID/net/tcp is read in pieces, not at one instant: a busy machine's read can miss a row
        assert wait_for(lambda: _listening(port, exp.proc.pid), timeout=5, what="the listener") == {"127.0.0.1"}
        assert exp.port == port  # what it wrote to state_dir/listen-url
    finally:
        exp.stop()


# -- per-session series: cap and expiry -----------------------------------------------
def test_session_series_capped_and_expiring(tmp_path):
    exp = Daemon(tmp_path, config={"metrics": {"max_sessions": 5, "session_ttl_seconds": 4}}).start()
    try:
        sessions = [ClaudeSession(f"capp{i:04d}-0000-4000-8000-000000000001") for i in range(8)]
        for s in sessions:
            write(claude_path(tmp_path, s.sid), s.prompt())
            time.sleep(0.05)  # distinct write times: the newest five are shown
        wait_for(lambda: exp.value("coding_agent_session_series_dropped") == 3, what="3 dropped")

        def shown():
            return {dict(lbls)["session_id"] for (n, lbls), v in exp.metrics().items()
                    if n == "coding_agent_session_state" and v == 1}
        assert shown() == {s.sid for s in sessions[3:]}
        assert exp.value("coding_agent_sessions", provider="claude_code") == 8
        # nothing written for the TTL: every per-session series goes
        wait_for(lambda: not shown(), timeout=15, what="series expired")
        assert exp.value("coding_agent_session_series_dropped") == 0
        assert exp.value("coding_agent_sessions", provider="claude_code") == 0
        write(claude_path(tmp_path, sessions[0].sid), sessions[0].tool_use())
        wait_for(lambda: shown() == {sessions[0].sid}, what="a written session back")
    finally:
        exp.stop()


# -- no transcript content out --------------------------------------------------------
SECRET = "sk-ant-PLANTED-3f9c2a7e-hunter2"


def _claude_with_secret(s: ClaudeSession) -> tuple[bytes, bytes]:
    out = s.prompt(f"please use the key {SECRET}")
    out += s.line(s._base(type="summary", summary=f"title {SECRET}"))
    out += s.line(s._base(type="custom-title", customTitle=SECRET))
    out += s.tool_use(f"curl -H 'x-api-key: {SECRET}'")
    out += s.tool_result(f"200 OK {SECRET}")
    out += s.line(s._base(type="assistant", message={"id": "m-think", "role": "assistant", "model": "x",
                                                     "content": [{"type": "thinking", "thinking": SECRET}]}))
    out += s.line(s._base(type="system", subtype="api_error", error={"message": SECRET}, content=SECRET))
    out += b'{"type":"user","message":{"content":"' + SECRET.encode() + b'"\n'  # malformed
    out += b'{"type":"progress","data":"' + SECRET.encode() * 40_000 + b'"}\n'  # oversized (1 MiB cap here)
    out += b"\x00" + SECRET.encode() + b"\n"
    out += s.text(f"done, the key {SECRET} works") + s.turn_duration()
    return out, s.prompt(SECRET) + s.api_error()


def _codex_with_secret(s: CodexSession) -> tuple[bytes, bytes]:
    out = s.meta() + s.start(f"key {SECRET}") + s.call(f"echo {SECRET}")
    out += s.line("response_item", type="reasoning", summary=[{"type": "summary_text", "text": SECRET}])
    out += s.line("event_msg", type="agent_reasoning", text=SECRET)
    out += s.answer(SECRET) + s.complete(SECRET)
    return out, s.start(SECRET) + s.line("event_msg", type="error", message=f"usage limit {SECRET}",
                                         codex_error_info="usage_limit_exceeded")


def _post_hook(exp, provider: str, body) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/{provider}", data=data, method="POST",
                                 headers=exp.hook_headers())
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize("level,fmt", [("info", "logfmt"), ("debug", "json")])
def test_planted_secret_never_leaves(tmp_path, level, fmt):
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver, extra_args=["--log.level", level, "--log.format", fmt],
                 config={"sources": {"max_line_bytes": 1 << 20}}).start()
    agent = subprocess.Popen(["sleep", "300"])  # a Claude Code process of the session registry
    try:
        cc = ClaudeSession("scrt0000-0000-4000-8000-000000000001")
        cx = CodexSession("0196cccc-0000-7000-8000-000000000001")
        (c1, c2), (x1, x2) = _claude_with_secret(cc), _codex_with_secret(cx)
        write(claude_path(tmp_path, cc.sid), c1)
        write(codex_path(tmp_path, cx.sid), x1)
        exp.wait_state(cc.sid, "completed")
        exp.wait_state(cx.sid, "completed")
        wait_for(lambda: len(alerts_for(receiver, cc.sid)) == 1 and len(alerts_for(receiver, cx.sid)) == 1,
                 what="completed pages for both")
        # The session registry: a title the user typed (``name``), a cwd, and
        # the secrets file beside each record, which is never opened.
        reg = tmp_path / "claude" / "sessions"
        reg.mkdir(parents=True)
        (reg / f"{agent.pid}.0badc0de.key").write_text(SECRET)
        with open(f"/proc/{agent.pid}/stat") as f:
            ticks = f.read().rsplit(")", 1)[1].split()[19]
        record = {"pid": agent.pid, "sessionId": cc.sid, "cwd": f"/home/{SECRET}/proj", "procStart": ticks,
                  "startedAt": int(time.time() * 1000), "version": "2.1.332", "kind": "interactive",
                  "entrypoint": "cli", "name": SECRET, "nameSource": "user", "status": "waiting",
                  "waitingFor": "permission prompt", "statusUpdatedAt": int(time.time() * 1000)}
        (reg / f"{agent.pid}.json").write_text(json.dumps(record))
        # Hook bodies carry prompts, tool input and output, the last answer.
        for prov, sid, path in (("claude_code", cc.sid, claude_path(tmp_path, cc.sid)),
                                ("codex", cx.sid, codex_path(tmp_path, cx.sid))):
            common = {"session_id": sid, "transcript_path": str(path), "cwd": "/home/dev/proj",
                      "permission_mode": "default", "turn_id": "t-secret"}
            for body in ({"hook_event_name": "UserPromptSubmit", "prompt": f"key {SECRET}"},
                         {"hook_event_name": "PermissionRequest", "tool_name": "Bash",
                          "tool_input": {"command": f"curl -H 'x-api-key: {SECRET}'"}}):
                _post_hook(exp, prov, {**common, **body})
            exp.wait_state(sid, "waiting")
        wait_for(lambda: len(alerts_for(receiver, cc.sid)) == 2 and len(alerts_for(receiver, cx.sid)) == 2,
                 what="waiting pages for both")
        pages = [exp.scrape_text("/api/v1/sessions")]  # the status page's JSON, while both wait
        for prov, sid, path in (("claude_code", cc.sid, claude_path(tmp_path, cc.sid)),
                                ("codex", cx.sid, codex_path(tmp_path, cx.sid))):
            common = {"session_id": sid, "transcript_path": str(path), "cwd": "/home/dev/proj", "turn_id": "t-secret"}
            _post_hook(exp, prov, {**common, "hook_event_name": "PostToolUse", "tool_name": "Bash",
                                        "tool_input": {"command": SECRET}, "tool_response": {"stdout": SECRET}})
            _post_hook(exp, prov, {**common, "hook_event_name": "Stop", "stop_hook_active": False,
                                        "last_assistant_message": f"the key {SECRET} works"})
            _post_hook(exp, prov, {**common, "hook_event_name": SECRET, "x": SECRET})
            _post_hook(exp, prov, b'{"session_id": "' + SECRET.encode() + b'", broken')
            exp.wait_state(sid, "completed")
        wait_for(lambda: len(alerts_for(receiver, cc.sid)) == 3 and len(alerts_for(receiver, cx.sid)) == 3,
                 what="completion pages from the Stop hooks")
        time.sleep(0.05)  # the error turn's records come after the hooks (in record time too)
        (_, c2), (_, x2) = _claude_with_secret(cc), _codex_with_secret(cx)
        write(claude_path(tmp_path, cc.sid), c2)
        write(codex_path(tmp_path, cx.sid), x2)
        exp.wait_state(cc.sid, "error")
        exp.wait_state(cx.sid, "error")
        wait_for(lambda: len(alerts_for(receiver, cc.sid)) == 4 and len(alerts_for(receiver, cx.sid)) == 4,
                 what="completed, waiting and error pages for both")
        scrape = exp.scrape_text()
        openmetrics = urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{exp.port}/metrics", headers={"Accept": "application/openmetrics-text"}),
            timeout=5).read().decode()
        landing = exp.scrape_text("/")
        assert exp.value("coding_agent_hook_errors_total", reason="unauthorized") == 0  # every hook was taken
        pages += [exp.scrape_text("/api/v1/sessions"), exp.scrape_text("/api/v1/health")]
        assert all(cc.sid in p and cx.sid in p for p in pages[:2])
        assert exp.value("coding_agent_registry_records") == 1  # the record was read
    finally:
        agent.kill()
        agent.wait()
        exp.stop()
        receiver.close()
    assert SECRET not in scrape and SECRET not in openmetrics and SECRET not in landing
    assert not any(SECRET in p or "hunter2" in p for p in pages), [p for p in pages if SECRET in p][:1]
    assert SECRET not in exp.log(), [line for line in exp.log().splitlines() if SECRET in line][:3]
    # The log did say something about these sessions: each page decision.
    assert exp.log().count("page sent") == len(receiver.messages) >= 4, exp.log()[-3000:]
    bodies = json.dumps(receiver.messages)
    assert SECRET not in bodies
    for f in (tmp_path / "state").iterdir():
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f.name
    assert "hunter2" not in scrape + exp.log() + bodies
    token = (tmp_path / "state" / "hook-secret").read_text().strip()  # the hook secret leaves nowhere either
    assert not any(token in t for t in (scrape, openmetrics, landing, exp.log(), bodies, *pages))


# -- hook routes (issue 22) ------------------------------------------------------------
def _request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """``(status, body)`` of one request with exactly these headers (``Host`` included)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        hdrs = {"Host": f"127.0.0.1:{port}", **(headers or {})}
        if body is not None:
            hdrs["Content-Length"] = str(len(body))
        for k, v in hdrs.items():
            if v is not None:
                conn.putheader(k, v)
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_hook_routes_take_only_what_an_installed_hook_sends(tmp_path):
    """Without the secret, with another content type, from another origin
    or naming another Host: refused (and counted), nothing pages. A hook for
    a transcript that does not exist, names another session or is a
    symlink is dropped. The Host allowlist (``web.allowed_hosts``) works on
    every route, and the secret file is the user's alone."""
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver, config={"web": {"allowed_hosts": ["exporter.lan"]}}).start()
    try:
        secret = tmp_path / "state" / "hook-secret"
        assert secret.stat().st_mode & 0o777 == 0o600 and len(exp.secret()) == 64
        cs = ClaudeSession("a2200000-0000-4000-8000-000000000022")
        path = claude_path(tmp_path, cs.sid)
        write(path, cs.prompt() + cs.tool_use())
        exp.wait_state(cs.sid, "working")
        body = json.dumps({"session_id": cs.sid, "transcript_path": str(path), "cwd": "/home/dev/proj",
                           "hook_event_name": "PermissionRequest", "tool_name": "Bash"}).encode()
        good = exp.hook_headers()
        url = "/hooks/claude_code"
        refusals = [({**good, "X-Coding-Agent-Hook-Token": None}, 401),
                    ({**good, "X-Coding-Agent-Hook-Token": "0" * 64}, 401),
                    ({**good, "Content-Type": "text/plain;charset=UTF-8"}, 415),
                    ({**good, "Content-Type": None}, 415),
                    ({**good, "Origin": "http://evil.example"}, 403),
                    ({**good, "Origin": "null"}, 403),
                    ({**good, "Host": "evil.example"}, 421),
                    ({**good, "Host": f"evil.example:{exp.port}"}, 421)]
        for headers, want in refusals:
            assert _request(exp.port, "POST", url, body, headers)[0] == want, headers
        for where in ("/api/v1/sessions", "/metrics", "/-/healthy", "/"):
            status, text = _request(exp.port, "GET", where, headers={"Host": "rebind.evil.example"})
            assert status == 421 and cs.sid.encode() not in text, where
            for host in ("exporter.lan:9877", f"localhost:{exp.port}", "127.0.0.1", "[::1]:1"):
                assert _request(exp.port, "GET", where, headers={"Host": host})[0] == 200, (where, host)
        time.sleep(1.5)  # past alerts.settle_seconds
        assert receiver.messages == [] and exp.state(cs.sid) == "working"
        assert exp.value("coding_agent_hook_errors_total", reason="unauthorized") == 2
        assert exp.value("coding_agent_hook_errors_total", reason="not_json_content_type") == 2
        assert exp.value("coding_agent_http_requests_refused_total", reason="origin") == 2
        assert exp.value("coding_agent_http_requests_refused_total", reason="host") == 2 + 4

        # hooks that name no transcript of theirs on disk
        other = ClaudeSession("b2200000-0000-4000-8000-000000000022")
        link = claude_path(tmp_path, other.sid)
        link.symlink_to(path)
        for sid, tpath in ((other.sid, path),  # another session's transcript
                           (other.sid, link),  # a symlink named like the session
                           ("c2200000-0000-4000-8000-000000000022",  # a file that does not exist
                            claude_path(tmp_path, "c2200000-0000-4000-8000-000000000022")),
                           (cs.sid, tmp_path / "elsewhere" / f"{cs.sid}.jsonl")):  # not under a root
            forged = json.dumps({"session_id": sid, "transcript_path": str(tpath), "cwd": "/x",
                                 "hook_event_name": "PermissionRequest", "tool_name": "Bash"}).encode()
            assert _request(exp.port, "POST", url, forged, good)[0] == 200
        wait_for(lambda: exp.value("coding_agent_hook_errors_total", reason="unknown_session") == 4,
                 what="four hooks dropped")
        time.sleep(1.5)
        assert receiver.messages == [] and exp.state(cs.sid) == "working"

        # the installed hook's request, same-origin Origin included: taken
        headers = {**good, "Origin": f"http://127.0.0.1:{exp.port}"}
        assert _request(exp.port, "POST", url, body, headers)[0] == 200
        exp.wait_state(cs.sid, "waiting")
        wait_for(lambda: len(receiver.messages) == 1, what="one page")
    finally:
        exp.stop()
        receiver.close()


def test_pages_per_session_are_rate_limited(tmp_path):
    """``alerts.max_pages_per_session`` pages per window at most: a session
    asked for its approval again and again pages twice, the rest counted
    and logged; another session still pages."""
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver,
                 config={"alerts": {"max_pages_per_session": 2, "page_rate_window_seconds": 600}}).start()
    try:
        cs, other = ClaudeSession("a2300000-0000-4000-8000-000000000023"), ClaudeSession(
            "b2300000-0000-4000-8000-000000000023")
        path = claude_path(tmp_path, cs.sid)
        write(path, cs.prompt() + cs.tool_use())
        exp.wait_state(cs.sid, "working")
        for n in range(4):
            common = {"session_id": cs.sid, "transcript_path": str(path), "cwd": "/home/dev/proj",
                      "tool_name": "Bash", "tool_use_id": f"toolu_{n}"}
            assert _post_hook(exp, "claude_code", {**common, "hook_event_name": "PermissionRequest"}) == 200
            exp.wait_state(cs.sid, "waiting")
            time.sleep(1.5)  # past alerts.settle_seconds: it pages (or is refused by the limit)
            assert _post_hook(exp, "claude_code", {**common, "hook_event_name": "PostToolUse",
                                                   "tool_response": {"stdout": ""}}) == 200
            exp.wait_state(cs.sid, "working")
        wait_for(lambda: exp.value("coding_agent_alerts_rate_limited_total", kind="waiting") == 2,
                 what="two pages over the limit")
        assert len(alerts_for(receiver, cs.sid)) == 2
        write(claude_path(tmp_path, other.sid), other.prompt() + other.text() + other.turn_duration())
        wait_for(lambda: len(alerts_for(receiver, other.sid)) == 1, what="the other session's page")
    finally:
        exp.stop()
        receiver.close()
    assert exp.log().count("alerts.max_pages_per_session") == 2
