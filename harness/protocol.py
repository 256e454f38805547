"""Qualification protocols: load a TOML file (path or bundled name), validate it, resolve it.

The bracket and compare schema (version 1) is documented in protocols/README.md. A file is
read once (`read_document`) and every kind's schema starts from that `Document`. Validation
is strict: unknown keys are errors so a typo never passes silently, and every error is one
line naming the file, the key path (e.g. ``arms[1].env.LUCE_MMVQ_MAX_NCOLS``), what was expected and what
was found. The result is typed once (protocol_model.Protocol, frozen dataclasses); its
`to_json()` is protocol.json (docs/evidence-format.md) with prompts inlined, so evidence never
depends on files outside itself. A kind's rules here come from its traits
(protocol_model.TRAITS), never from asking its name.
"""
from __future__ import annotations

import hashlib
import importlib.resources
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import bracket_order
from . import builds as builds_mod
from .checker import Checker, join_key, one_of
from .errors import UsageError
from .protocol_model import TRAITS, Protocol
from .targets import openai_options
from .targets import options as target_options
from .targets.options import HTTP_KINDS, parse_argv, parse_server_argv, parse_url

# Schema history:
#   1 — first version: bracket and compare kinds, embedded target, [[prompts]], [[arms]].
SCHEMA_VERSION = 1

KINDS = tuple(TRAITS)  # ("bracket", "compare")
# metric -> direction (which way is better)
METRICS = {"prefill_tok_s": "higher", "prefill_ms": "lower", "decode_tok_s": "higher",
           "total_ms": "lower"}
DEFAULT_METRIC = {"bracket": "prefill_tok_s", "compare": "prefill_ms"}
CACHE_POLICIES = ("cold", "allow")
ROLES = ("reference", "candidate")
MODES = ("exact", "approximate")
DEFAULT_PROTOCOL = "exact-bands-aba"
CORPUS = "prompts/corpus.txt"  # bundled text that `length = N` prompts are cut from

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class LoadedProtocol:
    """A validated protocol: the resolved dict (protocol.json), the file's original bytes, where
    it came from, and the typed protocol (protocol_model.Protocol for bracket/compare; a kind's
    own frozen dataclass, e.g. ExactnessProtocol, for others)."""

    resolved: dict[str, Any]
    source_bytes: bytes
    path: str
    protocol: Any = None


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

@dataclass(frozen=True)
class Document:
    """A protocol file read and parsed once: where it is, its bytes and its TOML document."""

    path: Path
    bundled: bool
    display: str     # how errors name the file ("x.toml (bundled)" or the path given)
    raw: bytes
    doc: dict[str, Any]

    def source(self) -> dict[str, Any]:
        """protocol.json's `source`: the file's name (bundled) or path, and its SHA-256."""
        return {"file": self.path.name if self.bundled else str(self.path), "bundled": self.bundled,
                "sha256": hashlib.sha256(self.raw).hexdigest()}


def read_document(spec: str | None) -> Document:
    """Locate a protocol (a path or a bundled name), read it and parse its TOML (UsageError
    naming the file for anything unreadable); every kind's schema starts from this."""
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
    return Document(path=path, bundled=bundled, display=display, raw=raw, doc=doc)


def load(spec: str | None = None, *, warmups: int | None = None,
         measured: int | None = None) -> LoadedProtocol:
    """Load, validate and resolve a bracket or compare protocol; CLI overrides apply to every
    arm and are recorded."""
    return from_document(read_document(spec), warmups=warmups, measured=measured)


def from_toml(spec: str | None = None, *, warmups: int | None = None,
              measured: int | None = None) -> Protocol:
    """The typed protocol of a bracket or compare TOML file (load(...).protocol)."""
    typed = load(spec, warmups=warmups, measured=measured).protocol
    assert isinstance(typed, Protocol)  # from_document always types it
    return typed


def from_document(document: Document, *, warmups: int | None = None,
                  measured: int | None = None) -> LoadedProtocol:
    """The bracket/compare schema: validate and resolve a read document, apply overrides."""
    display = document.display
    resolved = resolve(document.doc, file=display, base_dir=document.path.parent)
    resolved["source"] = document.source()
    overrides = {}
    ck = Checker("command line")
    if warmups is not None:
        overrides["warmups"] = ck.integer(warmups, "--warmups", lo=0, hi=100000)
    if measured is not None:
        overrides["measured"] = ck.integer(measured, "--measured", lo=1, hi=100000)
    for arm in resolved["arms"]:
        arm.update(overrides)
    resolved["overrides"] = overrides
    problem = bracket_order.check(resolved)
    if problem:
        raise UsageError(problem, file=display, field="schedule")
    typed = Protocol.from_json(resolved)
    return LoadedProtocol(resolved=typed.to_json(), source_bytes=document.raw,
                          path=str(document.path), protocol=typed)


def resolve(doc: dict, *, file: str, base_dir: Path) -> dict[str, Any]:
    """Validate a parsed TOML document and return the resolved protocol dict."""
    ck = Checker(file)
    ck.table(doc, "", {"schema_version", "kind", "name", "description", "target", "measure",
                       "prompts", "gate", "arms", "schedule", "exactness", "build"},
             {"schema_version", "kind", "name", "arms", "prompts"})
    version = ck.integer(doc["schema_version"], "schema_version")
    if version != SCHEMA_VERSION:
        ck.fail("schema_version", f"{SCHEMA_VERSION} (the only version this tool reads)", version)
    kind = ck.string(doc["kind"], "kind", choices=KINDS)
    name = ck.string(doc["name"], "name", pattern=re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"))
    description = ck.string(doc.get("description", ""), "description", nonempty=False)

    target = target_options.parse(ck, ck.sub_table(doc, "target", "target")).to_json()
    measure = _measure(ck, ck.sub_table(doc, "measure", "measure"), kind)
    prompts = _prompts(ck, doc["prompts"], kind, base_dir)
    gate = _gate(ck, ck.sub_table(doc, "gate", "gate"), kind)
    arms = _arms(ck, doc["arms"], kind, measure, target["kind"])
    build = builds_mod.resolve_section(ck, doc, doc["arms"], target, base_dir)  # [build], refs
    extra_build = {"build": build} if build is not None else {}
    for arm, a in zip(arms, doc["arms"]):
        if build is not None and "ref" in a:
            arm["ref"] = a["ref"]
    schedule, schedule_plan = _schedule(ck, doc.get("schedule"), arms, kind)
    if measure["sequential"] and schedule_plan["kind"] != "interleaved":
        ck.fail("schedule", '"interleaved" with measure.sequential = true (each block starts '
                'fresh workers in a shuffled order and interleaves their rounds)',
                schedule_plan["kind"])
    warnings = _http_checks(ck, doc, target, arms, measure)
    if target["kind"] == "openai":  # a timings preset's server-command rules (openai_options.py)
        commands = [c for c in [target["command"]] + [a.get("command") for a in arms] if c]
        warnings += openai_options.check_commands(ck, target["timings"], commands,
                                                  target["url"] is not None)
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
        "groups": [p["id"] for p in prompts] if TRAITS[kind].compares_groups else [],
        "arms": arms, "schedule": schedule, "schedule_plan": schedule_plan, "gate": gate,
        "warnings": warnings, **extra, **extra_build,
    }


def _http_checks(ck: Checker, doc: dict, target: dict, arms: list[dict], measure: dict
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


def _measure(ck: Checker, m: dict, kind: str) -> dict:
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


def _sequential(ck: Checker, m: dict, kind: str) -> dict | None:
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


def _prompts(ck: Checker, items, kind: str, base_dir: Path) -> list[dict]:
    items = ck.table_array(items, "prompts")
    if not TRAITS[kind].compares_groups and len(items) != 1:
        ck.fail("prompts", "exactly one prompt for a bracket protocol",
                found=f"{len(items)} prompts")
    out, seen = [], set()
    for i, p in enumerate(items):
        path = f"prompts[{i}]"
        ck.table(p, path, {"id", "text", "file", "length"}, {"id"})
        pid = ck.string(p["id"], f"{path}.id", pattern=ID_RE)
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


def _read_prompt_file(ck: Checker, path: str, rel: str, base_dir: Path) -> str:
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


def cut_corpus(n: int, ck: Checker | None = None, path: str = "length") -> str:
    """The first n bytes of the bundled ASCII corpus: n tokens for a byte-level tokenizer."""
    corpus = (bundled_dir() / CORPUS).read_text(encoding="ascii")
    if n > len(corpus):
        (ck or Checker(CORPUS)).fail(path, f"a length <= {len(corpus)} (the corpus size)", n)
    return corpus[:n]


def _gate(ck: Checker, g: dict, kind: str) -> dict:
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


def _arms(ck: Checker, items, kind: str, measure: dict, target_kind: str) -> list[dict]:
    items = ck.table_array(items, "arms")
    out, seen = [], set()
    for i, a in enumerate(items):
        path = f"arms[{i}]"
        allowed = {"id", "label", "role", "env", "engine", "warmups", "measured"}
        if target_kind == "command":
            allowed.add("command")   # per-arm program, e.g. two engine builds in A/B/A
        if target_kind in HTTP_KINDS:
            allowed |= {"command", "url"}   # per-arm server command template or server url
        if target_kind in ("command", *HTTP_KINDS):
            allowed.add("ref")       # [build]: the git ref this arm's engine is built from
        ck.table(a, path, allowed, {"id", "role"})
        aid = ck.string(a["id"], f"{path}.id", pattern=ID_RE)
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
            "env": parse_env(ck, ck.sub_table(a, "env", f"{path}.env"), f"{path}.env"),
            "engine": parse_engine_args(ck, ck.sub_table(a, "engine", f"{path}.engine"),
                                   f"{path}.engine"),
        }
        if "command" in a:
            arm["command"] = (parse_server_argv if target_kind in HTTP_KINDS else parse_argv)(
                ck, a["command"], f"{path}.command")
        if "url" in a:
            arm["url"] = parse_url(ck, a["url"], f"{path}.url")
        out.append(arm)
    roles = [a["role"] for a in out]
    if roles.count("candidate") != 1 or roles.count("reference") < 1:
        expected = ("one reference and one candidate arm" if TRAITS[kind].compares_groups
                    else "one candidate arm and at least one reference arm")
        ck.fail("arms", expected, found=f"{roles.count('reference')} reference and "
                f"{roles.count('candidate')} candidate arms")
    if TRAITS[kind].compares_groups and len(out) != 2:
        ck.fail("arms", "exactly two arms (main and pr) for a compare protocol",
                found=f"{len(out)} arms")
    return out


def parse_env(ck: Checker, env: dict, path: str) -> dict[str, str | None]:
    """Arm env: string or integer values set the variable; false or "" unsets it (None)."""
    out: dict[str, str | None] = {}
    for key, value in env.items():
        where = join_key(path, key)
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


def parse_engine_args(ck: Checker, e: dict, path: str) -> dict:
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


def _schedule(ck: Checker, schedule, arms: list[dict], kind: str) -> tuple[list[str], dict]:
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
    name = ck.string(schedule.get("kind", "ABA"), "schedule.kind", choices=bracket_order.KINDS)
    if TRAITS[kind].compares_groups and name not in ("ABA", "interleaved"):
        ck.fail("schedule.kind", '"interleaved" for a compare protocol (its arms always '
                'alternate request by request)', name)
    for key in ("seed", "rounds"):
        if key in schedule and name != "randomized":
            ck.fail(f"schedule.{key}", f'no {key} (it applies to schedule "randomized" only)',
                    schedule[key])
    plan = {"kind": name, "seed": None, "rounds": bracket_order.rounds_of({"kind": name})}
    if name == "randomized":
        plan["seed"] = ck.integer(schedule.get("seed", 0), "schedule.seed", lo=0, hi=2**63 - 1)
        plan["rounds"] = ck.integer(schedule.get("rounds", bracket_order.DEFAULT_ROUNDS),
                                    "schedule.rounds", lo=1, hi=1000)
    if TRAITS[kind].compares_groups:  # compare protocols always interleave their two arms
        plan = {"kind": "interleaved", "seed": None, "rounds": 1}
    order = schedule.get("order")
    path = "schedule" if "kind" not in schedule else "schedule.order"
    if order is None:
        return ids, plan
    if not isinstance(order, list) or not all(isinstance(s, str) for s in order):
        ck.fail(path, "an array of arm ids", order)
    for j, s in enumerate(order):
        if s not in ids:
            ck.fail(f"{path}[{j}]", one_of(ids), s)
    if sorted(order) != sorted(ids):
        ck.fail(path, "every arm id exactly once", found=str(order))
    return list(order), plan
