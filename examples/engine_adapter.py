#!/usr/bin/env python3
"""Example adapter: turns an engine binary that prints text on stdout into a worker-protocol process.

    engine_adapter.py [--] ENGINE_COMMAND [ARGS...]

The worker protocol (protocols/worker-protocol.schema.json) is JSON lines: the harness writes
one request per line on our stdin, we answer a ready line first and then one response (or
error) line per request on stdout; logs go to stderr. For each request this adapter runs

    ENGINE_COMMAND ARGS... -n MAX_TOKENS [--OPTION VALUE ...]   (prompt text on its stdin)

takes the engine's stdout bytes as the response (hashed as they are) and reads the engine's
own timings from the llama.cpp-style lines it prints on stderr:

    ... prompt eval time = <ms> ms / <n> tokens ...   -> prefill_ms, prompt_tokens
    ...        eval time = <ms> ms / <n> runs ...     -> decode_ms, generated_tokens

Request options (the protocol arm's `engine` table, e.g. chunk = 4) become `--chunk 4`.
Adapt the command line and the two regular expressions to your engine; keep everything else.
A binary that keeps a model loaded between prompts would be driven through its own
server or REPL instead; spawning per request is the simplest correct shape.
"""
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

PROMPT_RE = re.compile(rb"prompt eval time =\s*([0-9.]+) ms /\s*([0-9]+) tokens")
EVAL_RE = re.compile(rb"(?<!prompt )eval time =\s*([0-9.]+) ms /\s*([0-9]+) runs")


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def sha256_of(program: str) -> dict:
    path = shutil.which(program) or program
    try:
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        digest = None
    return {"module": "engine", "path": os.path.abspath(path), "sha256": digest}


def run_engine(engine: list[str], request: dict) -> dict:
    """One request -> one response record (or raise ValueError with a one-line reason)."""
    if "prompt" not in request:
        raise ValueError("this engine takes text prompts only (no token ids)")
    argv = engine + ["-n", str(request.get("max_tokens", 16))]
    for name, value in sorted((request.get("options") or {}).items()):
        argv += [f"--{name}", str(int(value) if isinstance(value, bool) else value)]
    t0 = time.perf_counter()
    done = subprocess.run(argv, input=request["prompt"].encode("utf-8"),
                          capture_output=True, timeout=600)
    worker_ms = (time.perf_counter() - t0) * 1e3
    sys.stderr.buffer.write(done.stderr)   # the engine's log becomes the arm's log
    if done.returncode != 0:
        raise ValueError(f"engine exited with code {done.returncode}")
    prompt, evals = PROMPT_RE.search(done.stderr), EVAL_RE.search(done.stderr)
    if prompt is None or evals is None:
        raise ValueError("engine printed no 'prompt eval time' / 'eval time' lines")
    record = {"id": request["id"], "response_b64": base64.b64encode(done.stdout).decode("ascii"),
              "timings": {"prompt_tokens": int(prompt.group(2)),
                          "prefill_ms": float(prompt.group(1)),
                          "generated_tokens": int(evals.group(2)),
                          "decode_ms": float(evals.group(1)),
                          "cache_hits": 0,        # a fresh engine process per request
                          "worker_ms": worker_ms}}
    try:
        record["text"] = done.stdout.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return record


def main(argv: list[str]) -> int:
    engine = argv[1:] if argv[:1] == ["--"] else argv
    if not engine:
        emit({"ready": False, "error": {"type": "UsageError",
                                        "message": "usage: engine_adapter.py [--] ENGINE_COMMAND..."}})
        return 2
    emit({"ready": True, "protocol_version": 1, "pid": os.getpid(),
          "engine": {"command": engine}, "model": None, "config_hash": None,
          "binaries": [sha256_of(p) for p in engine if os.path.isfile(p) or shutil.which(p)]})
    for line in sys.stdin:   # end of stdin: the harness is done with this arm
        if not line.strip():
            continue
        request: dict = {}
        try:
            request = json.loads(line)
            emit(run_engine(engine, request))
        except (ValueError, KeyError, subprocess.SubprocessError, OSError) as exc:
            emit({"id": request.get("id"), "error": {"type": type(exc).__name__,
                                                     "message": str(exc)}})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
