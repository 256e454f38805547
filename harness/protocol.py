"""Qualification protocols: load a TOML file (path or bundled name), validate it, resolve it.

The schema (version 1) is documented in protocols/README.md. Validation is strict: unknown
keys are errors so a typo never passes silently, and every error is one line naming the
file, the key path (e.g. ``arms[1].env.LUCE_MMVQ_MAX_NCOLS``), what was expected and what
was found. The resolved protocol is a plain dict (see docs/evidence-format.md,
protocol.json) with prompts inlined, so evidence never depends on files outside itself.
"""
from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import schedule as schedule_mod
from .errors import UsageError

# Schema history:
#   1 — first version: bracket and compare kinds, embedded target, [[prompts]], [[arms]].
SCHEMA_VERSION = 1

KINDS = ("bracket", "compare")
TARGET_KINDS = ("embedded", "command", "llamacpp", "openai")
HTTP_KINDS = ("llamacpp", "openai")     # HTTP servers: started per arm (command) or attached (url)
# what an HTTP target's prefill_ms / decode_ms mean (protocol.json target.timing, the report)
HTTP_TIMING = {
    "llamacpp": "server-reported: prefill_ms = timings.prompt_ms, decode_ms = timings.predicted_ms "
                "(llama.cpp /completion)",
    "openai": "client-side TTFT: prefill_ms = time from sending the request to the first streamed "
              "token, measured by the harness (includes HTTP and queueing); decode_ms = the rest "
              "of the stream",
}
# request fields an HTTP target sets itself (extra_body may not override them)
HTTP_RESERVED = {"llamacpp": ("prompt", "n_predict", "stream", "cache_prompt", "return_tokens"),
                 "openai": ("prompt", "max_tokens", "stream", "stream_options", "model")}
# metric -> direction (which way is better)
METRICS = {"prefill_tok_s": "higher", "prefill_ms": "lower", "decode_tok_s": "higher",
           "total_ms": "lower"}
DEFAULT_METRIC = {"bracket": "prefill_tok_s", "compare": "prefill_ms"}
CACHE_POLICIES = ("cold", "allow")
ROLES = ("reference", "candidate")
MODES = ("exact", "approximate")
DEFAULT_PROTOCOL = "exact-bands-aba"
DEVICES = ("cpu", "cuda")   # [target] device of embedded/command targets
CORPUS = "prompts/corpus.txt"  # bundled text that `length = N` prompts are cut from

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class LoadedProtocol:
    """A validated protocol: the resolved dict, the file's original bytes and where it came from."""

    resolved: dict[str, Any]
    source_bytes: bytes
    path: str


# --------------------------------------------------------------------------- type helpers

def _describe(value: object) -> str:
    """A TOML-flavoured description of a found value, for error messages."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"string {text!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    return type(value).__name__


class _Checker:
    """Walks one protocol document and raises UsageError at the first problem."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, expected: str, value: object = None, *, found: str | None = None):
        what = found if found is not None else _describe(value)
        raise UsageError(f"expected {expected}, found {what}", file=self.file, field=path)

    def table(self, doc: dict, path: str, allowed: set[str], required: set[str] = frozenset()):
        for key in doc:
            if key not in allowed:
                where = _join(path, key)
                hint = ", ".join(sorted(allowed))
                raise UsageError(f"unknown key (allowed here: {hint})", file=self.file, field=where)
        for key in sorted(required):
            if key not in doc:
                where = _join(path, key)
                raise UsageError("missing required key", file=self.file, field=where)

    def sub_table(self, doc: dict, key: str, path: str) -> dict:
        value = doc.get(key, {})
        if not isinstance(value, dict):
            self.fail(path, "a table", value)
        return value

    def string(self, value, path, *, choices=None, pattern=None, nonempty=True) -> str:
        if not isinstance(value, str):
            self.fail(path, "a string" if not choices else _one_of(choices), value)
        if choices and value not in choices:
            self.fail(path, _one_of(choices), value)
        if nonempty and not value:
            self.fail(path, "a non-empty string", value)
        if pattern is not None and not pattern.fullmatch(value):
            self.fail(path, "an id of letters, digits, '_', '-', '.' (at most 32)", value)
        return value

    def integer(self, value, path, *, lo=None, hi=None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, _range_text("an integer", lo, hi), value)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.fail(path, _range_text("an integer", lo, hi), value)
        return value

    def number(self, value, path, *, lo=None, hi=None, lo_open=False, hi_open=False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, _range_text("a number", lo, hi), value)
        bad_lo = lo is not None and (value <= lo if lo_open else value < lo)
        bad_hi = hi is not None and (value >= hi if hi_open else value > hi)
        if bad_lo or bad_hi or value != value:
            lo_s = f"> {lo}" if lo_open else f">= {lo}"
            hi_s = f"< {hi}" if hi_open else f"<= {hi}"
            bounds = " and ".join(b for b, v in ((lo_s, lo), (hi_s, hi)) if v is not None)
            self.fail(path, f"a number {bounds}", value)
        return float(value)

    def boolean(self, value, path) -> bool:
        if not isinstance(value, bool):
            self.fail(path, "a boolean (true or false)", value)
        return value


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _join(path: str, key: object) -> str:
    """A key path as TOML writes it: bare keys plain, anything else quoted (one line)."""
    text = str(key)
    part = text if _BARE_KEY.fullmatch(text) else json.dumps(text)  # fullmatch: "$" admits "0\n"
    return f"{path}.{part}" if path else part


def _one_of(choices) -> str:
    return "one of " + ", ".join(f'"{c}"' for c in choices)


def _range_text(kind: str, lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"{kind} from {lo} to {hi}"
    if lo is not None:
        return f"{kind} >= {lo}"
    if hi is not None:
        return f"{kind} <= {hi}"
    return kind


# --------------------------------------------------------------------------- locating files

def bundled_dir() -> Path:
    """The directory holding the bundled protocols (the dflash_qualify.protocols package)."""
    return Path(str(importlib.resources.files("dflash_qualify.protocols")))


def bundled_names() -> list[str]:
    """Names of the bundled protocols, e.g. ['exact-bands-aba', ...]."""
    return sorted(p.stem for p in bundled_dir().glob("*.toml"))


def locate(spec: str | None) -> tuple[Path, bool]:
    """Resolve PROTOCOL (a path or a bundled name) to a file; returns (path, is_bundled)."""
    spec = spec or DEFAULT_PROTOCOL
    candidate = Path(spec)
    # os.path answers False for names the OS refuses (too long, NUL); Path.exists raises.
    if candidate.suffix == ".toml" or "/" in spec or os.path.exists(candidate):
        if not os.path.isfile(candidate):
            raise UsageError("no such protocol file", file=spec)
        return candidate, False
    bundled = bundled_dir() / f"{spec}.toml"
    if os.path.isfile(bundled):
        return bundled, True
    names = ", ".join(bundled_names()) or "none"
    raise UsageError(f"unknown protocol {spec!r}: not a file and not a bundled protocol "
                     f"(bundled: {names})")


# --------------------------------------------------------------------------- loading

def load(spec: str | None = None, *, warmups: int | None = None,
         measured: int | None = None) -> LoadedProtocol:
    """Load, validate and resolve a protocol; CLI overrides apply to every arm and are recorded."""
    path, bundled = locate(spec)
    display = f"{path.name} (bundled)" if bundled else str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read: {exc.strerror}", file=display) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"not UTF-8 text (byte {exc.start})", file=display) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"TOML syntax error: {exc}", file=display) from None
    resolved = resolve(doc, file=display, base_dir=path.parent)
    resolved["source"] = {"file": path.name if bundled else str(path), "bundled": bundled,
                          "sha256": hashlib.sha256(raw).hexdigest()}
    overrides = {}
    ck = _Checker("command line")
    if warmups is not None:
        overrides["warmups"] = ck.integer(warmups, "--warmups", lo=0, hi=100000)
    if measured is not None:
        overrides["measured"] = ck.integer(measured, "--measured", lo=1, hi=100000)
    for arm in resolved["arms"]:
        arm.update(overrides)
    resolved["overrides"] = overrides
    problem = schedule_mod.check(resolved)
    if problem:
        raise UsageError(problem, file=display, field="schedule")
    return LoadedProtocol(resolved=resolved, source_bytes=raw, path=str(path))


def resolve(doc: dict, *, file: str, base_dir: Path) -> dict[str, Any]:
    """Validate a parsed TOML document and return the resolved protocol dict."""
    ck = _Checker(file)
    if doc.get("kind") == "exactness":  # harness/exactness_protocol.py loads these
        raise UsageError("an exactness protocol: run it with `dflash-qualify exactness`", file=file, field="kind")
    ck.table(doc, "", {"schema_version", "kind", "name", "description", "target", "measure",
                       "prompts", "gate", "arms", "schedule", "exactness"},
             {"schema_version", "kind", "name", "arms", "prompts"})
    version = ck.integer(doc["schema_version"], "schema_version")
    if version != SCHEMA_VERSION:
        ck.fail("schema_version", f"{SCHEMA_VERSION} (the only version this tool reads)", version)
    kind = ck.string(doc["kind"], "kind", choices=KINDS)
    name = ck.string(doc["name"], "name", pattern=re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"))
    description = ck.string(doc.get("description", ""), "description", nonempty=False)

    target = _target(ck, ck.sub_table(doc, "target", "target"))
    measure = _measure(ck, ck.sub_table(doc, "measure", "measure"), kind)
    prompts = _prompts(ck, doc["prompts"], kind, base_dir)
    gate = _gate(ck, ck.sub_table(doc, "gate", "gate"), kind)
    arms = _arms(ck, doc["arms"], kind, measure, target["kind"])
    schedule, schedule_plan = _schedule(ck, doc.get("schedule"), arms, kind)
    if measure["sequential"] and schedule_plan["kind"] != "interleaved":
        ck.fail("schedule", '"interleaved" with measure.sequential = true (each block starts '
                'fresh workers in a shuffled order and interleaves their rounds)',
                schedule_plan["kind"])
    warnings = _http_checks(ck, doc, target, arms, measure)
    _expand_commands(target, arms, base_dir)
    if measure["cache"] == "cold" and target["prefix_cache_slots"] > 0:
        ck.fail("target.prefix_cache_slots", '0 when measure.cache = "cold"',
                target["prefix_cache_slots"])

    extra = {}
    if "exactness" in doc:  # also prove tensor-level exactness (an exactness protocol, run by `run`)
        ex = ck.sub_table(doc, "exactness", "exactness")
        ck.table(ex, "exactness", {"protocol"}, {"protocol"})
        extra["exactness"] = {"protocol": ck.string(ex["protocol"], "exactness.protocol")}
    return {
        "schema_version": version, "kind": kind, "name": name, "description": description,
        "metric": measure["metric"], "direction": METRICS[measure["metric"]],
        "target": target, "max_tokens": measure["max_tokens"], "cache": measure["cache"],
        "timeouts": measure["timeouts"], "prompts": prompts,
        **({"sequential": measure["sequential"]} if measure["sequential"] else {}),
        "groups": [p["id"] for p in prompts] if kind == "compare" else [],
        "arms": arms, "schedule": schedule, "schedule_plan": schedule_plan, "gate": gate,
        "warnings": warnings, **extra,
    }


def _target(ck: _Checker, t: dict) -> dict:
    kind = ck.string(t.get("kind", "embedded"), "target.kind", choices=TARGET_KINDS)
    if kind in HTTP_KINDS:
        return _http_target(ck, t, kind)
    if kind == "command":
        # any program that speaks the worker protocol (protocols/worker-protocol.schema.json)
        # device: where that program runs (it is not told: give it its own flag); on "cuda"
        # the harness records the GPU's state around each arm
        ck.table(t, "target", {"kind", "command", "prefix_cache_slots", "device", "pin_cpu"},
                 {"command"})
        return {"kind": kind, "command": _argv(ck, t["command"], "target.command"),
                "model": None, "seed": None, "threads": None, "prefix_cache_slots": 0,
                "device": ck.string(t.get("device", "cpu"), "target.device", choices=DEVICES),
                "pin_cpu": _pin_cpu(ck, t)}
    ck.table(t, "target", {"kind", "model", "seed", "threads", "prefix_cache_slots", "device",
                           "pin_cpu"})
    out = {"kind": kind,
           "model": ck.string(t.get("model", "ds4-mini"), "target.model"),
           "seed": ck.integer(t.get("seed", 0), "target.seed", lo=0, hi=2**63 - 1),
           "threads": None, "prefix_cache_slots": 0,
           # the worker's Engine(device=...); "cpu" runs exactly as before the option existed
           "device": ck.string(t.get("device", "cpu"), "target.device", choices=DEVICES),
           "pin_cpu": _pin_cpu(ck, t)}
    if "threads" in t:
        out["threads"] = ck.integer(t["threads"], "target.threads", lo=1, hi=1024)
    if "prefix_cache_slots" in t:
        out["prefix_cache_slots"] = ck.integer(t["prefix_cache_slots"],
                                               "target.prefix_cache_slots", lo=0, hi=1024)
    return out


def _pin_cpu(ck: _Checker, t: dict) -> int | str | None:
    """[target] pin_cpu: every arm's worker process pinned to one CPU ("auto": the highest CPU
    this process may use; an integer: that CPU), so no arm runs on a faster or busier core than
    another for its whole life (a process-level block effect; docs/calibration.md)."""
    if "pin_cpu" not in t:
        return None
    v = t["pin_cpu"]
    if v == "auto":
        return "auto"
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 4095:
        ck.fail("target.pin_cpu", '"auto" or a CPU number 0..4095', v)
    return v


def _http_target(ck: _Checker, t: dict, kind: str) -> dict:
    """llamacpp / openai: a server command template started per arm, or a running server's url."""
    ck.table(t, "target", {"kind", "command", "url", "health_path", "start_timeout_s", "model",
                           "extra_body"})
    given = [k for k in ("command", "url") if k in t]
    if len(given) != 1:
        ck.fail("target", "exactly one of command (a server started per arm) or url (attach to "
                "a running server)", found=" and ".join(given) if given else "neither")
    out: dict[str, Any] = {
        "kind": kind, "command": None, "url": None,
        "health_path": ck.string(t.get("health_path", "/health"), "target.health_path"),
        "model": ck.string(t["model"], "target.model") if "model" in t else None,
        "extra_body": _extra_body(ck, ck.sub_table(t, "extra_body", "target.extra_body"),
                                  "target.extra_body", kind),
        "seed": None, "threads": None, "prefix_cache_slots": 0,
        "timing": HTTP_TIMING[kind],
        "response_bytes": "dflash.content_b64 when the server sends it (exact bytes), else the "
                          "text as UTF-8; each sample's response_source says which",
    }
    if not out["health_path"].startswith("/") or any(c.isspace() for c in out["health_path"]):
        ck.fail("target.health_path", "a path starting with '/'", out["health_path"])
    if "command" in t:
        out["command"] = _server_argv(ck, t["command"], "target.command")
    else:
        out["url"] = _url(ck, t["url"], "target.url")
    if "start_timeout_s" in t:
        out["start_timeout_s"] = ck.number(t["start_timeout_s"], "target.start_timeout_s",
                                           lo=0, lo_open=True)
    return out


def _server_argv(ck: _Checker, value, path: str) -> list[str]:
    """A server command template: argv with {port} (and optionally {host}) to fill in per arm."""
    argv = _argv(ck, value, path)
    if not any("{port}" in part for part in argv):
        ck.fail(path, "a command line containing {port} (the harness picks a free loopback port)",
                found=" ".join(argv)[:60])
    return argv


def _url(ck: _Checker, value, path: str) -> str:
    text = ck.string(value, path)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or \
            parts.fragment or any(c.isspace() for c in text):
        ck.fail(path, "an http:// or https:// base URL without query or fragment", text)
    return text.rstrip("/")


def _extra_body(ck: _Checker, table: dict, path: str, kind: str) -> dict:
    """Extra JSON fields sent with every request (e.g. sampling settings); plain JSON values only."""
    def check(value, where):
        if isinstance(value, dict):
            for k, v in value.items():
                check(v, _join(where, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                check(v, f"{where}[{i}]")
        elif not isinstance(value, (str, int, float, bool)) or value != value:
            ck.fail(where, "a JSON value (string, number, boolean, array or table)", value)

    for key in table:
        if key in HTTP_RESERVED[kind]:
            ck.fail(_join(path, key), "a field the harness does not set itself (it sets "
                    + ", ".join(HTTP_RESERVED[kind]) + ")", found=f"key {key!r}")
    check(table, path)
    return dict(table)


def _http_checks(ck: _Checker, doc: dict, target: dict, arms: list[dict], measure: dict
                 ) -> list[str]:
    """Cross-key rules of HTTP targets; returns the warnings the evidence must carry."""
    warnings: list[str] = []
    if target["kind"] not in HTTP_KINDS:
        return warnings
    if "start_timeout_s" in target:
        if "start_timeout_s" in doc.get("measure", {}):
            ck.fail("target.start_timeout_s", "start_timeout_s in [target] or [measure], not both",
                    target["start_timeout_s"])
        measure["timeouts"]["start_s"] = target.pop("start_timeout_s")
    attach = target["url"] is not None
    for i, arm in enumerate(arms):
        if attach and "command" in arm:
            ck.fail(f"arms[{i}].command", "no command: the target attaches to a running server "
                    "(target.url); give the arm a url, or give the target a command template",
                    found="a command")
        if not attach and "url" in arm:
            ck.fail(f"arms[{i}].url", "no url: the target starts a server per arm "
                    "(target.command)", arm["url"])
        if attach and arm["env"]:
            ck.fail(f"arms[{i}].env", "no env: an attached server (url) was started outside the "
                    "harness, so an arm's environment cannot reach it",
                    found=", ".join(sorted(arm["env"])))
    if attach:
        urls = sorted({arm.get("url", target["url"]) for arm in arms})
        warnings.append(f"attached to running server(s) at {', '.join(urls)}: the harness did "
                        "not start them per arm, so cache-cold requests and per-arm environment "
                        "isolation are not guaranteed")
    return warnings


def _expand_commands(target: dict, arms: list[dict], base_dir: Path) -> None:
    """Fill {python} (this interpreter) and {protocol_dir} (the protocol file's directory) in
    command lines; {port} and {host} stay for the target to fill per arm."""
    def expand(argv: list[str]) -> list[str]:
        return [part.replace("{python}", sys.executable)
                .replace("{protocol_dir}", str(base_dir.resolve())) for part in argv]

    if target.get("command"):
        target["command"] = expand(target["command"])
    for arm in arms:
        if "command" in arm:
            arm["command"] = expand(arm["command"])


def _argv(ck: _Checker, value, path: str) -> list[str]:
    """A command line as an array of strings (no shell), at least the program."""
    if not isinstance(value, list) or not value:
        ck.fail(path, "a non-empty array of strings (program and arguments)", value)
    for i, part in enumerate(value):
        if not isinstance(part, str) or not part or "\0" in part:
            ck.fail(f"{path}[{i}]", "a non-empty string", part)
    return list(value)


def _measure(ck: _Checker, m: dict, kind: str) -> dict:
    ck.table(m, "measure", {"metric", "warmups", "measured", "max_tokens", "cache",
                            "start_timeout_s", "request_timeout_s", "arm_timeout_s",
                            "sequential", "max_rounds", "max_seconds"})
    metric = ck.string(m.get("metric", DEFAULT_METRIC[kind]), "measure.metric", choices=METRICS)
    cache = ck.string(m.get("cache", "cold"), "measure.cache", choices=CACHE_POLICIES)
    return {
        "metric": metric, "cache": cache, "sequential": _sequential(ck, m, kind),
        "warmups": ck.integer(m.get("warmups", 2), "measure.warmups", lo=0, hi=100000),
        "measured": ck.integer(m.get("measured", 5), "measure.measured", lo=1, hi=100000),
        "max_tokens": ck.integer(m.get("max_tokens", 8), "measure.max_tokens", lo=1, hi=1 << 20),
        "timeouts": {
            "start_s": ck.number(m.get("start_timeout_s", 120), "measure.start_timeout_s",
                                 lo=0, lo_open=True),
            "request_s": ck.number(m.get("request_timeout_s", 300), "measure.request_timeout_s",
                                   lo=0, lo_open=True),
            "arm_s": ck.number(m.get("arm_timeout_s", 3600), "measure.arm_timeout_s",
                               lo=0, lo_open=True),
        },
    }


def _sequential(ck: _Checker, m: dict, kind: str) -> dict | None:
    """[measure] sequential = true: blocks of fresh workers until decided or the budget is spent
    (harness/sequential.py). Each block runs every arm's warmups and measured rounds; the
    budget is max_rounds measured rounds per arm over all blocks and max_seconds of wall time."""
    on = ck.boolean(m.get("sequential", False), "measure.sequential")
    if not on:
        for key in ("max_rounds", "max_seconds"):
            if key in m:
                ck.fail(f"measure.{key}", "no budget (it applies to measure.sequential = true)",
                        m[key])
        return None
    if kind != "bracket":
        ck.fail("measure.sequential", 'false for a compare protocol (sequential blocks are '
                'for brackets)', on)
    for key in ("max_rounds", "max_seconds"):
        if key not in m:
            ck.fail(f"measure.{key}", "a budget (required with measure.sequential = true)", None)
    return {"max_rounds": ck.integer(m["max_rounds"], "measure.max_rounds", lo=1, hi=10_000_000),
            "max_seconds": ck.number(m["max_seconds"], "measure.max_seconds", lo=0, lo_open=True)}


def _prompts(ck: _Checker, items, kind: str, base_dir: Path) -> list[dict]:
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        ck.fail("prompts", "a non-empty array of tables ([[prompts]])", items)
    if kind == "bracket" and len(items) != 1:
        ck.fail("prompts", "exactly one prompt for a bracket protocol",
                found=f"{len(items)} prompts")
    out, seen = [], set()
    for i, p in enumerate(items):
        path = f"prompts[{i}]"
        ck.table(p, path, {"id", "text", "file", "length"}, {"id"})
        pid = ck.string(p["id"], f"{path}.id", pattern=_ID_RE)
        if pid in seen:
            ck.fail(f"{path}.id", "an id not used by another prompt", pid)
        seen.add(pid)
        given = [k for k in ("text", "file", "length") if k in p]
        if len(given) != 1:
            ck.fail(path, "exactly one of text, file or length",
                    found=", ".join(given) if given else "none of them")
        source = given[0]
        entry: dict[str, Any] = {"id": pid, "source": source}
        if source == "text":
            text = ck.string(p["text"], f"{path}.text")
        elif source == "file":
            rel = ck.string(p["file"], f"{path}.file")
            entry["file"] = rel
            text = _read_prompt_file(ck, f"{path}.file", rel, base_dir)
        else:
            n = ck.integer(p["length"], f"{path}.length", lo=1, hi=1 << 16)
            entry["length"] = n
            entry["corpus"] = CORPUS
            text = cut_corpus(n, ck, f"{path}.length")
        data = text.encode("utf-8")
        entry.update(text=text, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        out.append(entry)
    return out


def _read_prompt_file(ck: _Checker, path: str, rel: str, base_dir: Path) -> str:
    for root in (base_dir, bundled_dir()):
        candidate = root / rel
        if os.path.isfile(candidate):
            try:
                return candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                ck.fail(path, "a readable UTF-8 text file", found=f"{rel} ({exc})")
    ck.fail(path, "a file relative to the protocol or the bundled protocols directory",
            found=f"{rel!r}, which does not exist")
    raise AssertionError("unreachable")


def cut_corpus(n: int, ck: _Checker | None = None, path: str = "length") -> str:
    """The first n bytes of the bundled ASCII corpus: n tokens for a byte-level tokenizer."""
    corpus = (bundled_dir() / CORPUS).read_text(encoding="ascii")
    if n > len(corpus):
        (ck or _Checker(CORPUS)).fail(path, f"a length <= {len(corpus)} (the corpus size)", n)
    return corpus[:n]


def _gate(ck: _Checker, g: dict, kind: str) -> dict:
    ck.table(g, "gate", {"min_gain_pct", "max_drift_pct", "require_identical", "confidence",
                         "bootstrap_resamples", "seed"})
    return {
        "min_gain_pct": ck.number(g.get("min_gain_pct", 1.0), "gate.min_gain_pct",
                                  lo=-100, hi=1e6),
        "max_drift_pct": ck.number(g.get("max_drift_pct", 2.0), "gate.max_drift_pct",
                                   lo=0, hi=1e6),
        "require_identical": ck.boolean(g.get("require_identical", True),
                                        "gate.require_identical"),
        "confidence": ck.number(g.get("confidence", 0.95), "gate.confidence",
                                lo=0, hi=1, lo_open=True, hi_open=True),
        "bootstrap_resamples": ck.integer(g.get("bootstrap_resamples", 10000),
                                          "gate.bootstrap_resamples", lo=100, hi=10_000_000),
        "seed": ck.integer(g.get("seed", 0), "gate.seed", lo=0, hi=2**63 - 1),
    }


ENGINE_ARGS = ("bands", "chunk", "mmvq_max_ncols", "mode")


def _arms(ck: _Checker, items, kind: str, measure: dict, target_kind: str) -> list[dict]:
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        ck.fail("arms", "a non-empty array of tables ([[arms]])", items)
    out, seen = [], set()
    for i, a in enumerate(items):
        path = f"arms[{i}]"
        allowed = {"id", "label", "role", "env", "engine", "warmups", "measured"}
        if target_kind == "command":
            allowed.add("command")   # per-arm program, e.g. two engine builds in A/B/A
        if target_kind in HTTP_KINDS:
            allowed |= {"command", "url"}   # per-arm server command template or server url
        ck.table(a, path, allowed, {"id", "role"})
        aid = ck.string(a["id"], f"{path}.id", pattern=_ID_RE)
        if aid in seen:
            ck.fail(f"{path}.id", "an id not used by another arm", aid)
        seen.add(aid)
        arm = {
            "id": aid,
            "label": ck.string(a.get("label", aid), f"{path}.label"),
            "role": ck.string(a["role"], f"{path}.role", choices=ROLES),
            "warmups": ck.integer(a.get("warmups", measure["warmups"]), f"{path}.warmups",
                                  lo=0, hi=100000),
            "measured": ck.integer(a.get("measured", measure["measured"]), f"{path}.measured",
                                   lo=1, hi=100000),
            "env": _env(ck, ck.sub_table(a, "env", f"{path}.env"), f"{path}.env"),
            "engine": _engine_args(ck, ck.sub_table(a, "engine", f"{path}.engine"),
                                   f"{path}.engine"),
        }
        if "command" in a:
            arm["command"] = (_server_argv if target_kind in HTTP_KINDS else _argv)(
                ck, a["command"], f"{path}.command")
        if "url" in a:
            arm["url"] = _url(ck, a["url"], f"{path}.url")
        out.append(arm)
    roles = [a["role"] for a in out]
    if roles.count("candidate") != 1 or roles.count("reference") < 1:
        expected = ("one reference and one candidate arm" if kind == "compare"
                    else "one candidate arm and at least one reference arm")
        ck.fail("arms", expected, found=f"{roles.count('reference')} reference and "
                f"{roles.count('candidate')} candidate arms")
    if kind == "compare" and len(out) != 2:
        ck.fail("arms", "exactly two arms (main and pr) for a compare protocol",
                found=f"{len(out)} arms")
    return out


def _env(ck: _Checker, env: dict, path: str) -> dict[str, str | None]:
    """Arm env: string or integer values set the variable; false or "" unsets it (None)."""
    out: dict[str, str | None] = {}
    for key, value in env.items():
        where = _join(path, key)
        if not _ENV_NAME_RE.fullmatch(key):
            ck.fail(where, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", key)
        if value is False or value == "":
            out[key] = None
        elif isinstance(value, str):
            if "\0" in value:
                ck.fail(where, "a string without NUL characters", value)
            out[key] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = str(value)
        else:
            ck.fail(where, "a string, an integer, or false (unset)", value)
    return out


def _engine_args(ck: _Checker, e: dict, path: str) -> dict:
    ck.table(e, path, set(ENGINE_ARGS))
    out: dict[str, Any] = {}
    if "bands" in e:
        out["bands"] = ck.boolean(e["bands"], f"{path}.bands")
    if "chunk" in e:
        out["chunk"] = ck.integer(e["chunk"], f"{path}.chunk", lo=1, hi=64)
    if "mmvq_max_ncols" in e:
        out["mmvq_max_ncols"] = ck.integer(e["mmvq_max_ncols"], f"{path}.mmvq_max_ncols",
                                           lo=1, hi=64)
    if "mode" in e:  # the embedded engine's prefill modes (approximate is labelled non-exact)
        out["mode"] = ck.string(e["mode"], f"{path}.mode", choices=MODES)
    return out


def _schedule(ck: _Checker, schedule, arms: list[dict], kind: str) -> tuple[list[str], dict]:
    """schedule = [arm ids] (ABA in that order) | "ABA" | "ABBA" | "randomized" | "interleaved"
    | {kind, order, seed, rounds}; returns (arm order, plan {"kind", "seed", "rounds"})."""
    ids = [a["id"] for a in arms]
    if isinstance(schedule, str):
        schedule = {"kind": schedule}
    elif schedule is None or isinstance(schedule, list):
        schedule = {"order": schedule}
    if not isinstance(schedule, dict):
        ck.fail("schedule", "an array of arm ids, a schedule name or a table", schedule)
    ck.table(schedule, "schedule", {"kind", "order", "seed", "rounds"})
    name = ck.string(schedule.get("kind", "ABA"), "schedule.kind", choices=schedule_mod.KINDS)
    if kind == "compare" and name not in ("ABA", "interleaved"):
        ck.fail("schedule.kind", '"interleaved" for a compare protocol (its arms always '
                'alternate request by request)', name)
    for key in ("seed", "rounds"):
        if key in schedule and name != "randomized":
            ck.fail(f"schedule.{key}", f'no {key} (it applies to schedule "randomized" only)',
                    schedule[key])
    plan = {"kind": name, "seed": None, "rounds": schedule_mod.rounds_of({"kind": name})}
    if name == "randomized":
        plan["seed"] = ck.integer(schedule.get("seed", 0), "schedule.seed", lo=0, hi=2**63 - 1)
        plan["rounds"] = ck.integer(schedule.get("rounds", schedule_mod.DEFAULT_ROUNDS),
                                    "schedule.rounds", lo=1, hi=1000)
    if kind == "compare":  # compare protocols always interleave their two arms
        plan = {"kind": "interleaved", "seed": None, "rounds": 1}
    order = schedule.get("order")
    path = "schedule" if "kind" not in schedule else "schedule.order"
    if order is None:
        return ids, plan
    if not isinstance(order, list) or not all(isinstance(s, str) for s in order):
        ck.fail(path, "an array of arm ids", order)
    for j, s in enumerate(order):
        if s not in ids:
            ck.fail(f"{path}[{j}]", _one_of(ids), s)
    if sorted(order) != sorted(ids):
        ck.fail(path, "every arm id exactly once", found=str(order))
    return list(order), plan
