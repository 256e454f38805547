"""Soak `dflash-qualify serve`: sequential and concurrent requests, errors, identical bytes, RSS.

    python bench/harness/soak_serve.py [--requests 2000] [--clients 4] [--model ds4-tiny]

Starts the server (its own process group, port 0), sends --warmup requests, reads the
server's VmRSS from /proc/<pid>/status, then --requests sequential requests and --requests
more from --clients concurrent clients (llama.cpp POST /completion, cache_prompt false, the
same prompt every time). Every response's exact bytes (dflash.content_b64) must equal the
first one's; any HTTP error, timeout or different response is counted. Bounded: each request
has a timeout and the whole soak a deadline. Prints one JSON summary line; exit 0 when there
were no errors, all responses were identical and RSS grew less than --max-rss-growth-pct
after warm-up, else 1. tests/test_soak.py runs a short version.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROMPT = "The lighthouse keeper kept a ledger of every ship that passed the point."
START_S = 120.0    # server start until /health answers 200
REQUEST_S = 60.0   # one request
STOP_S = 10.0      # SIGTERM grace before SIGKILL


def rss_kib(pid: int) -> int:
    """VmRSS of a live process in KiB (from /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Server:
    """`dflash-qualify serve` in its own process group on a free port; stderr to a file."""

    def __init__(self, model: str, threads: int, log_dir: Path) -> None:
        exe = str(Path(sys.executable).parent / "dflash-qualify")
        self.log_path = log_dir / "serve.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [exe, "serve", "--model", model, "--port", "0", "--threads", str(threads)],
            stdout=subprocess.DEVNULL, stderr=self._log, start_new_session=True)
        self.port = 0
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log()}")
            if not self.port:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log())
                self.port = int(m.group(1)) if m else 0
            else:
                try:
                    if self.request("GET", "/health")[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server not healthy within {START_S:g} s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_S)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def stop(self) -> int:
        """SIGTERM the process group, SIGKILL after STOP_S; returns the exit code."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # nothing of its group may outlive it
        except ProcessLookupError:
            pass
        self._log.close()
        return self.proc.returncode


class Tally:
    """Thread-safe counts: requests, errors (first few kept), distinct response bytes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.errors: list[str] = []
        self.error_count = 0
        self.responses: dict[bytes, int] = {}

    def one(self, server: Server, max_tokens: int) -> None:
        try:
            status, raw = server.request("POST", "/completion", {
                "prompt": PROMPT, "n_predict": max_tokens, "cache_prompt": False})
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {raw[:200]!r}")
            data = base64.b64decode(json.loads(raw)["dflash"]["content_b64"])
            error = None
        except Exception as exc:  # noqa: BLE001 - every failure is counted, the soak goes on
            data, error = None, f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.requests += 1
            if error is not None:
                self.error_count += 1
                if len(self.errors) < 5:
                    self.errors.append(error)
            else:
                self.responses[data] = self.responses.get(data, 0) + 1


def soak(*, requests: int, clients: int, warmup: int, model: str, threads: int,
         max_tokens: int, deadline_s: float, log_dir: Path) -> dict:
    """Run the soak; returns the summary (see the module docstring)."""
    server = Server(model, threads, log_dir)
    tally = Tally()
    end = time.monotonic() + deadline_s
    timed_out = False
    try:
        pid = server.proc.pid
        for _ in range(warmup):
            tally.one(server, max_tokens)
        rss_start = rss_kib(pid)
        t0 = time.monotonic()
        for _ in range(requests):                      # sequential
            if time.monotonic() > end:
                timed_out = True
                break
            tally.one(server, max_tokens)
        sequential_s = time.monotonic() - t0
        rss_sequential = rss_kib(pid)
        t0 = time.monotonic()

        def client(n: int) -> None:
            for _ in range(n):
                if time.monotonic() > end:
                    return
                tally.one(server, max_tokens)

        share = [requests // clients + (1 if i < requests % clients else 0) for i in range(clients)]
        with ThreadPoolExecutor(clients) as pool:      # concurrent
            list(pool.map(client, share))
        concurrent_s = time.monotonic() - t0
        timed_out = timed_out or time.monotonic() > end
        rss_end = rss_kib(pid)
        alive = server.proc.poll() is None
    finally:
        code = server.stop()
    expected = warmup + 2 * requests
    growth = (rss_end - rss_start) / rss_start * 100.0
    return {
        "model": model, "threads": threads, "max_tokens": max_tokens, "clients": clients,
        "requests": tally.requests, "expected_requests": expected,
        "warmup": warmup, "sequential": requests, "concurrent": requests,
        "errors": tally.error_count, "first_errors": tally.errors,
        "distinct_responses": len(tally.responses), "identical": len(tally.responses) == 1,
        "rss_kib_after_warmup": rss_start, "rss_kib_after_sequential": rss_sequential,
        "rss_kib_end": rss_end, "rss_growth_pct": round(growth, 3),
        "sequential_s": round(sequential_s, 3), "concurrent_s": round(concurrent_s, 3),
        "server_alive_at_end": alive, "server_exit_code": code, "timed_out": timed_out,
    }


def verdict(summary: dict, max_growth_pct: float) -> list[str]:
    """Why the soak failed (empty: it passed)."""
    why = []
    if summary["timed_out"] or summary["requests"] != summary["expected_requests"]:
        why.append(f"{summary['requests']} of {summary['expected_requests']} requests ran")
    if summary["errors"]:
        why.append(f"{summary['errors']} errors, first: {summary['first_errors']}")
    if not summary["identical"]:
        why.append(f"{summary['distinct_responses']} distinct responses (expected 1)")
    if summary["rss_growth_pct"] >= max_growth_pct:
        why.append(f"RSS grew {summary['rss_growth_pct']}% after warm-up "
                   f"(limit {max_growth_pct}%)")
    if not summary["server_alive_at_end"]:
        why.append("the server died during the soak")
    return why


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=2000, help="sequential requests, and the "
                   "same number again from the concurrent clients")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--model", default="ds4-tiny")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--max-rss-growth-pct", type=float, default=5.0)
    p.add_argument("--deadline-s", type=float, default=3600.0, help="bound on the whole soak")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dflash-soak-") as tmp:
        summary = soak(requests=args.requests, clients=args.clients, warmup=args.warmup,
                       model=args.model, threads=args.threads, max_tokens=args.max_tokens,
                       deadline_s=args.deadline_s, log_dir=Path(tmp))
    why = verdict(summary, args.max_rss_growth_pct)
    summary["passed"] = not why
    summary["failures"] = why
    print(json.dumps(summary, sort_keys=True))
    return 0 if not why else 1


if __name__ == "__main__":
    sys.exit(main())
