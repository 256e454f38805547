"""The `openai` target's own [target] keys: endpoint, stream and timings (parsed into HttpOptions).

`parse_fields` reads the keys of one table (targets/options.py calls it for kind = "openai");
`check_commands` is the cross-key rule protocol.resolve applies once every server command is
known: a timings preset that needs prefix caching off (vllm, sglang) refuses a command without
its flag, and warns for attached servers it cannot check.
"""
from __future__ import annotations

from typing import Any

from . import timings as timings_mod

ENDPOINTS = ("completions", "chat")
KEYS = {"endpoint", "stream", "timings"}
RESERVED = ("prompt", "messages", "max_tokens", "stream", "stream_options", "model")


def parse_fields(ck: Any, t: dict[str, Any]) -> tuple[str, bool, timings_mod.TimingSpec]:
    """[target] endpoint / stream / timings -> (endpoint, stream, TimingSpec)."""
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
    return endpoint, stream, spec


def check_commands(ck: Any, timings_json: dict[str, Any] | None, commands: list[list[str]],
                   attached: bool) -> list[str]:
    """A preset's prefix-caching rule over every server command; returns the warnings."""
    spec = timings_mod.from_json(timings_json)
    for argv in commands:
        problem = timings_mod.prefix_cache_problem(spec, argv)
        if problem:
            ck.fail("target.timings.preset", problem, found=" ".join(argv)[:60])
    if attached and spec.prefix_cache_off_flags:
        return [f"preset {spec.preset}: attached server(s) were started outside the harness, so "
                "the harness cannot check that prefix caching is off ("
                + " or ".join(spec.prefix_cache_off_flags) + "); requests reporting cached "
                "tokens still fail"]
    return []
