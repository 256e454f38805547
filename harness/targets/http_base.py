"""Shared lifecycle of HTTP targets: a server started per arm (or attached to), health wait, stop.

`ServerProcess` starts one arm's server from a command template with ``{port}`` and ``{host}``
filled in (a free loopback port), in its own process group with stdout and stderr in a log
file, and stops it with SIGTERM, then SIGKILL to the whole group. `HttpTarget` owns a private
asyncio loop and one aiohttp ClientSession (a new connection per request, so a stale
keep-alive socket is never mistaken for a reset); subclasses build and parse requests
(llamacpp.py, openai.py). Every failure is an `HttpFailure` whose message names its reason:
server did not start, server exited at start, health timeout, HTTP <status>, malformed JSON,
missing timings, malformed stream, connection reset, connection refused, request timeout.
"""
from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

import aiohttp

from .base import Request, Response, Target, TargetError
from .worker import arm_environment

LOOPBACK = "127.0.0.1"
TERM_GRACE_S = 10.0      # after SIGTERM, before SIGKILL (our serve drains for up to 5 s)
HEALTH_POLL_S = 0.1      # between health probes
HEALTH_PROBE_S = 2.0     # one health probe's own timeout
IDENTITY_TIMEOUT_S = 10.0  # best-effort GET /props etc. after the server is healthy
CLIP = 300               # characters of a body or log line quoted in a failure reason
DEFAULT_SAMPLING = {"temperature": 0}  # greedy decoding unless extra_body says otherwise


class HttpFailure(TargetError):
    """A named HTTP-target failure; ``code`` is the reason as an identifier (e.g. health_timeout)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody listens on right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def fill(text: str, host: str, port: int) -> str:
    """A template string with {host} and {port} filled in (other braces stay as they are)."""
    return text.replace("{host}", host).replace("{port}", str(port))


def file_sha256(program: str, path_env: str | None) -> dict[str, Any]:
    """{"module": "server program", "path", "sha256"} of a command's program (sha256 None if unreadable)."""
    found = shutil.which(program, path=path_env) or program
    digest = None
    try:
        h = hashlib.sha256()
        with open(found, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        digest = h.hexdigest()
    except OSError:
        pass
    return {"module": "server program", "path": os.path.abspath(found), "sha256": digest}


def clip(text: str, n: int = CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


class ServerProcess:
    """One arm's server process: start from a template, report an early exit, stop and keep the log."""

    def __init__(self, arm_id: str, template: list[str], arm_env: dict[str, str | None], *,
                 base_env: dict[str, str] | None = None, host: str = LOOPBACK) -> None:
        self.arm_id = arm_id
        self.host = host
        self.port = free_port(host)
        self.argv = [fill(part, host, self.port) for part in template]
        env = {k: (None if v is None else fill(v, host, self.port)) for k, v in arm_env.items()}
        self.env = arm_environment(dict(os.environ) if base_env is None else base_env, env)
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._log_text: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self._log = tempfile.TemporaryFile(prefix=f"dflash-server-{self.arm_id}-")
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True, close_fds=True)
        except OSError as exc:
            raise HttpFailure("server_did_not_start",
                              f"arm {self.arm_id}: server did not start: {self.argv[0]}: "
                              f"{exc.strerror}") from None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def exit_note(self) -> str:
        """' (exit code N; last log line: ...)' once the server has exited, else ''."""
        code = self.exit_code()
        if code is None:
            return ""
        tail = self.log_text().strip().splitlines()
        last = f"; last log line: {clip(tail[-1])}" if tail else ""
        return f" (exit code {code}{last})"

    def log_text(self) -> str:
        if self._log_text is not None:
            return self._log_text
        if self._log is None or self._log.closed:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def kill(self) -> None:
        """Immediate SIGKILL of the server's process group (failure and interrupt path)."""
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGKILL)

    def stop(self) -> str:
        """SIGTERM the process group, SIGKILL after TERM_GRACE_S, reap; returns the log (idempotent)."""
        if self._log_text is not None:
            return self._log_text
        proc = self.proc
        if proc is not None:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=TERM_GRACE_S)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
            _signal_group(proc, signal.SIGKILL)  # children in its group must not outlive it
        text = self.log_text()
        if proc is not None:
            text += f"[dflash-qualify] server pid {proc.pid} exit code {proc.returncode}\n"
        self._log_text = text
        if self._log is not None:
            self._log.close()
        return text


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class HttpTarget(Target):
    """One arm's HTTP server: started from a command template (per arm) or attached by URL.

    Subclasses implement ``_request`` (one generation) and may extend ``_identity``.
    """

    def __init__(self, arm_id: str, *, command: list[str] | None, url: str | None,
                 env: dict[str, str | None], health_path: str, start_timeout_s: float,
                 extra_body: dict[str, Any] | None = None, model: str | None = None,
                 cache_cold: bool = True, base_env: dict[str, str] | None = None) -> None:
        if (command is None) == (url is None):
            raise ValueError("exactly one of command and url")
        self.arm_id = arm_id
        self.template = list(command) if command else None
        self.attach_url = url
        self.arm_env = dict(env)
        self.base_env = base_env
        self.health_path = health_path
        self.start_timeout_s = start_timeout_s
        self.extra_body = dict(extra_body or {})
        self.model = model
        self.cache_cold = cache_cold
        self.server: ServerProcess | None = None
        self.base_url = url or ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._client_log: list[str] = []
        self._log_text: str | None = None

    # ------------------------------------------------------------------ Target
    def prepare(self) -> dict[str, Any]:
        self._loop = asyncio.new_event_loop()
        if self.template is not None:
            self.server = ServerProcess(self.arm_id, self.template, self.arm_env,
                                        base_env=self.base_env)
            self.base_url = self.server.url
            self.server.start()
        self._loop.run_until_complete(self._open())
        self._loop.run_until_complete(self._wait_healthy())
        return self._call(self._identity(), IDENTITY_TIMEOUT_S + self.start_timeout_s,
                          "the server's identity")

    def run_once(self, request: Request) -> Response:
        if self._session is None:
            raise TargetError(f"arm {self.arm_id}: run_once before prepare")
        return self._call(self._request(request), request.timeout_s,
                          f"the response to request {request.id}")

    def teardown(self) -> str:
        if self._log_text is not None:
            return self._log_text
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                if self._session is not None:
                    loop.run_until_complete(self._close())
                loop.run_until_complete(loop.shutdown_asyncgens())
            except BaseException as exc:  # noqa: BLE001 - teardown never raises; the server is next
                self._note(f"client teardown error: {type(exc).__name__}: {exc}")
            finally:
                loop.close()
        if self.server is not None:
            text = self.server.stop()
        else:
            text = (f"[dflash-qualify] attached to {self.base_url}: the server was started "
                    "outside the harness; its log is not available here\n")
        self._log_text = text + "".join(self._client_log)
        return self._log_text

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()

    # ------------------------------------------------------------------ subclass hooks
    async def _request(self, request: Request) -> Response:
        raise NotImplementedError

    async def _identity(self) -> dict[str, Any]:
        """Facts for environment.json: command, env, url, engine build, model, binaries.

        Best effort: GET /props (llama.cpp's server, and `dflash-qualify serve`, which adds a
        ``dflash`` block with the build, model config, config hash and core binary SHA-256).
        """
        props = await self._get_json_quiet("/props")
        dflash = props.get("dflash") if isinstance(props.get("dflash"), dict) else {}
        build: dict[str, Any] | None = None
        model: dict[str, Any] | None = None
        if dflash:
            build, model = dflash.get("build_info"), dflash.get("config")
        elif props:
            build = {k: props[k] for k in ("build_info", "model_path", "total_slots")
                     if k in props} or None
            model = {k: props[k] for k in ("model_alias", "model_path") if k in props} or None
        binaries = []
        if self.server is not None:
            binaries.append(file_sha256(self.server.argv[0], self.server.env.get("PATH")))
        if isinstance(dflash.get("binaries"), list):
            binaries += dflash["binaries"]
        return {"command": list(self.server.argv) if self.server else None,
                "env": dict(self.arm_env), "url": self.base_url,
                "pid": self.server.proc.pid if self.server and self.server.proc else None,
                "engine_build": build, "model": model,
                "config_hash": dflash.get("config_hash"), "binaries": binaries or None}

    # ------------------------------------------------------------------ helpers
    def fail(self, code: str, text: str) -> HttpFailure:
        """An HttpFailure for this arm; the server's exit code and last log line if it died."""
        note = self.server.exit_note() if self.server is not None else ""
        return HttpFailure(code, f"arm {self.arm_id}: {text}{note}")

    def body(self, fields: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        """Request JSON: greedy sampling, then extra_body, then the arm's engine options, then ours."""
        return {**DEFAULT_SAMPLING, **self.extra_body, **options, **fields}

    async def _open(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True),
            timeout=aiohttp.ClientTimeout(total=None))

    async def _close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
            await asyncio.sleep(0)  # let the connector's transports finish closing

    def _call(self, coro: Any, timeout_s: float, what: str) -> Any:
        """Run a coroutine on this target's loop, turning client errors into named failures."""
        assert self._loop is not None
        try:
            return self._loop.run_until_complete(asyncio.wait_for(coro, max(timeout_s, 1e-3)))
        except asyncio.TimeoutError:
            raise self.fail("request_timeout", f"request timeout: no complete answer from "
                            f"{self.base_url} within {timeout_s:g} s waiting for {what}") from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                ConnectionResetError, BrokenPipeError) as exc:
            raise self.fail("connection_reset", f"connection reset: the server at {self.base_url}"
                            f" closed the connection while we waited for {what} "
                            f"({type(exc).__name__})") from None
        except aiohttp.ClientConnectorError as exc:
            raise self.fail("connection_refused", f"connection refused: cannot connect to "
                            f"{self.base_url} ({clip(str(exc.os_error))})") from None
        except aiohttp.ClientOSError as exc:
            if exc.errno in (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED):
                raise self.fail("connection_reset", f"connection reset: the server at "
                                f"{self.base_url} reset the connection while we waited for "
                                f"{what}") from None
            raise self.fail("connection_error", f"connection error talking to {self.base_url}: "
                            f"{clip(str(exc))}") from None
        except aiohttp.ClientError as exc:
            raise self.fail("client_error", f"HTTP client error talking to {self.base_url}: "
                            f"{type(exc).__name__}: {clip(str(exc))}") from None

    async def _wait_healthy(self) -> None:
        url = self.base_url + self.health_path
        deadline = time.monotonic() + self.start_timeout_s
        last = "no answer yet"
        assert self._session is not None
        while True:
            if self.server is not None and self.server.exit_code() is not None:
                raise self.fail("server_exited", f"server exited at start before {url} "
                                f"answered 200: {' '.join(self.server.argv)[:CLIP]}")
            probe = min(HEALTH_PROBE_S, max(deadline - time.monotonic(), 0.05))
            try:
                async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=probe)) as r:
                    await r.read()
                    if r.status == 200:
                        self._note(f"GET {self.health_path} -> 200 (healthy)")
                        return
                    last = f"HTTP {r.status}"
            except aiohttp.ClientConnectorError:
                last = "connection refused"
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                last = type(exc).__name__
            if time.monotonic() >= deadline:
                raise self.fail("health_timeout", f"health timeout: GET {url} did not answer 200 "
                                f"within {self.start_timeout_s:g} s (last: {last})")
            await asyncio.sleep(HEALTH_POLL_S)

    async def _get_json_quiet(self, path: str) -> dict[str, Any]:
        """GET a JSON object for the record; {} on any failure (never fails the run)."""
        assert self._session is not None
        try:
            async with self._session.get(self.base_url + path,
                                         timeout=aiohttp.ClientTimeout(total=5.0)) as r:
                raw = await r.read()
                if r.status != 200:
                    self._note(f"GET {path} -> {r.status} (not recorded)")
                    return {}
            body = json.loads(raw)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    async def post_json(self, path: str, body: dict[str, Any], request_id: str
                        ) -> dict[str, Any]:
        """POST a JSON body and return the JSON object answered (named failures otherwise)."""
        assert self._session is not None
        async with self._session.post(self.base_url + path, json=body) as r:
            raw = await r.read()
            status, ctype = r.status, r.headers.get("Content-Type", "")
        self._note(f"POST {path} ({request_id}) -> {status}, {len(raw)} bytes")
        if status >= 400:
            raise self.http_error(status, path, raw, request_id)
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise self.fail("malformed_json", f"request {request_id}: malformed JSON from POST "
                            f"{path} (HTTP {status}, {ctype or 'no content type'}): "
                            f"{clip(raw.decode('utf-8', 'replace'), 120)!r}") from None
        if not isinstance(data, dict):
            raise self.fail("malformed_json", f"request {request_id}: malformed JSON from POST "
                            f"{path}: expected an object, got {type(data).__name__}")
        return data

    def http_error(self, status: int, path: str, raw: bytes, request_id: str) -> HttpFailure:
        """HTTP 4xx/5xx: the server's own error message when it sent one (OpenAI/llama.cpp shape)."""
        message = raw.decode("utf-8", "replace")
        try:
            err = json.loads(raw).get("error")
            message = err.get("message", message) if isinstance(err, dict) else str(err)
        except (ValueError, AttributeError):
            pass
        return self.fail("http_error", f"request {request_id}: HTTP {status} from POST {path}: "
                         f"{clip(message) or '(empty body)'}")

    def _note(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        self._client_log.append(f"[dflash-qualify {stamp}Z] {line}\n")
