"""Where an HTTP target's timings come from: server-reported fields (a preset or a field map) or the client.

`[target] timings = { preset = NAME }` or a field map of dotted JSON paths into the response
object (non-streamed) or the stream's events (streamed: the last event that holds the path):

    prefill_ms, prompt_tokens, decode_ms, generated_tokens, cache_tokens

A preset and fields may be combined (the fields override the preset's). Server-reported
timings are used wherever the spec names them; the harness measures prefill on the client
(time to the first streamed token, "client-side TTFT") only when ``client_ttft = true`` asks
for it or when no ``prefill_ms`` is reported. Samples carry ``timing_source`` and the resolved
protocol's ``target.timing`` says which, field by field.

Presets (field names from each server's own documentation):

- ``llama-server``: llama.cpp's ``timings`` object (result_timings::to_json in
  tools/server/server-task.cpp), on /completion and on its OpenAI endpoints; cache-cold runs
  send ``cache_prompt = false`` (llama-server reuses the KV cache by default).
- ``dflash-server``: lucebox's dflash_server (server/docs/API.md; build_timings_json in
  server/src/server/sse_emitter.cpp): ``usage.timings.{prefill_ms, decode_ms}`` with
  ``usage.{prompt_tokens, completion_tokens}``; fails closed when ``usage.timings.cache_hit``
  or ``usage.timings.agent_turn_cache_hit`` is true, ``usage.timings.cached_prefix_tokens`` > 0,
  or ``usage.completion_tokens`` differs from max_tokens (a short completion times less decode).
- ``vllm``, ``sglang``: the OpenAI ``usage`` object (``prompt_tokens``, ``completion_tokens``,
  ``prompt_tokens_details.cached_tokens``); neither reports prefill time in the response, so
  prefill is client-side TTFT. Prefix caching must be off: a server command must carry
  ``--no-enable-prefix-caching`` (vLLM) or ``--disable-radix-cache`` (SGLang), and any
  request reporting cached tokens fails.

Pure: no IO. `parse` validates the protocol value (a `_Checker`-like object reports errors);
`extract` reads one response.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

FIELDS = ("prefill_ms", "prompt_tokens", "decode_ms", "generated_tokens", "cache_tokens")
OPTIONAL = ("cache_tokens",)     # a server may not report cache use; None then
TIMING_KEYS = {"preset", "client_ttft", *FIELDS}
CLIENT = "client-side TTFT"
SERVER = "server"


@dataclass(frozen=True)
class Check:
    """A fail-closed condition on the response: ``rule`` over the value at ``path`` (if present)."""

    path: str
    rule: str       # "not_true" | "zero" | "equals_max_tokens"
    code: str       # the failure's name (e.g. cache_hit, short_completion)
    what: str       # one phrase for the message


@dataclass(frozen=True)
class TimingSpec:
    """Resolved `[target] timings`: field paths, the source of prefill, cold-run fields, checks."""

    preset: str | None = None
    fields: Mapping[str, str] = field(default_factory=dict)
    client_ttft: bool = False
    cold_body: Mapping[str, Any] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    prefix_cache_off_flags: tuple[str, ...] = ()

    @property
    def server_prefill(self) -> bool:
        """True when prefill_ms and decode_ms are read from the server."""
        return not self.client_ttft and "prefill_ms" in self.fields and "decode_ms" in self.fields

    @property
    def source(self) -> str:
        return SERVER if self.server_prefill else CLIENT

    def describe(self) -> str:
        """The resolved protocol's target.timing sentence: which number comes from where."""
        name = f"preset {self.preset}" if self.preset else "declared field map"
        if self.server_prefill:
            head = (f"server-reported ({name}): prefill_ms = {self.fields['prefill_ms']}, "
                    f"decode_ms = {self.fields['decode_ms']}")
        else:
            why = "asked for by client_ttft = true" if self.client_ttft else \
                "the server reports no prefill time"
            head = ("client-side TTFT: prefill_ms = time from sending the request to the first "
                    "streamed token, measured by the harness (includes HTTP and queueing); "
                    f"decode_ms = the rest of the stream ({why})")
        counts = ", ".join(f"{k} = {self.fields[k]}" for k in
                           ("prompt_tokens", "generated_tokens", "cache_tokens") if k in self.fields)
        return head + (f"; {counts}" if counts else "")

    def to_json(self) -> dict[str, Any]:
        return {"preset": self.preset, "fields": dict(self.fields),
                "client_ttft": self.client_ttft, "source": self.source,
                "cold_body": dict(self.cold_body),
                "checks": [{"path": c.path, "rule": c.rule, "code": c.code} for c in self.checks],
                "prefix_cache_off_flags": list(self.prefix_cache_off_flags)}


_LLAMA = {"prefill_ms": "timings.prompt_ms", "prompt_tokens": "timings.prompt_n",
          "decode_ms": "timings.predicted_ms", "generated_tokens": "timings.predicted_n",
          "cache_tokens": "timings.cache_n"}
_USAGE = {"prompt_tokens": "usage.prompt_tokens", "generated_tokens": "usage.completion_tokens",
          "cache_tokens": "usage.prompt_tokens_details.cached_tokens"}

PRESETS: dict[str, TimingSpec] = {
    "llama-server": TimingSpec(preset="llama-server", fields=_LLAMA,
                               cold_body={"cache_prompt": False}),
    "dflash-server": TimingSpec(
        preset="dflash-server",
        fields={"prefill_ms": "usage.timings.prefill_ms", "decode_ms": "usage.timings.decode_ms",
                "prompt_tokens": "usage.prompt_tokens",
                "generated_tokens": "usage.completion_tokens",
                "cache_tokens": "usage.timings.cached_prefix_tokens"},
        checks=(Check("usage.timings.cache_hit", "not_true", "cache_hit",
                      "the server reports a prefix-cache hit"),
                Check("usage.timings.agent_turn_cache_hit", "not_true", "cache_hit",
                      "the server reports an agent-turn cache hit"),
                Check("usage.timings.cached_prefix_tokens", "zero", "cache_hit",
                      "the server restored prompt tokens from its KV cache"),
                Check("usage.completion_tokens", "equals_max_tokens", "short_completion",
                      "the completion is not max_tokens long"))),
    "vllm": TimingSpec(preset="vllm", fields=_USAGE,
                       checks=(Check(_USAGE["cache_tokens"], "zero", "cache_hit",
                                     "the server served prompt tokens from its prefix cache"),),
                       prefix_cache_off_flags=("--no-enable-prefix-caching",)),
    "sglang": TimingSpec(preset="sglang", fields=_USAGE,
                         checks=(Check(_USAGE["cache_tokens"], "zero", "cache_hit",
                                       "the server served prompt tokens from its radix cache"),),
                         prefix_cache_off_flags=("--disable-radix-cache",)),
}
# no [target] timings: the openai target's behaviour before presets (usage counts, client TTFT)
DEFAULT = TimingSpec(fields=_USAGE)


def parse(ck: Any, value: Any, path: str) -> TimingSpec:
    """Validate `[target] timings` (a table) into a TimingSpec; ck.fail raises a UsageError."""
    if not isinstance(value, dict):
        ck.fail(path, "a table: { preset = NAME } or a field map of dotted JSON paths", value)
    ck.table(value, path, TIMING_KEYS)
    base = TimingSpec()
    if "preset" in value:
        name = ck.string(value["preset"], f"{path}.preset", choices=tuple(PRESETS))
        base = PRESETS[name]
    fields = dict(base.fields)
    for key in FIELDS:
        if key in value:
            fields[key] = _dotted(ck, value[key], f"{path}.{key}")
    client = base.client_ttft
    if "client_ttft" in value:
        client = ck.boolean(value["client_ttft"], f"{path}.client_ttft")
    if ("prefill_ms" in fields) != ("decode_ms" in fields):
        ck.fail(path, "prefill_ms and decode_ms together (or neither: client-side TTFT)",
                found="only " + ("prefill_ms" if "prefill_ms" in fields else "decode_ms"))
    if not base.preset and not fields:
        ck.fail(path, "a preset or at least one field", found="an empty table")
    return TimingSpec(preset=base.preset, fields=fields, client_ttft=client,
                      cold_body=base.cold_body, checks=base.checks,
                      prefix_cache_off_flags=base.prefix_cache_off_flags)


def _dotted(ck: Any, value: Any, path: str) -> str:
    text = ck.string(value, path)
    if any(not part or part.strip() != part for part in text.split(".")):
        ck.fail(path, 'a dotted JSON path such as "usage.timings.prefill_ms"', value)
    return text


def lookup(obj: Any, dotted: str) -> tuple[bool, Any]:
    """(found, value) of a dotted path in nested JSON objects (list indices as digits)."""
    cur = obj
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False, None
    return True, cur


def lookup_events(events: list[dict], dotted: str) -> tuple[bool, Any]:
    """The value at a path in the last event that holds it (a stream's final usage/timings)."""
    for event in reversed(events):
        found, value = lookup(event, dotted)
        if found and value is not None:
            return True, value
    return False, None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 \
        and value == value


@dataclass(frozen=True)
class Reported:
    """What the server reported, per field (None: not reported), and the raw values read."""

    prefill_ms: float | None
    decode_ms: float | None
    prompt_tokens: int | None
    generated_tokens: int | None
    cache_tokens: int | None
    raw: dict[str, Any]


def extract(spec: TimingSpec, events: list[dict], max_tokens: int,
            fail: Callable[[str, str], Exception]) -> Reported:
    """Read the spec's fields from a response (non-streamed: one event) and run its checks.

    Raises (through ``fail(code, text)``): missing_timings when a declared field is absent or
    not a number >= 0 (cache_tokens may be absent), or the check's code (cache_hit,
    short_completion) when a fail-closed check does not hold.
    """
    got: dict[str, Any] = {}
    for key, dotted in spec.fields.items():
        found, value = lookup_events(events, dotted)
        if not found:
            if key in OPTIONAL:
                got[key] = None
                continue
            raise fail("missing_timings", f"missing timings: the response has no {dotted} "
                       f"({key}, {spec.preset or 'field map'})")
        if not _number(value) or (key.endswith("tokens") and not isinstance(value, int)):
            raise fail("missing_timings", f"missing timings: {dotted} is not a number >= 0 "
                       f"({value!r})")
        got[key] = value
    for check in spec.checks:
        found, value = lookup_events(events, check.path)
        if not found:
            continue
        bad = ((check.rule == "not_true" and value is True)
               or (check.rule == "zero" and _number(value) and value > 0)
               or (check.rule == "equals_max_tokens" and value != max_tokens))
        if bad:
            detail = f"{check.path} = {value!r}"
            if check.rule == "equals_max_tokens":
                detail += f", max_tokens = {max_tokens}"
            raise fail(check.code, f"{check.code.replace('_', ' ')}: {check.what} ({detail}); "
                       "the measurement would not be comparable, so the request fails closed")

    def num(key: str, kind: type) -> Any:
        v = got.get(key)
        return None if v is None else kind(v)

    return Reported(prefill_ms=num("prefill_ms", float), decode_ms=num("decode_ms", float),
                    prompt_tokens=num("prompt_tokens", int),
                    generated_tokens=num("generated_tokens", int),
                    cache_tokens=num("cache_tokens", int), raw=got)


def prefix_cache_problem(spec: TimingSpec, argv: list[str] | None) -> str | None:
    """Why a server command leaves prefix caching on (vllm / sglang presets), or None."""
    if not spec.prefix_cache_off_flags or argv is None:
        return None
    if any(flag in argv for flag in spec.prefix_cache_off_flags):
        return None
    return (f"preset {spec.preset} needs prefix caching off: the server command must carry "
            + " or ".join(spec.prefix_cache_off_flags))


def from_json(data: dict[str, Any] | None) -> TimingSpec:
    """The TimingSpec of a resolved protocol's target.timings (None: DEFAULT, as before presets)."""
    if not data:
        return DEFAULT
    base = PRESETS.get(data.get("preset") or "", TimingSpec())
    return TimingSpec(preset=base.preset, fields=dict(data.get("fields") or {}),
                      client_ttft=bool(data.get("client_ttft")), cold_body=base.cold_body,
                      checks=base.checks, prefix_cache_off_flags=base.prefix_cache_off_flags)
