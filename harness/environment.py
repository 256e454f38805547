"""Environment capture for evidence (host, CPU, OS, Python, packages, git, env) with secret redaction.

Anything whose variable name looks like a token, key, secret, password or credential is
recorded as "<redacted>"; `secret_values` lists those values, and the evidence writer
(harness/evidence/writer.py) scrubs them from every byte it writes, so a secret never reaches
an evidence file. Capture is best effort: a fact that cannot be read is
recorded as null, never an error.
"""
from __future__ import annotations

import copy
import datetime as _dt
import importlib.metadata
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import gpu as gpu_mod

REDACTED = "<redacted>"
# env var name prefixes/names worth recording for a performance run
RELEVANT_PREFIXES = ("DFLASH_", "LUCE_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_",
                     "GGML_", "LLAMA_", "CUDA_", "HIP_", "MALLOC_", "GLIBC_TUNABLES")
RELEVANT_NAMES = ("PYTHONHASHSEED", "PYTHONOPTIMIZE", "PYTHONMALLOC", "LD_PRELOAD",
                  "LD_LIBRARY_PATH", "TZ")
# environment.json history:
#   1 - first version; `gpu` = [{"name", "driver_version", "clocks.sm", ...}] as nvidia-smi's
#       strings (with units), or null.
#   2 - `gpu` is a snapshot {"source", "read_utc", "gpus" (typed, nounits), "reason"} (harness/
#       gpu.py) or null; arms[id].gpu = per-visit before/after snapshots on cuda targets, else
#       null. Readers accept both.
VERSION = 2
PACKAGES = ("dflash-qualify", "click", "numpy", "pandas", "scipy", "rich", "pybind11",
            "scikit-build-core")
# a name component that marks a secret (split on non-alphanumerics, upper-cased)
_SECRET_PARTS = {"TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD",
                 "PASS", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "CREDS", "KEY", "KEYS",
                 "APIKEY", "AUTH", "AUTHORIZATION", "COOKIE", "PRIVATE", "SIGNATURE", "PAT"}
_SECRET_SUBSTRINGS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "APIKEY",
                      "API_KEY", "PRIVATEKEY", "PRIVATE_KEY", "ACCESSKEY", "ACCESS_KEY")


def is_secret_name(name: str) -> bool:
    """True when an env var name looks like it holds a token, key, secret, password or credential."""
    upper = name.upper()
    if any(s in upper for s in _SECRET_SUBSTRINGS):
        return True
    return any(part in _SECRET_PARTS for part in re.split(r"[^A-Z0-9]+", upper) if part)


def redact_env(env: dict[str, str | None]) -> dict[str, str | None]:
    """A copy of ``env`` with secret-looking values replaced by "<redacted>" (None kept: unset)."""
    return {k: (REDACTED if v is not None and is_secret_name(k) else v) for k, v in env.items()}


def relevant_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The harness process's env vars that can affect performance, redacted."""
    environ = dict(os.environ) if environ is None else environ
    keep = {k: v for k, v in environ.items()
            if k.startswith(RELEVANT_PREFIXES) or k in RELEVANT_NAMES}
    return dict(sorted(redact_env(keep).items()))


def secret_values(protocol: dict[str, Any], environ: dict[str, str] | None = None) -> list[str]:
    """Every secret value this run could leak: secret-named arm env values and process env values."""
    environ = dict(os.environ) if environ is None else environ
    values = {v for k, v in environ.items() if v and is_secret_name(k)}
    for arm in protocol.get("arms", []):
        values |= {v for k, v in arm.get("env", {}).items() if v and is_secret_name(k)}
    # longest first so a secret that contains another is scrubbed whole
    return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


def redact_protocol(protocol: dict[str, Any]) -> dict[str, Any]:
    """The resolved protocol with secret-looking arm env values redacted (for protocol.json)."""
    out = copy.deepcopy(protocol)
    for arm in out.get("arms", []):
        arm["env"] = redact_env(arm.get("env", {}))
    return out


def redact_bytes(data: bytes, secrets: list[str]) -> bytes:
    """``data`` with every occurrence of each secret value replaced by "<redacted>"."""
    for value in secrets:
        data = data.replace(value.encode("utf-8"), REDACTED.encode())
    return data


def redact_text(text: str, secrets: list[str]) -> str:
    """``text`` with every occurrence of each secret value replaced by "<redacted>"."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text


def redact_strings(obj: Any, secrets: list[str]) -> Any:
    """A copy of a JSON-ready object with secret values scrubbed from every string in it."""
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {redact_text(k, secrets) if isinstance(k, str) else k: redact_strings(v, secrets)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_strings(v, secrets) for v in obj]
    return obj


# ---------------------------------------------------------------------- facts

def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_info() -> dict[str, Any]:
    """CPU model, flags, logical CPU count, frequency governor and load average."""
    model, flags, mhz = None, [], None
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if model is None and key in ("model name", "Hardware", "cpu model"):
            model = value.strip()
        if mhz is None and key == "cpu MHz":
            try:
                mhz = float(value)
            except ValueError:
                pass
        if not flags and key in ("flags", "Features"):
            flags = sorted(value.split())
    if model is None:
        model = platform.processor() or None
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"model": model, "flags": " ".join(flags), "logical_cpus": os.cpu_count(),
            "usable_cpus": affinity, "mhz": mhz,
            "governor": governor.strip() if governor else None, "load": load}


def gpu_info(protocol: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The run's GPU snapshot (harness/gpu.py): read when nvidia-smi is on PATH or the target
    runs on cuda (then a missing nvidia-smi is recorded with its reason); None otherwise."""
    if shutil.which(gpu_mod.EXE) is None and target_device(protocol or {}) != "cuda":
        return None
    return gpu_mod.read()


def target_device(protocol: dict[str, Any]) -> str:
    """Where the protocol's engine runs: "cpu" (the default) or "cuda" ([target] device)."""
    target = protocol.get("target") if isinstance(protocol.get("target"), dict) else {}
    return target.get("device") or "cpu"


def memory_info() -> dict[str, Any]:
    """Total and available memory in bytes (from /proc/meminfo when present)."""
    out: dict[str, Any] = {"total_bytes": None, "available_bytes": None}
    for line in (_read("/proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if key in ("MemTotal", "MemAvailable") and parts and parts[0].isdigit():
            out["total_bytes" if key == "MemTotal" else "available_bytes"] = int(parts[0]) * 1024
    return out


def package_versions() -> dict[str, str | None]:
    """Installed versions of the tool and the libraries whose behaviour a run depends on."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_info(directory: str | Path) -> dict[str, Any] | None:
    """SHA and dirty flag of the git work tree holding ``directory``, or None outside one."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None:
        return None
    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"root": top, "sha": sha, "dirty": bool(status) if status is not None else None}


def capture(protocol: dict[str, Any], *, invocation: str) -> dict[str, Any]:
    """The environment record written when a run starts (finish() completes it)."""
    tool_dir = Path(__file__).resolve().parent
    gpu = gpu_info(protocol)
    warnings = list(protocol.get("warnings", []))
    if target_device(protocol) == "cuda" and gpu is not None and gpu["gpus"] is None:
        warnings.append(f"the target runs on cuda but the GPU (name, driver, clocks, power "
                        f"limit) is not recorded: {gpu['reason']}")
    return {
        "schema": "dflash-qualify.environment", "version": VERSION,
        "invocation": invocation,
        "tool_version": package_versions().get("dflash-qualify"),
        "started_utc": _utc_now(), "finished_utc": None,
        "host": socket.gethostname(),
        "cpu": cpu_info(), "gpu": gpu, "memory": memory_info(),
        "os": {"system": platform.system(), "release": platform.release(),
               "version": platform.version(), "machine": platform.machine(),
               "platform": platform.platform()},
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "packages": package_versions(),
        "engine_build": None,
        "git": {"cwd": git_info(Path.cwd()), "tool": git_info(tool_dir)},
        "env": relevant_env(),
        "target": dict(protocol.get("target", {})),
        "warnings": warnings,
        "arms": {},
    }


def finish(record: dict[str, Any], protocol: dict[str, Any],
           arm_info: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Complete the record after the arms ran: per-arm env, command, engine build, GPU state
    before/after each visit (cuda targets); end time."""
    out = dict(record)
    cuda = target_device(protocol) == "cuda"
    arms = {}
    builds = []
    for arm in protocol.get("arms", []):
        info = arm_info.get(arm["id"], {})
        command = info.get("command")
        arms[arm["id"]] = {
            "env": redact_env(arm.get("env", {})),
            "engine_args": dict(arm.get("engine", {})),
            "command": shlex.join(command) if command else None,
            "engine_build": info.get("engine_build"),
            "model": info.get("model"),
            "config_hash": info.get("config_hash"),
            "binaries": info.get("binaries"),
            "start_s": info.get("start_s"),
            "gpu": info.get("gpu") if cuda else None,
            # CPUs the arm's worker process could run on (pinned: one; [target] pin_cpu)
            "cpu_affinity": info.get("cpu_affinity"),
        }
        if info.get("url"):  # HTTP targets: the server's base URL for this arm
            arms[arm["id"]]["url"] = info["url"]
        if info.get("engine_build") is not None:
            builds.append(info["engine_build"])
    out["arms"] = arms
    out["warnings"] = _gpu_warnings(list(record.get("warnings") or []), arms)
    out["engine_build"] = builds[0] if builds else None
    out["engine_build_same_in_all_arms"] = all(b == builds[0] for b in builds) if builds else None
    out["finished_utc"] = _utc_now()
    out["load_at_finish"] = cpu_info()["load"]
    return out


def _gpu_warnings(warnings: list[str], arms: dict[str, dict[str, Any]]) -> list[str]:
    """``warnings`` plus one line per distinct reason a per-arm GPU reading failed or was
    incomplete (a reason the run's warnings already give is not repeated)."""
    failed: dict[str, list[str]] = {}
    for arm_id, arm in arms.items():
        for visit in arm.get("gpu") or []:
            for when in ("before", "after"):
                snap = visit.get(when) if isinstance(visit, dict) else None
                reason = snap.get("reason") if isinstance(snap, dict) else None
                if reason and arm_id not in failed.setdefault(reason, []):
                    failed[reason].append(arm_id)
    for reason, ids in failed.items():
        if not any(w.endswith(reason) for w in warnings):
            warnings.append(f"GPU state around arm(s) {', '.join(ids)} not fully read: {reason}")
    return warnings


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
