"""A target that runs one worker process per arm and speaks the JSON-lines worker protocol to it.

The embedded engine is served by ``python -m dflash_qualify.engine.worker``; any program that
speaks protocols/worker-protocol.schema.json can be driven the same way. The process gets a
fresh environment built from ours plus the arm's env (None unsets), its own session (process
group) so teardown can reach every child, and stderr into a temporary log file. Reads never
block without a timeout: a reader thread feeds stdout lines into a queue.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from ..errors import UsageError
from .base import Request, Response, Target, TargetError

GRACE_S = 5.0        # after closing stdin, how long the worker may take to exit by itself
TERM_GRACE_S = 3.0   # after SIGTERM, before SIGKILL
LOG_TAIL = 300       # characters of the worker's stderr quoted in a failure reason
POLL_S = 0.25        # while waiting for a line, how often to check that the worker still runs
EXIT_DRAIN_S = 0.5   # after the worker exited, how long its last lines may take to be read


def arm_environment(base: dict[str, str], arm_env: dict[str, str | None]) -> dict[str, str]:
    """The worker's environment: ``base`` with the arm's variables applied (None unsets)."""
    env = dict(base)
    for key, value in arm_env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def embedded_argv(target: dict[str, Any], arm: dict[str, Any]) -> list[str]:
    """Command line of the embedded engine worker for one arm of a resolved protocol."""
    argv = [sys.executable, "-m", "dflash_qualify.engine.worker",
            "--model", str(target["model"]), "--seed", str(target["seed"]),
            "--prefix-cache-slots", str(target.get("prefix_cache_slots", 0))]
    if target.get("threads") is not None:
        argv += ["--threads", str(target["threads"])]
    if target.get("device", "cpu") != "cpu":  # a cpu worker's command line is unchanged
        argv += ["--device", str(target["device"])]
    engine = arm.get("engine", {})
    if "bands" in engine:
        argv += ["--bands", "1" if engine["bands"] else "0"]
    if "chunk" in engine:
        argv += ["--chunk", str(engine["chunk"])]
    if "mmvq_max_ncols" in engine:
        argv += ["--mmvq-max-ncols", str(engine["mmvq_max_ncols"])]
    return argv


def resolve_pin_cpu(pin: int | str | None) -> int | None:
    """The CPU a protocol's [target] pin_cpu names on this machine: "auto" is the highest CPU
    this process may use (CPU 0 takes most interrupts); a number must be one of those CPUs."""
    if pin is None or not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if pin == "auto":
        return allowed[-1]
    if pin not in allowed:
        raise UsageError(f"CPU {pin} is not available to this process (allowed: "
                         f"{', '.join(map(str, allowed))})", field="target.pin_cpu")
    return int(pin)


class WorkerTarget(Target):
    """One worker process for one arm."""

    def __init__(self, arm_id: str, argv: list[str], arm_env: dict[str, str | None], *,
                 start_timeout_s: float, base_env: dict[str, str] | None = None,
                 pin_cpu: int | None = None) -> None:
        self.arm_id = arm_id
        self.pin_cpu = pin_cpu
        self.argv = list(argv)
        self.arm_env = dict(arm_env)
        self.env = arm_environment(dict(os.environ) if base_env is None else base_env, arm_env)
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._log_text: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def prepare(self) -> dict[str, Any]:
        self._log = tempfile.TemporaryFile(prefix=f"dflash-worker-{self.arm_id}-")
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                env=self.env, start_new_session=True, close_fds=True)
        except OSError as exc:
            raise TargetError(f"arm {self.arm_id}: worker did not start: "
                              f"{self.argv[0]}: {exc.strerror}") from None
        affinity = self._pin()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True,
                                        name=f"worker-{self.arm_id}-stdout")
        self._reader.start()
        ready = self._next_record(self.start_timeout_s, "the ready line")
        if ready.get("ready") is False and isinstance(ready.get("error"), dict):
            err = ready["error"]
            device = ready.get("device")
            where = f" on device {device}" if isinstance(device, str) and device != "cpu" else ""
            raise TargetError(f"arm {self.arm_id}: the worker could not start the engine{where}: "
                              f"{err.get('type', 'Error')}: {_clip(str(err.get('message')))}")
        if ready.get("ready") is not True:
            raise TargetError(f"arm {self.arm_id}: worker's first line is not a ready record: "
                              f"{_clip(json.dumps(ready))}")
        return {"command": list(self.argv), "env": dict(self.arm_env),
                "pid": self.proc.pid,
                "engine_build": ready.get("engine") or {},
                "model": ready.get("model") or {},
                "config_hash": ready.get("config_hash"),
                "binaries": ready.get("binaries"),
                "cpu_affinity": affinity}

    def _pin(self) -> list[int] | None:
        """Pins the fresh worker (before it starts any thread; threads inherit) to pin_cpu;
        returns the CPUs it may run on, as the kernel reports them (None: not Linux)."""
        assert self.proc is not None
        if not hasattr(os, "sched_setaffinity"):
            return None
        try:
            if self.pin_cpu is not None:
                os.sched_setaffinity(self.proc.pid, {self.pin_cpu})
            return sorted(os.sched_getaffinity(self.proc.pid))
        except OSError as exc:
            if self.pin_cpu is None:
                return None
            raise TargetError(f"arm {self.arm_id}: could not pin the worker to CPU "
                              f"{self.pin_cpu}: {exc.strerror}") from None

    def run_once(self, request: Request) -> Response:
        if self.proc is None or self.proc.stdin is None:
            raise TargetError(f"arm {self.arm_id}: run_once before prepare")
        wire: dict[str, Any] = {"id": request.id, "max_tokens": request.max_tokens,
                                "options": dict(request.options)}
        if request.tokens is not None:
            wire["tokens"] = list(request.tokens)
        else:
            wire["prompt"] = request.text
        if request.trace is not None:
            wire["trace"] = dict(request.trace)
        try:
            self.proc.stdin.write(json.dumps(wire).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise TargetError(f"arm {self.arm_id}: worker died before request {request.id}"
                              f"{self._exit_note()}") from None
        record = self._next_record(request.timeout_s, f"the response to request {request.id}")
        return parse_response(record, request.id, self.arm_id)

    def teardown(self) -> str:
        if self._log_text is not None:
            return self._log_text
        proc = self.proc
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:
                pass
            if not _wait(proc, GRACE_S):
                _signal_group(proc, signal.SIGTERM)
                if not _wait(proc, TERM_GRACE_S):
                    _signal_group(proc, signal.SIGKILL)
                    _wait(proc, None)
            # children of the worker share its process group; make sure none outlive it
            _signal_group(proc, signal.SIGKILL)
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        if proc is not None and proc.stdout is not None and (
                self._reader is None or not self._reader.is_alive()):
            proc.stdout.close()
        self._log_text = self._read_log()
        if self._log is not None:
            self._log.close()
        return self._log_text

    def kill(self) -> None:
        """Immediate SIGKILL of the worker's process group (interrupt path)."""
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGKILL)

    # ------------------------------------------------------------------ internals
    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        finally:
            self._lines.put(None)

    def _next_line(self, timeout_s: float) -> bytes | None:
        """The next stdout line (None at EOF). A worker that exited counts as EOF even when a
        child it left behind still holds the pipe open. Raises queue.Empty on timeout."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            left = deadline - time.monotonic()
            try:
                return self._lines.get(timeout=max(min(left, POLL_S), 0.0))
            except queue.Empty:
                if self.proc is not None and self.proc.poll() is not None:
                    try:  # whatever it wrote before exiting is already in the pipe
                        return self._lines.get(timeout=EXIT_DRAIN_S)
                    except queue.Empty:
                        return None
                if left <= POLL_S:
                    raise

    def _next_record(self, timeout_s: float, what: str) -> dict[str, Any]:
        try:
            line = self._next_line(timeout_s)
        except queue.Empty:
            raise TargetError(f"arm {self.arm_id}: timed out after {timeout_s:g} s waiting "
                              f"for {what}") from None
        if line is None:
            self._lines.put(None)  # stay at EOF for later reads
            raise TargetError(f"arm {self.arm_id}: worker exited before {what}"
                              f"{self._exit_note()}")
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise TargetError(f"arm {self.arm_id}: worker printed a line that is not JSON "
                              f"while we waited for {what}: "
                              f"{_clip(line.decode('utf-8', 'replace').strip())!r}") from None
        if not isinstance(record, dict):
            raise TargetError(f"arm {self.arm_id}: worker printed JSON that is not an object "
                              f"while we waited for {what}")
        return record

    def _exit_note(self) -> str:
        code = None
        if self.proc is not None:
            _wait(self.proc, 1.0)
            code = self.proc.returncode
        tail = self._read_log().strip().splitlines()
        last = f"; last log line: {_clip(tail[-1])}" if tail else ""
        return (f" (exit code {code}{last})" if code is not None else f"{last}")

    def _read_log(self) -> str:
        if self._log is None or self._log.closed:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")


def parse_response(record: dict[str, Any], request_id: str, arm_id: str) -> Response:
    """Check one worker response record and turn it into a Response (TargetError if bad)."""
    where = f"arm {arm_id}: request {request_id}"
    if record.get("id") != request_id:
        raise TargetError(f"{where}: response carries id {record.get('id')!r}")
    if "error" in record:
        err = record["error"] if isinstance(record["error"], dict) else {}
        raise TargetError(f"{where}: engine error {err.get('type', 'Error')}: "
                          f"{_clip(str(err.get('message', record['error'])))}")
    try:
        data = base64.b64decode(record["response_b64"], validate=True)
    except (KeyError, TypeError, binascii.Error):
        raise TargetError(f"{where}: bad output: response_b64 missing or not base64") from None
    timings = record.get("timings")
    if not isinstance(timings, dict):
        raise TargetError(f"{where}: bad output: timings missing")

    def need(key: str, kind: type | tuple) -> Any:
        value = timings.get(key)
        if isinstance(value, bool) or not isinstance(value, kind) or (
                isinstance(value, (int, float)) and value < 0):
            raise TargetError(f"{where}: bad output: timings.{key} missing or invalid "
                              f"({value!r})")
        return value

    tokens = record.get("tokens")
    if tokens is not None and not (isinstance(tokens, list)
                                   and all(isinstance(t, int) for t in tokens)):
        raise TargetError(f"{where}: bad output: tokens is not a list of integers")
    prompt_tokens = need("prompt_tokens", int)
    prefill_ms = float(need("prefill_ms", (int, float)))
    decode_ms = float(need("decode_ms", (int, float)))
    cache_hits = need("cache_hits", int)
    generated = timings.get("generated_tokens", len(tokens) if tokens is not None else None)
    if not isinstance(generated, int):
        raise TargetError(f"{where}: bad output: generated_tokens unknown")
    widths = timings.get("band_widths")
    wb = [timings.get(k) for k in ("weight_bytes_prefill", "weight_bytes_decode")]
    weight_bytes = sum(wb) if all(isinstance(v, int) for v in wb) else timings.get("weight_bytes")
    return Response(data=data, prompt_tokens=prompt_tokens, generated_tokens=generated,
                    prefill_ms=prefill_ms, decode_ms=decode_ms, cache_hits=cache_hits,
                    tokens=tokens, band_widths=widths if isinstance(widths, dict) else None,
                    weight_bytes=weight_bytes if isinstance(weight_bytes, int) else None,
                    timings=timings,
                    trace=record["trace"] if isinstance(record.get("trace"), dict) else None)


def _wait(proc: subprocess.Popen, timeout: float | None) -> bool:
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _clip(text: str, n: int = LOG_TAIL) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
