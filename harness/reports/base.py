"""Shared pieces of the reporters: the input they render, number formatting, GPU rows."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ReportInput:
    """Everything a reporter may read: the evidence files' content (no IO happens in reporters)."""

    protocol: dict
    environment: dict
    stats: dict
    samples: list
    manifest_sha: str | None
    path: Path | None = None
    in_evidence: bool = True   # False for `analyze`: no evidence directory, no manifest line


def fmt_value(x: float | None, decimals: int) -> str:
    """A measured value or median with `decimals` places, one more when needed to stay exact.

    The median of an even count is the mean of two values and can need one more decimal
    than the inputs (16.695 and 16.698 -> 16.6965); it is shown exactly rather than rounded.
    """
    if x is None:
        return "n/a"
    for d in (decimals, decimals + 1):
        if abs(x - round(x, d)) <= 1e-9 * max(1.0, abs(x)):
            return f"{x:.{d}f}"
    return f"{x:.{decimals}f}"


def fmt_pct(x: float | None) -> str:
    """A percentage with two decimals ("n/a" when undefined)."""
    return "n/a" if x is None else f"{x:.2f}%"


def fmt_p(p: float | None) -> str:
    """A p-value with three significant digits."""
    return "n/a" if p is None else f"{p:.3g}"


def with_unit(text: str, unit: str) -> str:
    return f"{text} {unit}" if unit else text


# ----------------------------------------------------------------------------- GPU (environment.json)

GPU_STATE_HEAD = ["arm", "read", "GPU", "SM MHz", "memory MHz", "power limit W", "power draw W",
                  "temperature C"]
GPU_STATE_NOTE = ("read by nvidia-smi once the arm's engine has started, before its first "
                  "request, and again after its last request")
_GPU_NUMBERS = ("sm_clock_mhz", "mem_clock_mhz", "power_limit_w", "power_draw_w", "temperature_c")


def _num(x) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "n/a"
    return f"{x:g}"


def engine_device(env: dict) -> str | None:
    """"on cuda (NVIDIA H200)" when the engine build the worker reported ran on a GPU."""
    build = env.get("engine_build") if isinstance(env, dict) else None
    if not isinstance(build, dict) or build.get("device") in (None, "cpu"):
        return None
    cuda = build.get("cuda") if isinstance(build.get("cuda"), dict) else {}
    return f"on {build['device']}" + (f" ({cuda['gpu']})" if cuda.get("gpu") else "")


def gpu_summary(env: dict) -> str | None:
    """One phrase for the run's GPU (environment.json `gpu`, version 1 or 2), None if absent."""
    gpu = env.get("gpu") if isinstance(env, dict) else None
    if isinstance(gpu, list):  # version 1: nvidia-smi's strings
        names = [str(g.get("name")) for g in gpu if isinstance(g, dict) and g.get("name")]
        return ", ".join(names) or None
    if not isinstance(gpu, dict):
        return None
    gpus = gpu.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return f"not recorded ({gpu.get('reason') or 'no reading'})"
    gpus = [g for g in gpus if isinstance(g, dict)]
    kinds: dict[tuple, int] = {}
    for g in gpus:
        key = (g.get("name") or "unknown GPU", g.get("driver_version"))
        kinds[key] = kinds.get(key, 0) + 1
    if len(gpus) == 1:
        g = gpus[0]
        name, driver = next(iter(kinds))
        return (f"{name} (driver {driver or 'n/a'}; at start SM {_num(g.get('sm_clock_mhz'))} MHz, "
                f"memory {_num(g.get('mem_clock_mhz'))} MHz, power limit "
                f"{_num(g.get('power_limit_w'))} W)")
    return ", ".join(f"{n} x {name} (driver {driver or 'n/a'})" for (name, driver), n in kinds.items())


def gpu_state_rows(env: dict) -> list[list[str]]:
    """Rows under GPU_STATE_HEAD: every arm's GPU readings (environment.json arms[id].gpu)."""
    arms = env.get("arms") if isinstance(env, dict) else None
    rows: list[list[str]] = []
    for arm_id, arm in (arms.items() if isinstance(arms, dict) else ()):
        visits = arm.get("gpu") if isinstance(arm, dict) else None
        if not isinstance(visits, list):
            continue
        visits = [v for v in visits if isinstance(v, dict)]
        for v in visits:
            for when in ("before", "after"):
                label = when + _visit_label(v, len(visits))
                snap = v.get(when)
                gpus = snap.get("gpus") if isinstance(snap, dict) else None
                if not isinstance(gpus, list):
                    reason = snap.get("reason") if isinstance(snap, dict) else "not read"
                    rows.append([str(arm_id), label, f"not read: {reason}"] + ["n/a"] * 5)
                    continue
                for g in (g for g in gpus if isinstance(g, dict)):
                    rows.append([str(arm_id), label, f"{_num(g.get('index'))}: {g.get('name')}"]
                                + [_num(g.get(k)) for k in _GPU_NUMBERS])
    return rows


def _visit_label(visit: dict, visits: int) -> str:
    """" (visit 2)" / " (repeat 3, visit 1)" when an arm has several readings, else ""."""
    parts = []
    if isinstance(visit.get("repeat"), int):   # calibrate: the A/A repeat
        parts.append(f"repeat {visit['repeat'] + 1}")
    if isinstance(visit.get("visit"), int):
        parts.append(f"visit {visit['visit'] + 1}")
    return f" ({', '.join(parts)})" if visits > 1 and parts else ""
