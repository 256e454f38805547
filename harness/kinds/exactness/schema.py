"""The exactness protocol schema (kind = "exactness", schema_version 1): load, validate, resolve
into the typed ExactnessProtocol (model.py).

    schema_version = 1
    kind = "exactness"
    name = "exact-bands-trace"
    [target]                 # embedded (model, seed, threads) or command (a worker that traces)
    [trace]                  # level = "raw" | "digest"; max_tokens; start/request timeouts
    [oracle]                 # optional: label, env, engine (default: q1, bands off)
    [[requests]]             # id; exactly one of text / length / repeat_of; snapshot_at (optional)
    [[candidates]]           # optional (default q2, q3, q4): id, label, env, engine, expect
                             #   expect = "bitwise" (default) | "differs" (a negative control)
"""
from __future__ import annotations

import hashlib
import re
from typing import Any

from ...checker import Checker
from ...protocol import (ID_RE, SCHEMA_VERSION, Document, LoadedProtocol, cut_corpus, parse_engine_args,
                         parse_env, read_document)
from ...targets import options as target_options
from .model import ExactnessProtocol

KIND = "exactness"
LEVELS = ("raw", "digest")
EXPECT = ("bitwise", "differs")
ORACLE_ID = "q1"
# q1 stays q1 whatever the caller's shell exports
Q1_ENV = {"DFLASH_DS4_EXACT_PREFILL_BANDS": None, "LUCE_MMVQ_MAX_NCOLS": None}
DEFAULT_CANDIDATES = [
    {"id": f"q{c}", "label": f"exact bands chunk {c}", "role": "candidate",
     "env": dict(Q1_ENV), "engine": {"bands": True, "chunk": c}, "expect": "bitwise"} for c in (2, 3, 4)]


DEFAULT_PROTOCOL = "exact-bands-trace"


def load(spec: str | None) -> LoadedProtocol:
    """Load and resolve an exactness protocol (a path or a bundled name)."""
    return from_document(read_document(spec or DEFAULT_PROTOCOL))


def from_document(document: Document) -> LoadedProtocol:
    """The exactness schema: validate and resolve a read protocol document."""
    resolved = resolve(document.doc, file=document.display)
    resolved["source"] = document.source()
    typed = ExactnessProtocol.from_json(resolved)
    return LoadedProtocol(resolved=typed.to_json(), source_bytes=document.raw,
                          path=str(document.path), protocol=typed)


def resolve(doc: dict, *, file: str) -> dict[str, Any]:
    ck = Checker(file)
    ck.table(doc, "", {"schema_version", "kind", "name", "description", "target", "trace", "oracle",
                       "requests", "candidates"}, {"schema_version", "kind", "name", "requests"})
    version = ck.integer(doc["schema_version"], "schema_version")
    if version != SCHEMA_VERSION:
        ck.fail("schema_version", f"{SCHEMA_VERSION} (the only version this tool reads)", version)
    ck.string(doc["kind"], "kind", choices=(KIND,))
    name = ck.string(doc["name"], "name", pattern=re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"))
    target = target_options.parse(ck, ck.sub_table(doc, "target", "target")).to_json()
    if target["kind"] not in ("embedded", "command"):
        ck.fail("target.kind", '"embedded" or "command" (traces travel through the worker protocol)',
                target["kind"])
    if target["kind"] == "embedded" and target["device"] != "cpu":
        ck.fail("target.device", '"cpu" (the embedded engine captures traces on the CPU only)',
                target["device"])
    t = ck.sub_table(doc, "trace", "trace")
    ck.table(t, "trace", {"level", "max_tokens", "start_timeout_s", "request_timeout_s"})
    trace = {"level": ck.string(t.get("level", "raw"), "trace.level", choices=LEVELS),
             "max_tokens": ck.integer(t.get("max_tokens", 4), "trace.max_tokens", lo=1, hi=4096)}
    timeouts = {"start_s": ck.number(t.get("start_timeout_s", 120), "trace.start_timeout_s", lo=0, lo_open=True),
                "request_s": ck.number(t.get("request_timeout_s", 600), "trace.request_timeout_s",
                                       lo=0, lo_open=True)}
    o = ck.sub_table(doc, "oracle", "oracle")
    ck.table(o, "oracle", {"label", "env", "engine"})
    oracle = {"id": ORACLE_ID, "label": ck.string(o.get("label", "q1 oracle"), "oracle.label"),
              "role": "reference", "env": {**Q1_ENV, **parse_env(ck, ck.sub_table(o, "env", "oracle.env"), "oracle.env")},
              "engine": parse_engine_args(ck, o.get("engine", {"bands": False, "chunk": 1}), "oracle.engine"),
              "expect": "oracle"}
    requests = _requests(ck, doc["requests"])
    cands = doc.get("candidates")
    candidates = [dict(c, env=dict(c["env"]), engine=dict(c["engine"])) for c in DEFAULT_CANDIDATES] \
        if cands is None else _candidates(ck, cands)
    for c in candidates:
        eng = c["engine"]
        c["chunk"] = eng.get("chunk", 4) if eng.get("bands", eng.get("chunk", 1) > 1) else 1
    return {"schema_version": version, "kind": KIND, "name": name,
            "description": ck.string(doc.get("description", ""), "description", nonempty=False),
            "target": target, "trace": trace, "max_tokens": trace["max_tokens"], "timeouts": timeouts,
            "requests": requests, "arms": [oracle, *candidates], "warnings": []}


def _requests(ck: Checker, items: Any) -> list[dict[str, Any]]:
    items = ck.table_array(items, "requests")
    out: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(items):
        path = f"requests[{i}]"
        ck.table(r, path, {"id", "text", "length", "repeat_of", "snapshot_at"}, {"id"})
        rid = ck.string(r["id"], f"{path}.id", pattern=ID_RE)
        if rid in by_id:
            ck.fail(f"{path}.id", "an id not used by another request", rid)
        given = [k for k in ("text", "length", "repeat_of") if k in r]
        if len(given) != 1:
            ck.fail(path, "exactly one of text, length or repeat_of", found=", ".join(given) or "none of them")
        if "repeat_of" in r:
            of = ck.string(r["repeat_of"], f"{path}.repeat_of")
            if of not in by_id:
                ck.fail(f"{path}.repeat_of", "the id of an earlier request", of)
            entry = {**by_id[of], "id": rid, "repeat_of": of}
        elif "text" in r:
            text = ck.string(r["text"], f"{path}.text")
            entry = {"id": rid, "source": "text", "text": text}
        else:
            n = ck.integer(r["length"], f"{path}.length", lo=1, hi=1 << 16)
            entry = {"id": rid, "source": "length", "length": n, "text": cut_corpus(n, ck, f"{path}.length")}
        if "repeat_of" not in r:
            entry["repeat_of"] = None
            entry["snapshot_at"] = None
            data = entry["text"].encode("utf-8")
            entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        if "snapshot_at" in r:
            if "repeat_of" in r:
                ck.fail(f"{path}.snapshot_at", "no snapshot_at on a repeat (it repeats the original's)",
                        r["snapshot_at"])
            # tokens = BOS + the prompt's bytes; the snapshot must fall inside the prompt
            entry["snapshot_at"] = ck.integer(r["snapshot_at"], f"{path}.snapshot_at", lo=1, hi=entry["bytes"])
        by_id[rid] = entry
        out.append(entry)
    return out


def _candidates(ck: Checker, items: Any) -> list[dict[str, Any]]:
    items = ck.table_array(items, "candidates")
    out, seen = [], {ORACLE_ID}
    for i, c in enumerate(items):
        path = f"candidates[{i}]"
        ck.table(c, path, {"id", "label", "env", "engine", "expect"}, {"id"})
        cid = ck.string(c["id"], f"{path}.id", pattern=ID_RE)
        if cid in seen:
            ck.fail(f"{path}.id", "an id not used by the oracle or another candidate", cid)
        seen.add(cid)
        out.append({"id": cid, "label": ck.string(c.get("label", cid), f"{path}.label"), "role": "candidate",
                    "env": {**Q1_ENV, **parse_env(ck, ck.sub_table(c, "env", f"{path}.env"), f"{path}.env")},
                    "engine": parse_engine_args(ck, c.get("engine", {"bands": True, "chunk": 4}), f"{path}.engine"),
                    "expect": ck.string(c.get("expect", "bitwise"), f"{path}.expect", choices=EXPECT)})
    return out
