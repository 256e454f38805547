"""The upstream engine's road end to end: `serve --api dflash-server` (lucebox dflash_server's shape)
through the openai target's chat endpoint and the dflash-server timings preset: A/bands/B seals
and verifies on server-reported usage.timings; a cache hit or a short completion fails closed
with a named reason; the official openai client reads the shape."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import openai
import pytest

from dflash_qualify.harness import protocol as protocol_mod
from dflash_qualify.harness import kinds
from dflash_qualify.harness.errors import RunFailed
from dflash_qualify.harness.verify import verify

from test_server import Server

PROTOCOL = Path(protocol_mod.bundled_dir()) / "serve-dflash-server-aba.toml"


def samples_of(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]


def variant(tmp_path: Path, **replace: str) -> str:
    text = PROTOCOL.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "p.toml"
    path.write_text(text)
    return str(path)


def test_bracket_on_server_reported_usage_timings_seals_and_verifies(tmp_path):
    loaded = protocol_mod.load("serve-dflash-server-aba", warmups=1, measured=2)
    out = kinds.qualify(loaded, tmp_path / "ev", invocation="test")
    assert verify(out.path).ok
    samples = samples_of(out.path)
    assert len(samples) == 9 and out.stats["responses"]["identical"] is True
    assert {s["timing_source"] for s in samples} == {"server"}
    assert all(s["cache_hits"] == 0 and s["generated_tokens"] == 8 for s in samples)
    assert all(0 < s["prefill_ms"] < s["wall_ms"] for s in samples)
    for s in samples:   # bands only in the candidate: the env reached each arm's server
        assert s["response_source"] == "stream text"
    report = (out.path / "report.md").read_text()
    assert "server-reported (preset dflash-server): prefill_ms = usage.timings.prefill_ms" in report
    logs = (out.path / "logs" / "cand.log").read_text()
    assert "POST /v1/chat/completions" in logs


def test_cache_hit_fails_closed_with_a_named_reason(tmp_path):
    # the prefix cache serves non-streamed requests: the second request reports cached tokens
    spec = variant(tmp_path, **{'stream = true': 'stream = false',
                                '"--threads", "1",': '"--threads", "1", "--prefix-cache-slots", "2",'})
    with pytest.raises(RunFailed, match=r"cache hit: the server reports a prefix-cache hit "
                                         r"\(usage.timings.cache_hit = True\)"):
        kinds.qualify(protocol_mod.load(spec, warmups=1, measured=1), tmp_path / "ev",
                       invocation="test")
    (d,) = (tmp_path / "ev").iterdir()
    assert d.name.endswith(".partial")
    assert "cache hit" in (d / "INCOMPLETE").read_text()


def test_short_completion_fails_closed_with_a_named_reason(tmp_path):
    # ds4-tiny's context is 512 tokens: asking for 600 stops at the context end, short
    spec = variant(tmp_path, **{"max_tokens = 8": "max_tokens = 600"})
    with pytest.raises(RunFailed, match=r"short completion: the completion is not max_tokens "
                                         r"long \(usage.completion_tokens = \d+, max_tokens = 600\)"):
        kinds.qualify(protocol_mod.load(spec, warmups=0, measured=1), tmp_path / "ev",
                       invocation="test")


@pytest.fixture(scope="module")
def upstream_shaped(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("dflash-server"), "--api", "dflash-server")
    yield srv
    srv.stop()


def test_official_openai_client_reads_the_upstream_shape(upstream_shaped):
    with upstream_shaped.openai() as client:
        plain = client.chat.completions.create(
            model="ds4-tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=6)
        assert plain.id.startswith("chatcmpl_") and plain.usage.completion_tokens == 6
        timings = plain.usage.model_extra["timings"]
        assert timings["prefill_ms"] > 0 and timings["decode_ms"] > 0
        assert timings["cached_prefix_tokens"] == 0 and timings["cache_hit"] is False
        chunks = list(client.chat.completions.create(
            model="ds4-tiny", messages=[{"role": "user", "content": "hello there"}], max_tokens=6,
            stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == plain.choices[0].message.content
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
        assert chunks[-1].usage.model_extra["timings"]["prefill_ms"] > 0
        with pytest.raises(openai.NotFoundError):   # chat only, like upstream
            client.completions.create(model="ds4-tiny", prompt="x", max_tokens=2)
