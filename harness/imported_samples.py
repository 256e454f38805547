"""Samples collected elsewhere: parse `analyze`'s CSV and build the bracket protocol it is judged by.

CSV columns `arm,phase,value` plus optional `response_sha256` (extra columns are ignored,
so `report --format csv` output can be fed back). Every bad cell is a UsageError naming the
file, line, column, what was expected and what was found.
"""
from __future__ import annotations

import csv
import io
import math
import re
from decimal import Decimal, InvalidOperation

from . import analysis
from .errors import UsageError

REQUIRED_COLUMNS = ("arm", "phase", "value")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_DECIMALS = 12


def _decimals(text: str) -> int:
    try:
        exponent = Decimal(text).as_tuple().exponent
    except InvalidOperation:
        return 0
    return min(MAX_DECIMALS, -exponent) if isinstance(exponent, int) and exponent < 0 else 0


def read_samples_csv(text: str, file: str) -> tuple[list[dict], int]:
    """Parse analyze's CSV into sample records (analysis format) and the display decimals.

    Returns:
        (samples, decimals): samples in file order with seq/index filled in; decimals is
        the largest number of decimal places among the measured values (the precision
        the inputs justify).
    """
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames
    if not header:
        raise UsageError("empty file", file=file, field="line 1",
                         expected="a header row with columns arm,phase,value", got="")
    header = [h.strip() for h in header]
    reader.fieldnames = header
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise UsageError("missing column", file=file, field="line 1 (header)",
                         expected="columns arm,phase,value[,response_sha256]", got=",".join(header))
    samples: list[dict] = []
    index: dict[tuple[str, str], int] = {}
    decimals = 0
    for row in reader:
        line = reader.line_num
        if None in row:
            raise UsageError("too many fields", file=file, field=f"line {line}",
                             expected=f"{len(header)} fields", got=len(header) + len(row[None]))
        if any(row[c] is None for c in REQUIRED_COLUMNS):
            raise UsageError("too few fields", file=file, field=f"line {line}",
                             expected=f"{len(header)} fields", got=sum(v is not None for v in row.values()))
        if not any((v or "").strip() for v in row.values()):
            continue  # blank line
        arm, phase, raw = row["arm"].strip(), row["phase"].strip(), row["value"].strip()
        if not arm:
            raise UsageError("empty arm", file=file, field=f"line {line}, column arm",
                             expected="an arm name", got=row["arm"])
        if phase not in ("warmup", "measured"):
            raise UsageError("bad phase", file=file, field=f"line {line}, column phase",
                             expected="'warmup' or 'measured'", got=row["phase"])
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise UsageError("bad value", file=file, field=f"line {line}, column value",
                             expected="a finite number > 0", got=row["value"])
        sha = (row.get("response_sha256") or "").strip().lower() or None
        if sha is not None and not _SHA_RE.fullmatch(sha):
            raise UsageError("bad response hash", file=file, field=f"line {line}, column response_sha256",
                             expected="64 hex digits or empty", got=row["response_sha256"])
        if phase == "measured":
            decimals = max(decimals, _decimals(raw))
        i = index.get((arm, phase), 0)
        index[(arm, phase)] = i + 1
        samples.append({"seq": len(samples), "arm": arm, "role": None, "phase": phase, "index": i,
                        "group": None, "prompt_id": None, "value": value,
                        "response_sha256": sha, "ok": True, "cache_hits": None})
    if not samples:
        raise UsageError("no samples", file=file, field="rows",
                         expected="at least one row after the header", got=0)
    return samples, decimals


def bracket_protocol(samples: list[dict], *, name: str, references: list[str], candidate: str,
                     direction: str, decimals: int, gate: dict, file: str) -> tuple[dict, list[dict]]:
    """A bracket protocol (references first and last around the candidate) and the samples it covers.

    The first reference arm is scheduled before the candidate and the others after it, so
    drift compares the first and last reference given. Arms in the CSV that are neither
    reference nor candidate are left out.
    """
    present = list(dict.fromkeys(s["arm"] for s in samples))
    for flag, arm in [*(("--reference", r) for r in references), ("--candidate", candidate)]:
        if arm not in present:
            raise UsageError("unknown arm", file=file, field=flag,
                             expected=f"an arm in the CSV ({', '.join(present)})", got=arm)
    if len(set(references)) != len(references):
        raise UsageError("an arm is given twice", field="--reference",
                         expected="distinct arms", got=references)
    if candidate in references:
        raise UsageError("an arm cannot be both reference and candidate", field="--candidate",
                         expected=f"an arm other than {', '.join(references)}", got=candidate)
    roles = {**{r: "reference" for r in references}, candidate: "candidate"}
    arms = [{"id": a, "label": a, "role": roles[a]} for a in [references[0], candidate, *references[1:]]]
    protocol = {
        "schema_version": 1, "kind": "bracket", "name": name,
        "description": f"samples from {file}", "metric": "value", "direction": direction,
        "arms": arms, "schedule": [a["id"] for a in arms],
        "gate": analysis.check_gate(gate, file="analyze options", prefix="gate"),
        "report": {"decimals": decimals},
    }
    kept = []
    for s in samples:
        if s["arm"] in roles:
            kept.append({**s, "role": roles[s["arm"]]})
    return protocol, kept
