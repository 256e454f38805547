"""[target] timings presets and field maps (harness/targets/timings.py) and the openai target's
endpoint / stream keys: validation errors are one line; extraction reads documented field
names; fail-closed checks name their reason."""
from __future__ import annotations

import pytest

from dflash_qualify.harness import protocol as protocol_mod
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.targets import timings
from dflash_qualify.harness.targets.http_base import HttpFailure

PROTO = """\
schema_version = 1
kind = "bracket"
name = "p"
[target]
kind = "openai"
command = {command}
{target}
[[prompts]]
id = "p"
text = "x"
[[arms]]
id = "A"
role = "reference"
[[arms]]
id = "cand"
role = "candidate"
"""
SRV = '["srv", "--port", "{port}"]'


def load(tmp_path, target, command=SRV):
    path = tmp_path / "p.toml"
    path.write_text(PROTO.format(command=command, target=target))
    return protocol_mod.load(str(path)).resolved


@pytest.mark.parametrize("target, message", [
    ('endpoint = "responses"', 'target.endpoint: expected one of "completions", "chat"'),
    ('stream = "yes"', "target.stream: expected a boolean"),
    ('timings = { preset = "tgi" }', 'target.timings.preset: expected one of "llama-server"'),
    ('timings = { prefill_ms = "t.p" }', "target.timings: expected prefill_ms and decode_ms together"),
    ('timings = { prefill_ms = "t..p", decode_ms = "t.d" }', "target.timings.prefill_ms: expected a dotted JSON path"),
    ('timings = { speed = "x" }', "target.timings.speed: unknown key"),
    ('timings = {}', "target.timings: expected a preset or at least one field"),
    ('stream = false', "target.stream: expected true when prefill is measured on the client"),
    ('stream = false\ntimings = { preset = "vllm" }', "found false with no server-reported prefill_ms"),
    ('stream = false\ntimings = { preset = "llama-server", client_ttft = true }', "found false with client_ttft = true"),
    ('timings = { preset = "vllm" }', "target.timings.preset: expected preset vllm needs prefix caching off: the server command must carry --no-enable-prefix-caching"),
    ('timings = { preset = "sglang" }', "must carry --disable-radix-cache"),
    ('extra_body = { messages = [] }', "target.extra_body.messages: expected a field the harness does not set itself"),
])
def test_openai_target_keys_are_checked_in_one_line(tmp_path, target, message):
    with pytest.raises(UsageError) as err:
        load(tmp_path, target)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_resolved_target_says_where_each_number_comes_from(tmp_path):
    t = load(tmp_path, 'endpoint = "chat"\nstream = false\ntimings = { preset = "llama-server" }')["target"]
    assert (t["endpoint"], t["stream"]) == ("chat", False)
    assert t["timings"]["source"] == "server" and t["timings"]["cold_body"] == {"cache_prompt": False}
    assert t["timing"].startswith("server-reported (preset llama-server): prefill_ms = timings.prompt_ms")
    t = load(tmp_path, "")["target"]
    assert (t["endpoint"], t["stream"], t["timings"]["source"]) == ("completions", True, "client-side TTFT")
    assert t["timing"].startswith("client-side TTFT: prefill_ms = time from sending the request")
    t = load(tmp_path, 'timings = { preset = "llama-server", client_ttft = true }')["target"]
    assert "asked for by client_ttft = true" in t["timing"] and t["timings"]["source"] == "client-side TTFT"
    t = load(tmp_path, 'timings = { preset = "vllm" }',
             command='["vllm", "serve", "m", "--no-enable-prefix-caching", "--port", "{port}"]')["target"]
    assert "the server reports no prefill time" in t["timing"]
    t = load(tmp_path, 'timings = { preset = "dflash-server", prefill_ms = "x.pre", decode_ms = "x.dec" }')["target"]
    assert t["timings"]["fields"]["prefill_ms"] == "x.pre" and t["timings"]["preset"] == "dflash-server"
    assert timings.from_json(t["timings"]).checks == timings.PRESETS["dflash-server"].checks


def test_attached_vllm_warns_that_prefix_caching_cannot_be_checked(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(PROTO.replace("command = {command}", 'url = "http://127.0.0.1:1"').format(
        target='timings = { preset = "vllm" }'))
    warnings = protocol_mod.load(str(path)).resolved["warnings"]
    assert any("cannot check that prefix caching is off" in w for w in warnings)


def fail(code, text):
    return HttpFailure(code, text)


# lucebox dflash_server, non-streamed chat completion (server/docs/API.md; sse_emitter.cpp)
DFLASH = {"id": "chatcmpl_1", "object": "chat.completion", "choices": [],
          "usage": {"prompt_tokens": 90, "completion_tokens": 8, "total_tokens": 98,
                    "timings": {"prefill_ms": 12.5, "decode_ms": 30.0,
                                "decode_tokens_per_sec": 266.7}}}


def test_dflash_server_preset_reads_usage_timings_and_fails_closed():
    spec = timings.PRESETS["dflash-server"]
    got = timings.extract(spec, [DFLASH], 8, fail)
    assert (got.prefill_ms, got.decode_ms, got.prompt_tokens, got.generated_tokens,
            got.cache_tokens) == (12.5, 30.0, 90, 8, None)
    for patch, code, text in [
        ({"cache_hit": True}, "cache_hit", "usage.timings.cache_hit = True"),
        ({"agent_turn_cache_hit": True}, "cache_hit", "agent-turn cache hit"),
        ({"cached_prefix_tokens": 64}, "cache_hit", "usage.timings.cached_prefix_tokens = 64"),
    ]:
        event = {**DFLASH, "usage": {**DFLASH["usage"],
                                     "timings": {**DFLASH["usage"]["timings"], **patch}}}
        with pytest.raises(HttpFailure) as err:
            timings.extract(spec, [event], 8, fail)
        assert err.value.code == code and text in str(err.value)
    with pytest.raises(HttpFailure) as err:
        timings.extract(spec, [DFLASH], 16, fail)
    assert err.value.code == "short_completion"
    assert "usage.completion_tokens = 8, max_tokens = 16" in str(err.value)
    missing = {**DFLASH, "usage": {"prompt_tokens": 90, "completion_tokens": 8}}
    with pytest.raises(HttpFailure, match="missing timings: the response has no usage.timings.prefill_ms"):
        timings.extract(spec, [missing], 8, fail)


def test_llama_server_preset_and_stream_events_use_the_last_event_holding_a_path():
    spec = timings.PRESETS["llama-server"]
    events = [{"choices": [{"delta": {"content": "a"}}]},
              {"choices": [{"delta": {}, "finish_reason": "length"}],
               "timings": {"prompt_n": 9, "prompt_ms": 3.5, "predicted_n": 4, "predicted_ms": 8.0,
                           "cache_n": 0}},
              {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}]
    got = timings.extract(spec, events, 4, fail)
    assert (got.prefill_ms, got.prompt_tokens, got.decode_ms, got.generated_tokens, got.cache_tokens) \
        == (3.5, 9, 8.0, 4, 0)
    assert timings.lookup({"a": [{"b": 1}]}, "a.0.b") == (True, 1)
    assert timings.lookup({"a": 1}, "a.b") == (False, None)
    bad = [{"timings": {**events[1]["timings"], "prompt_ms": "fast"}}]
    with pytest.raises(HttpFailure, match="timings.prompt_ms is not a number"):
        timings.extract(spec, bad, 4, fail)


def test_vllm_preset_fails_on_reported_cached_tokens():
    spec = timings.PRESETS["vllm"]
    ok = {"usage": {"prompt_tokens": 5, "completion_tokens": 2,
                    "prompt_tokens_details": {"cached_tokens": 0}}}
    assert timings.extract(spec, [ok], 2, fail).cache_tokens == 0
    hit = {"usage": {**ok["usage"], "prompt_tokens_details": {"cached_tokens": 16}}}
    with pytest.raises(HttpFailure) as err:
        timings.extract(spec, [hit], 2, fail)
    assert err.value.code == "cache_hit" and "prefix cache" in str(err.value)
