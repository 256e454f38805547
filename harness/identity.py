"""Response identity: did every request for a prompt produce the same bytes, and if not, where first?

Pure: sample records in, a JSON-ready dict out. Response bytes are fetched through a
callable (`sha256 hex -> bytes`) so evidence, tests and `analyze` supply them their own way.
"""
from __future__ import annotations

from typing import Callable

BYTES_HASHED = "the generated continuation's raw bytes (not the prompt)"


def _key(sample: dict) -> tuple[str, str]:
    group = sample.get("group")
    prompt = sample.get("prompt_id")
    return ("" if group is None else str(group), "" if prompt is None else str(prompt))


def _where(sample: dict) -> dict:
    return {k: sample.get(k) for k in ("arm", "phase", "index", "seq", "response_sha256")}


def first_difference(a: bytes, b: bytes) -> int | None:
    """Index of the first byte where a and b differ (the shorter length if one is a prefix); None if equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def check(samples: list[dict], reference_arms: set[str],
          response_bytes: Callable[[str], bytes]) -> dict:
    """Group requests by (group, prompt_id) and check every response SHA-256 agrees.

    The reference response of a prompt is its earliest request (lowest seq) from a
    reference arm, or its earliest request if no reference arm asked it. Warm-ups count.
    Failed requests (ok false) and requests without a hash are counted, not compared.

    Returns:
        {"bytes_hashed", "total", "hashed", "identical" (True/False, or None when no request
         carried a hash), "prompts": [{"group", "prompt_id", "sha256", "requests",
         "distinct"}], "mismatches": int, "first_mismatch": {...} or None}
    """
    ordered = sorted(samples, key=lambda s: s.get("seq", 0))
    by_prompt: dict[tuple[str, str], list[dict]] = {}
    hashed = 0
    for s in ordered:
        if s.get("ok", True) is False or not s.get("response_sha256"):
            continue
        hashed += 1
        by_prompt.setdefault(_key(s), []).append(s)

    prompts, mismatches, first = [], 0, None
    for key in by_prompt:  # in order of first appearance (seq), i.e. the protocol's order
        group_samples = by_prompt[key]
        refs = [s for s in group_samples if s.get("arm") in reference_arms]
        reference = (refs or group_samples)[0]
        ref_sha = reference["response_sha256"]
        distinct = sorted({s["response_sha256"] for s in group_samples})
        prompts.append({"group": key[0] or None, "prompt_id": key[1] or None, "sha256": ref_sha,
                        "requests": len(group_samples), "distinct": len(distinct)})
        for s in group_samples:
            if s["response_sha256"] == ref_sha:
                continue
            mismatches += 1
            if first is None or s.get("seq", 0) < first["request"]["seq"]:
                first = _mismatch(key, s, reference, response_bytes)
    identical = None if hashed == 0 else mismatches == 0
    return {"bytes_hashed": BYTES_HASHED, "total": len(samples), "hashed": hashed,
            "identical": identical, "prompts": prompts, "mismatches": mismatches,
            "first_mismatch": first}


def _mismatch(key: tuple[str, str], sample: dict, reference: dict,
              response_bytes: Callable[[str], bytes]) -> dict:
    out = {"group": key[0] or None, "prompt_id": key[1] or None, "request": _where(sample),
           "reference": _where(reference), "first_differing_byte": None,
           "response_len": None, "reference_len": None, "reason": None}
    try:
        got = response_bytes(sample["response_sha256"])
        want = response_bytes(reference["response_sha256"])
    except (OSError, KeyError, LookupError) as exc:
        out["reason"] = f"response bytes not available ({type(exc).__name__})"
        return out
    out["first_differing_byte"] = first_difference(want, got)
    out["response_len"], out["reference_len"] = len(got), len(want)
    return out
