"""The upstream dflash_server's response shape (lucebox server/docs/API.md): chat only, `usage.timings`.

No IO here, like server_api. `dflash-qualify serve --api dflash-server` answers only
GET /health, GET /, GET /v1/models and POST /v1/chat/completions, in the shape lucebox's
dflash_server uses (server/src/server/sse_emitter.cpp): ids `chatcmpl_<hex>`, and the usage
object carrying `timings = {prefill_ms, decode_ms, decode_tokens_per_sec}` plus the agent turn
cache fields of API.md (`cached_prefix_tokens`, `prefilled_tokens`, `agent_turn_cache_hit`) and
`cache_hit`. Streams always end with a usage chunk (upstream ignores stream_options), then
`data: [DONE]`. Differences kept on purpose: timings are not rounded to 0.1 ms (upstream rounds)
so tiny test models still time above zero; GET /props stays, for the evidence's engine record.
"""
from __future__ import annotations

import time
import uuid
from typing import Any

from . import server_api as api

ROUTES = ("GET /health", "GET /", "GET /v1/models", "POST /v1/chat/completions")


def new_id() -> str:
    return f"chatcmpl_{uuid.uuid4().hex[:24]}"


def usage_timings(gen: Any) -> dict[str, Any]:
    """usage.timings: wall-clock prefill / decode and the prefix-cache facts of this request."""
    t = gen.timings
    cached = int(t.get("cache_hits", 0))
    prefill_ms = t["prefill_ns"] / 1e6
    decode_ms = t["decode_ns"] / 1e6
    n = len(gen.tokens)
    return {"prefill_ms": prefill_ms, "decode_ms": decode_ms,
            "decode_tokens_per_sec": n / (decode_ms / 1e3) if decode_ms > 0 else 0.0,
            "cached_prefix_tokens": cached, "prefilled_tokens": len(gen.prompt_tokens) - cached,
            "cache_hit": cached > 0, "agent_turn_cache_hit": False}


def usage(gen: Any) -> dict[str, Any]:
    p, c = len(gen.prompt_tokens), len(gen.tokens)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "timings": usage_timings(gen)}


def chat(gen: Any, model: str) -> dict[str, Any]:
    """A non-streamed chat.completion."""
    return {"id": new_id(), "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": api.text_of(gen)},
                         "finish_reason": api.FINISH_REASON.get(gen.stop, "stop")}],
            "usage": usage(gen)}


class ChatStream:
    """The SSE chunks of one streamed chat completion, as upstream emits them."""

    def __init__(self, model: str) -> None:
        self.id = new_id()
        self.model = model
        self.created = int(time.time())

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": choices}

    def start(self) -> dict[str, Any]:
        return self._chunk([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])

    def token(self, piece: str) -> dict[str, Any]:
        return self._chunk([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])

    def finish(self, piece: str, gen: Any) -> list[dict[str, Any] | str]:
        """Held-back text (if any), the finish_reason chunk, the usage chunk, [DONE]."""
        out: list[dict[str, Any] | str] = []
        if piece:
            out.append(self.token(piece))
        out.append(self._chunk([{"index": 0, "delta": {},
                                 "finish_reason": api.FINISH_REASON.get(gen.stop, "stop")}]))
        last = self._chunk([])
        last["usage"] = usage(gen)
        return [*out, last, "[DONE]"]
