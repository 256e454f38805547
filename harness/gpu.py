"""GPU state for the environment record: one nvidia-smi query, parsed into typed readings.

    nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,power.limit,
               power.draw,temperature.gpu --format=csv,noheader,nounits

Field names as `nvidia-smi --help-query-gpu` lists them (driver 580 on an H200):
``clocks.sm`` = clocks.current.sm and ``clocks.mem`` = clocks.current.memory (MHz),
``power.limit`` = the requested power limit and ``power.draw`` the board's draw (W),
``temperature.gpu`` the core temperature (C). A value nvidia-smi cannot read prints as
``[N/A]`` (or ``[Not Supported]``, ``[Unknown Error]``, ...) and becomes null here.

Reading is best effort: a missing nvidia-smi, a failing or hanging one, or output that does
not parse gives a snapshot whose ``gpus`` is null and whose ``reason`` says why; nothing here
raises. Snapshot shape (docs/evidence-format.md, environment.json):
``{"source": "nvidia-smi", "read_utc", "gpus": [GPU, ...] | null, "reason": str | null}``
with GPU = ``{"index", "name", "driver_version", "sm_clock_mhz", "mem_clock_mhz",
"power_limit_w", "power_draw_w", "temperature_c"}``.
"""
from __future__ import annotations

import csv
import datetime as _dt
import re
import shutil
import subprocess
from typing import Any, Callable

EXE = "nvidia-smi"
# (our key, nvidia-smi field, parser): the order is the query's column order
FIELDS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("index", "index", int),
    ("name", "name", str),
    ("driver_version", "driver_version", str),
    ("sm_clock_mhz", "clocks.sm", int),
    ("mem_clock_mhz", "clocks.mem", int),
    ("power_limit_w", "power.limit", float),
    ("power_draw_w", "power.draw", float),
    ("temperature_c", "temperature.gpu", int),
)
QUERY = ",".join(field for _, field, _ in FIELDS)
TIMEOUT_S = 10.0        # nvidia-smi takes ~0.1-1 s; a hung driver must not hang the run
MAX_QUOTE = 120         # characters of bad output quoted in a reason

# what nvidia-smi prints for a value it cannot read: [N/A], [Not Supported], [Unknown Error], N/A
_UNREADABLE = re.compile(r"^\[.*\]$|^N/?A$", re.IGNORECASE)
# a number, tolerating the unit nvidia-smi prints without `nounits`
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(?:MHz|W|C|%)?$")


def read(exe: str | None = None, *, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """One snapshot of every GPU nvidia-smi lists (never raises).

    Args:
        exe: the nvidia-smi to run; None: the first on PATH.
        timeout_s: how long nvidia-smi may take.
    Returns:
        ``{"source", "read_utc", "gpus": [...] | None, "reason": str | None}``; ``reason``
        is set when ``gpus`` is None or some value could not be parsed.
    """
    stamp = _utc_now()

    def failed(reason: str) -> dict[str, Any]:
        return {"source": EXE, "read_utc": stamp, "gpus": None, "reason": reason}

    exe = exe or shutil.which(EXE)
    if exe is None:
        return failed(f"{EXE} not found on PATH")
    try:
        done = subprocess.run([exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return failed(f"{EXE} did not answer within {timeout_s:g} s")
    except OSError as exc:
        return failed(f"{EXE} could not run: {exc.strerror or exc}")
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        said = _first_line(out) or _first_line(done.stderr.decode("utf-8", "replace"))
        return failed(f"{EXE} exited with status {done.returncode}"
                      + (f": {_quote(said)}" if said else ""))
    try:
        gpus, problem = parse(out)
    except csv.Error as exc:  # e.g. a NUL byte (Python < 3.11)
        gpus, problem = None, f"{EXE} output is not CSV ({exc}): {_quote(out)}"
    if gpus is None:
        return failed(problem or "unreadable output")
    return {"source": EXE, "read_utc": stamp, "gpus": gpus, "reason": problem}


def parse(text: str) -> tuple[list[dict[str, Any]] | None, str | None]:
    """Parse ``--format=csv,noheader,nounits`` output of QUERY.

    Returns:
        (gpus, reason): gpus None when the output is malformed (a line with the wrong number
        of fields, or no GPU at all); otherwise one dict per line, unreadable values None,
        and reason naming any value that was neither a number nor an [N/A]-style marker.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None, f"{EXE} listed no GPU"
    gpus, problems = [], []
    for n, row in enumerate(csv.reader(lines, skipinitialspace=True), start=1):
        if len(row) != len(FIELDS):
            return None, (f"{EXE} output line {n} has {len(row)} fields, expected "
                          f"{len(FIELDS)} ({QUERY}): {_quote(lines[n - 1])}")
        gpu: dict[str, Any] = {}
        for (key, field, kind), raw in zip(FIELDS, row):
            value = raw.strip()
            if not value or _UNREADABLE.match(value):
                gpu[key] = None
            elif kind is str:
                gpu[key] = value
            else:
                gpu[key] = _number(value, kind)
                if gpu[key] is None:
                    problems.append(f"line {n} {field}: {_quote(value)} is not a number")
        gpus.append(gpu)
    return gpus, ("; ".join(problems) if problems else None)


def _number(text: str, kind: Callable[[str], Any]) -> int | float | None:
    match = _NUMBER.match(text)
    if match is None:
        return None
    value = float(match.group(1))
    if kind is int:
        return int(value) if value.is_integer() else value
    return value


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _quote(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= MAX_QUOTE else text[:MAX_QUOTE - 3] + "...")


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
