"""The `openai` target's protocol keys: endpoint, stream and timings (validated, resolved to JSON)."""
from __future__ import annotations

from typing import Any

from . import timings as timings_mod

ENDPOINTS = ("completions", "chat")
KEYS = {"endpoint", "stream", "timings"}
RESERVED = ("prompt", "messages", "max_tokens", "stream", "stream_options", "model")


def parse(ck: Any, t: dict[str, Any], commands: list[list[str]], attached: bool
          ) -> tuple[dict[str, Any], list[str]]:
    """[target] endpoint / stream / timings -> (resolved fields, warnings).

    Args:
        ck: the protocol checker (its fail() raises a one-line UsageError).
        t: the [target] table.
        commands: every server command template the protocol starts (target and arms).
        attached: True when the target attaches to running servers (url).
    """
    endpoint = ck.string(t.get("endpoint", "completions"), "target.endpoint", choices=ENDPOINTS)
    stream = ck.boolean(t.get("stream", True), "target.stream")
    spec = timings_mod.DEFAULT
    if "timings" in t:
        spec = timings_mod.parse(ck, t["timings"], "target.timings")
    if not stream and not spec.server_prefill:
        why = "client_ttft = true" if spec.client_ttft else "no server-reported prefill_ms"
        ck.fail("target.stream", "true when prefill is measured on the client (time to the "
                "first streamed token); with stream = false give server-reported prefill_ms "
                "and decode_ms (a timings preset or field map)", found=f"false with {why}")
    warnings: list[str] = []
    for argv in commands:
        problem = timings_mod.prefix_cache_problem(spec, argv)
        if problem:
            ck.fail("target.timings.preset", problem, found=" ".join(argv)[:60])
    if attached and spec.prefix_cache_off_flags:
        warnings.append(f"preset {spec.preset}: attached server(s) were started outside the "
                        "harness, so the harness cannot check that prefix caching is off ("
                        + " or ".join(spec.prefix_cache_off_flags) + "); requests reporting "
                        "cached tokens still fail")
    return ({"endpoint": endpoint, "stream": stream, "timings": spec.to_json(),
             "timing": spec.describe()}, warnings)
