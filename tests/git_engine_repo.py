"""A throwaway git repository holding a tiny worker-protocol engine in two commits (for build tests).

Commit `main` (tagged `slow`) sleeps SLOW_MS per prompt during prefill; branch `fast` changes
only that constant to FAST_MS. The engine times its own prefill with a monotonic clock (a real
measurement of the sleep, not a number it makes up) and answers the same bytes in both commits.
The build command copies engine.py to out/engine.py and counts its runs in the cache
(BUILD_COUNT file beside the worktree), so tests can see that a cached build ran nothing.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SLOW_MS, FAST_MS = 30.0, 6.0

ENGINE = '''\
import base64, json, os, sys, time
PREFILL_SLEEP_MS = {ms}
print(json.dumps({{"ready": True, "protocol_version": 1, "pid": os.getpid()}}), flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    req = json.loads(line)
    prompt = req.get("prompt") or ""
    t0 = time.perf_counter()
    time.sleep(PREFILL_SLEEP_MS / 1e3)
    prefill_ms = (time.perf_counter() - t0) * 1e3
    out = bytes(ord("a") + (len(prompt) + 7 * i * i) % 26 for i in range(req.get("max_tokens", 8)))
    print(json.dumps({{"id": req["id"], "response_b64": base64.b64encode(out).decode(),
                      "timings": {{"prompt_tokens": len(prompt.encode()), "prefill_ms": prefill_ms,
                                  "generated_tokens": len(out), "decode_ms": 0.1,
                                  "cache_hits": 0}}}}), flush=True)
'''

# the build: copy the engine to out/, and count builds in <worktree>/../BUILD_COUNT
BUILD_COMMAND = [sys.executable, "-c",
                 "import os, pathlib, shutil; os.makedirs('out', exist_ok=True); "
                 "shutil.copy('engine.py', 'out/engine.py'); "
                 "c = pathlib.Path('..') / 'BUILD_COUNT'; "
                 "c.write_text(str(int(c.read_text() or 0) + 1) if c.exists() else '1')"]
ARTIFACTS = ["out/engine.py"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(path: Path) -> dict[str, str]:
    """Create the repository at path; returns {"slow": commit, "fast": commit}."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@example.invalid")
    git(path, "config", "user.name", "test")
    (path / "engine.py").write_text(ENGINE.format(ms=SLOW_MS))
    git(path, "add", "engine.py")
    git(path, "commit", "-q", "-m", "engine: slow prefill")
    git(path, "tag", "slow")
    slow = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "-b", "fast")
    (path / "engine.py").write_text(ENGINE.format(ms=FAST_MS))
    git(path, "commit", "-q", "-am", "engine: faster prefill")
    fast = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "main")
    return {"slow": slow, "fast": fast}
