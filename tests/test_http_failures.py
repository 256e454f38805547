"""HTTP target failures are named, never hang, exit 3 with .partial evidence and leave no process:
a server that cannot start, exits at start, never becomes healthy, answers 4xx/5xx, non-JSON,
no timings, resets the connection, truncates a stream, or never answers."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflash_qualify.harness.cli import main

# A scripted server on the stdlib: BAD_MODE picks the failure; it writes its pid (and the pid
# of a child it keeps in its process group) to PID_FILE so the test can check cleanup.
BAD_SERVER = r'''
import json, os, socket, struct, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode = os.environ["BAD_MODE"]
port = int(sys.argv[sys.argv.index("--port") + 1])
child = subprocess.Popen(["sleep", "300"])          # shares our process group
with open(os.environ["PID_FILE"], "w") as fh:
    fh.write(f"{os.getpid()} {child.pid}")
print(f"bad server mode {mode} on port {port}", file=sys.stderr, flush=True)
if mode == "exit":
    print("fatal: cannot load model /models/missing.gguf", file=sys.stderr, flush=True)
    child.kill()
    sys.exit(7)

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.send(503 if mode == "unhealthy" else 200, {"status": "ok"})
        else:
            self.send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        open(os.environ["PID_FILE"] + ".post", "w").close()
        if mode == "500":
            self.send(500, {"error": {"code": 500, "message": "boom: out of memory",
                                      "type": "server_error"}})
        elif mode == "404":
            self.send(404, b"File Not Found", "text/plain")
        elif mode == "nonjson":
            self.send(200, b"<html>proxy error</html>", "text/html")
        elif mode == "notimings":
            self.send(200, {"content": "abc", "tokens": [1, 2, 3], "stop": True})
        elif mode == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
        elif mode == "truncated":       # an SSE stream that stops before data: [DONE]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"choices": [{"text": "a", "index": 0}]}\n\n')
            self.wfile.flush()
            self.close_connection = True
        elif mode == "hang":
            time.sleep(300)

    def log_message(self, fmt, *args):
        print(fmt % args, file=sys.stderr, flush=True)

ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''

PROTOCOL = """\
schema_version = 1
kind = "bracket"
name = "bad-server"
[target]
kind = "{kind}"
command = {command}
model = "m"
start_timeout_s = {start}
[measure]
warmups = 1
measured = 2
request_timeout_s = 1.5
[[prompts]]
id = "p"
text = "hello"
[[arms]]
id = "A"
role = "reference"
env = {{ BAD_MODE = "{mode}", PID_FILE = "{pid_file}" }}
[[arms]]
id = "cand"
role = "candidate"
env = {{ BAD_MODE = "{mode}", PID_FILE = "{pid_file}" }}
"""


def alive(pid: int) -> bool:
    """True while pid is a live (non-zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def run_bad(tmp_path: Path, mode: str, kind: str = "llamacpp", start: float = 20,
            command: list[str] | None = None):
    script = tmp_path / "bad_server.py"
    script.write_text(BAD_SERVER)
    pid_file = tmp_path / "pids"
    command = command or [sys.executable, str(script), "--port", "{port}"]
    path = tmp_path / "bad.toml"
    path.write_text(PROTOCOL.format(kind=kind, command=json.dumps(command), start=start,
                                    mode=mode, pid_file=pid_file))
    t0 = time.monotonic()
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(tmp_path / "ev")])
    elapsed = time.monotonic() - t0
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output and elapsed < 60
    (d,) = list((tmp_path / "ev").iterdir())
    assert d.name.endswith(".partial") and str(d) in result.output
    assert (d / "INCOMPLETE").read_text().startswith("failed: arm A: ")
    assert not (d / "manifest.json").exists()
    if pid_file.exists():
        pids = [int(x) for x in pid_file.read_text().split()]
        assert pids and not any(alive(p) for p in pids), pids
        assert (d / "logs" / "A.log").read_text().startswith(f"bad server mode {mode}")
    return result.output.replace("\n", " "), d


def test_server_program_missing(tmp_path):
    out, _ = run_bad(tmp_path, "ok", command=["/nonexistent/llama-server", "--port", "{port}"])
    assert "arm A: server did not start: /nonexistent/llama-server: No such file" in out


def test_server_exits_at_start(tmp_path):
    out, d = run_bad(tmp_path, "exit")
    assert "arm A: server exited at start before http://127.0.0.1:" in out
    assert "(exit code 7; last log line: fatal: cannot load model /models/missing.gguf)" in out
    assert "exit code 7" in (d / "logs" / "A.log").read_text()


def test_server_never_healthy(tmp_path):
    out, _ = run_bad(tmp_path, "unhealthy", start=1.5)
    assert "arm A: health timeout: GET http://127.0.0.1:" in out
    assert "/health did not answer 200 within 1.5 s (last: HTTP 503)" in out


@pytest.mark.parametrize("kind, mode, message", [
    ("llamacpp", "500", "request A-0: HTTP 500 from POST /completion: boom: out of memory"),
    ("openai", "500", "request A-0: HTTP 500 from POST /v1/completions: boom: out of memory"),
    ("llamacpp", "404", "request A-0: HTTP 404 from POST /completion: File Not Found"),
    ("llamacpp", "nonjson", "request A-0: malformed JSON from POST /completion (HTTP 200, "
                            "text/html): '<html>proxy error</html>'"),
    ("openai", "nonjson", "request A-0: malformed stream: POST /v1/completions answered "
                          "text/html, not text/event-stream"),
    ("llamacpp", "notimings", "request A-0: missing timings: the /completion response has no "
                              "timings object"),
    ("llamacpp", "reset", "connection reset: the server at http://127.0.0.1:"),
    ("openai", "reset", "connection reset: the server at http://127.0.0.1:"),
    ("openai", "truncated", "request A-0: connection reset: the stream ended before "
                            "data: [DONE]"),
    ("llamacpp", "hang", "request timeout: no complete answer from http://127.0.0.1:"),
])
def test_request_failures_are_named(tmp_path, kind, mode, message):
    out, d = run_bad(tmp_path, mode, kind=kind)
    assert message in out, out
    assert message in (d / "INCOMPLETE").read_text().replace("\n", " ")
    if mode == "hang":
        assert "within 1.5 s waiting for the response to request A-0" in out
    assert not (d / "samples.jsonl").exists() or not (d / "samples.jsonl").read_text()
    assert "client teardown error" not in (d / "logs" / "A.log").read_text()


def test_sigint_during_a_request_stops_the_server(tmp_path):
    script = tmp_path / "bad_server.py"
    script.write_text(BAD_SERVER)
    pid_file = tmp_path / "pids"
    path = tmp_path / "bad.toml"
    path.write_text(PROTOCOL.format(kind="llamacpp", start=20, mode="hang", pid_file=pid_file,
                                    command=json.dumps([sys.executable, str(script), "--port",
                                                        "{port}"])).replace(
        "request_timeout_s = 1.5", "request_timeout_s = 120"))
    exe = str(Path(sys.executable).parent / "dflash-qualify")
    proc = subprocess.Popen([exe, "run", str(path), "--out", str(tmp_path / "ev")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not Path(f"{pid_file}.post").exists():   # the request is in flight
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, out + err
    assert "interrupted (SIGINT)" in err and "Traceback" not in err
    (d,) = list((tmp_path / "ev").iterdir())
    assert (d / "INCOMPLETE").read_text() == "interrupted: SIGINT"
    pids = [int(x) for x in pid_file.read_text().split()]
    assert not any(alive(p) for p in pids), pids

