"""The engine worker process: serves one Engine over the JSON-lines worker protocol on stdin/stdout.

    python -m dflash_qualify.engine.worker --model ds4-mini [--seed 0] [--threads N]
        [--chunk N] [--bands 0|1] [--mmvq-max-ncols N] [--prefix-cache-slots N]
        [--device cpu|cuda]

The first stdout line is a ready record; then one response line per request line (schema:
protocols/worker-protocol.schema.json). stdout carries protocol lines only: file descriptor 1
is re-pointed at stderr so stray prints (Python or C++) land in the log. Options left out
come from the environment (DFLASH_DS4_EXACT_PREFILL_BANDS, LUCE_MMVQ_MAX_NCOLS), as in
the Engine. --device is passed to Engine(device=...) only when it is not "cpu", so a CPU
worker builds its Engine exactly as before the option existed. Exit status: 0 at end of
input, 2 for bad arguments or an engine that fails to start (a ready line with ready=false
and the error says why: e.g. no CUDA build or no GPU).
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
import time
import traceback
from typing import Any, TextIO

PROTOCOL_VERSION = 1
REQUEST_KEYS = {"id", "prompt", "tokens", "max_tokens", "options", "trace"}
OPTION_KEYS = {"chunk", "bands", "mmvq_max_ncols", "mode"}


class BadRequest(ValueError):
    """A request line that does not follow the worker protocol (rid: its id, when readable)."""

    def __init__(self, message: str, rid: Any = None) -> None:
        super().__init__(message)
        self.rid = rid


def _protocol_stream() -> TextIO:
    """Keep the real stdout for protocol lines; point fd 1 (and sys.stdout) at stderr."""
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "w", encoding="utf-8", buffering=1)


def _send(out: TextIO, record: dict[str, Any]) -> None:
    out.write(json.dumps(record, separators=(",", ":")) + "\n")
    out.flush()


def _log(msg: str) -> None:
    print(f"[worker {os.getpid()}] {msg}", file=sys.stderr, flush=True)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dflash_qualify.engine.worker",
                                description="Serve the embedded engine over JSON lines.")
    p.add_argument("--model", default="ds4-mini")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--chunk", type=int, default=None)
    p.add_argument("--bands", choices=("0", "1"), default=None,
                   help="1 = exact prefill bands, 0 = q1; default from the environment")
    p.add_argument("--mmvq-max-ncols", type=int, default=None)
    p.add_argument("--prefix-cache-slots", type=int, default=0)
    p.add_argument("--device", default="cpu",
                   help='where the engine runs: "cpu" (default) or "cuda" (the Engine checks)')
    return p.parse_args(argv)


def _binaries() -> list[dict[str, Any]]:
    """Path and SHA-256 of the compiled engine module(s) this worker loaded."""
    out, seen = [], set()
    for name, mod in sorted(sys.modules.items()):
        path = getattr(mod, "__file__", None) or ""
        if name.startswith("dflash_qualify.engine") and path.endswith((".so", ".pyd")) \
                and path not in seen:
            seen.add(path)
            try:
                with open(path, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
            except OSError:
                digest = None
            out.append({"module": name, "path": path, "sha256": digest})
    return out


def parse_request(line: str) -> dict[str, Any]:
    """Validate one request line; returns {"id", "prompt" (str|list[int]), "max_tokens", "options"}."""
    try:
        req = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"request is not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(req, dict):
        raise BadRequest("request is not a JSON object")
    rid = req.get("id")
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise BadRequest("id must be a string or an integer")
    try:
        return _check_request(req, rid)
    except BadRequest as exc:
        raise BadRequest(str(exc), rid) from None


def _check_request(req: dict[str, Any], rid: Any) -> dict[str, Any]:
    unknown = set(req) - REQUEST_KEYS
    if unknown:
        raise BadRequest(f"unknown request keys: {', '.join(sorted(unknown))}")
    if ("prompt" in req) == ("tokens" in req):
        raise BadRequest("give exactly one of prompt (text) or tokens (ids)")
    if "prompt" in req:
        prompt = req["prompt"]
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string")
    else:
        prompt = req["tokens"]
        if not isinstance(prompt, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise BadRequest("tokens must be a list of integers")
    max_tokens = req.get("max_tokens", 16)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("max_tokens must be an integer >= 1")
    options = req.get("options", {})
    if not isinstance(options, dict):
        raise BadRequest("options must be an object")
    bad = set(options) - OPTION_KEYS
    if bad:
        raise BadRequest(f"unknown options: {', '.join(sorted(bad))}")
    trace = req.get("trace")
    if trace is not None and not isinstance(trace, dict):
        raise BadRequest("trace must be an object")
    return {"id": rid, "prompt": prompt, "max_tokens": max_tokens, "options": options, "trace": trace}


def response_record(rid: Any, gen: Any) -> dict[str, Any]:
    """The wire response for one Generation."""
    data = bytes(gen.text)
    t = dict(gen.timings)
    timings = {k: v for k, v in t.items() if k not in ("prefill_ns", "decode_ns")}
    timings["prompt_tokens"] = int(t.get("prompt_tokens", getattr(gen, "prompt_tokens", 0)))
    timings["generated_tokens"] = int(t.get("generated_tokens", len(gen.tokens)))
    timings["prefill_ms"] = t["prefill_ns"] / 1e6
    timings["decode_ms"] = t["decode_ns"] / 1e6
    timings["cache_hits"] = int(t.get("cache_hits", 0))
    record: dict[str, Any] = {"id": rid, "response_b64": base64.b64encode(data).decode("ascii"),
                              "tokens": [int(x) for x in gen.tokens], "timings": timings}
    try:
        record["text"] = data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return record


def _traced_record(engine: Any, req: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Run one request with trace capture; the trace goes to the file the request names."""
    from .trace import traced_generate

    out, summary = traced_generate(engine, req["prompt"], max_tokens=req["max_tokens"], trace=req["trace"],
                                   request_id=req["id"], **kwargs)
    return {"id": req["id"], "response_b64": base64.b64encode(out["text"]).decode("ascii"),
            "tokens": out["tokens"], "trace": summary,
            "timings": {"prompt_tokens": out["prompt_tokens"], "generated_tokens": len(out["tokens"]),
                        "prefill_ms": 0.0, "decode_ms": 0.0, "cache_hits": 0, "stop": out["stop"]}}


def _error(rid: Any, kind: str, message: str) -> dict[str, Any]:
    return {"id": rid, "error": {"type": kind, "message": message}}


def serve(engine: Any, lines: Any, out: TextIO) -> int:
    """Answer request lines until end of input; returns the number of requests served."""
    from . import EngineError

    served = 0
    for line in lines:
        if not line.strip():
            continue
        rid = None
        try:
            req = parse_request(line)
            rid = req["id"]
            opts = req["options"]
            kwargs = {k: opts[k] for k in ("chunk", "mmvq_max_ncols", "mode") if k in opts}
            if "bands" in opts:
                kwargs["bands"] = bool(opts["bands"])
            t0 = time.perf_counter_ns()
            if req["trace"] is not None:  # trace capture (engine/trace.py); off unless asked
                record = _traced_record(engine, req, kwargs)
            else:
                gen = engine.generate(req["prompt"], max_tokens=req["max_tokens"], **kwargs)
                record = response_record(rid, gen)
            record["timings"]["worker_ms"] = (time.perf_counter_ns() - t0) / 1e6
        except BadRequest as exc:
            record = _error(exc.rid, "BadRequest", str(exc))
        except (EngineError, ValueError, TypeError) as exc:
            record = _error(rid, type(exc).__name__, str(exc))
        except MemoryError:
            record = _error(rid, "MemoryError", "out of memory")
        except Exception as exc:  # an engine bug: report it for this request, keep serving
            _log(f"request {rid!r} raised {type(exc).__name__}: {exc}")
            record = _error(rid, type(exc).__name__, str(exc) or "(no message)")
        _send(out, record)
        served += 1
    return served


def main(argv: list[str] | None = None) -> int:
    out = _protocol_stream()
    args = _parse_args(argv)
    from . import Engine, EngineError

    kwargs: dict[str, Any] = {"prefix_cache_slots": args.prefix_cache_slots}
    if args.bands is not None:
        kwargs["bands"] = args.bands == "1"
    if args.chunk is not None:
        kwargs["chunk"] = args.chunk
    if args.mmvq_max_ncols is not None:
        kwargs["mmvq_max_ncols"] = args.mmvq_max_ncols
    if args.device != "cpu":
        kwargs["device"] = args.device
    named = {"device": args.device} if args.device != "cpu" else {}  # in the ready line
    t0 = time.perf_counter()
    try:
        engine = Engine(model=args.model, seed=args.seed, threads=args.threads, **kwargs)
    except Exception as exc:  # EngineError, or e.g. a CUDA runtime error: a ready=false line
        if not isinstance(exc, (EngineError, ValueError, TypeError)):
            _log("".join(traceback.format_exception(exc)).rstrip())
        where = f" on device {args.device}" if named else ""
        _log(f"cannot start the engine{where}: {type(exc).__name__}: {exc}")
        _send(out, {"ready": False, **named,
                    "error": {"type": type(exc).__name__, "message": str(exc) or "(no message)"}})
        return 2
    _log(f"model {args.model} ready in {time.perf_counter() - t0:.2f} s; "
         f"config {engine.config_hash}")
    _send(out, {"ready": True, "protocol_version": PROTOCOL_VERSION, "pid": os.getpid(),
                **named, "engine": engine.build_info(), "model": engine.config,
                "config_hash": engine.config_hash, "binaries": _binaries()})
    served = serve(engine, sys.stdin, out)
    _log(f"end of input after {served} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
