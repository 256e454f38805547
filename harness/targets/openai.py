"""The `openai` target: POST /v1/completions with stream=true, timed on the client side (TTFT).

The harness cannot see an OpenAI-compatible server's engine timings, so it measures them:
t0 just before the request is sent; TTFT = arrival of the first stream event carrying a
choice; prefill_ms = TTFT, decode_ms = end of the stream (data: [DONE]) - TTFT. Both include
HTTP and queueing time; samples say so (timing_source "client-side TTFT") and so does the
report. prompt_tokens / generated_tokens / cache hits come from the usage chunk
(stream_options.include_usage; usage.prompt_tokens_details.cached_tokens), else from a
llama.cpp-style `timings` object in the stream. Response bytes: the streamed text as UTF-8,
or the non-standard `dflash.content_b64` when the server sends it (exact bytes).
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import json
import time
from typing import Any, AsyncIterator

from .base import Request, Response
from .http_base import HttpFailure, HttpTarget
from .llamacpp import engine_extras

COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
TIMING_SOURCE = "client-side TTFT"


async def sse_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[float, str]]:
    """(arrival time, data) per server-sent event; comments and non-data fields are skipped."""
    buf = b""
    data: list[str] = []
    async for chunk in chunks:
        now = time.perf_counter()
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl].rstrip(b"\r").decode("utf-8", "replace"), buf[nl + 1:]
            if line == "":
                if data:
                    yield now, "\n".join(data)
                    data = []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield time.perf_counter(), "\n".join(data)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class OpenAITarget(HttpTarget):
    """An OpenAI-compatible server's /v1/completions (streamed) for one arm."""

    async def _identity(self) -> dict[str, Any]:
        info = await super()._identity()
        models = await self._get_json_quiet(MODELS_PATH)
        ids = [m.get("id") for m in models.get("data") or [] if isinstance(m, dict)]
        ids = [i for i in ids if isinstance(i, str)]
        if self.model is None:
            if not ids:
                raise self.fail("no_model", f"no model: GET {MODELS_PATH} listed no model id; "
                                "set target.model in the protocol")
            self.model = ids[0]
        if info["model"] is None:
            info["model"] = {"id": self.model}
        meta = next((m.get("meta") for m in models.get("data") or []
                     if isinstance(m, dict) and m.get("id") == self.model), None)
        if info["config_hash"] is None and isinstance(meta, dict):
            info["config_hash"] = meta.get("config_hash")
        return info

    async def _request(self, request: Request) -> Response:
        assert self._session is not None

        def fail(code: str, text: str) -> HttpFailure:
            return self.fail(code, f"request {request.id}: {text}")

        fields = {"model": self.model, "prompt": request.tokens if request.tokens is not None
                  else request.text, "max_tokens": request.max_tokens, "stream": True,
                  "stream_options": {"include_usage": True}}
        body = self.body(fields, request.options)
        t0 = time.perf_counter()
        async with self._session.post(self.base_url + COMPLETIONS_PATH, json=body) as r:
            if r.status >= 400:
                raise self.http_error(r.status, COMPLETIONS_PATH, await r.read(), request.id)
            ctype = r.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                raw = await r.read()
                raise fail("malformed_stream", f"malformed stream: POST {COMPLETIONS_PATH} "
                           f"answered {ctype or 'no content type'}, not text/event-stream: "
                           f"{raw[:120].decode('utf-8', 'replace')!r}")
            state = _StreamState()
            async with contextlib.aclosing(sse_events(r.content.iter_any())) as events:
                async for arrived, data in events:
                    if data.strip() == "[DONE]":
                        state.done = arrived
                        break
                    try:
                        event = json.loads(data)
                    except ValueError:
                        raise fail("malformed_json", f"malformed JSON: a stream event is not "
                                   f"JSON: {data[:120]!r}") from None
                    if not isinstance(event, dict):
                        raise fail("malformed_json", "malformed JSON: a stream event is not an "
                                   "object")
                    state.take(event, arrived, fail)
        self._note(f"POST {COMPLETIONS_PATH} ({request.id}) -> {r.status}, stream of "
                   f"{state.choices} choice events")
        if state.done is None:
            raise fail("connection_reset", "connection reset: the stream ended before "
                       "data: [DONE]")
        return state.response(t0, fail)


class _StreamState:
    """What one completion stream has delivered so far."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.done: float | None = None
        self.text: list[str] = []
        self.choices = 0
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.content_b64: str | None = None
        self.dflash: dict[str, Any] | None = None

    def take(self, event: dict[str, Any], arrived: float, fail: Any) -> None:
        if "error" in event:
            err = event["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise fail("server_error", f"server error in the stream: {str(msg)[:200]}")
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if self.first is None:
                self.first = arrived
            self.choices += 1
            if isinstance(choice.get("text"), str):
                self.text.append(choice["text"])
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        dflash = event.get("dflash")
        if isinstance(dflash, dict) and isinstance(dflash.get("content_b64"), str):
            self.content_b64 = dflash["content_b64"]
            self.dflash = dflash

    def response(self, t0: float, fail: Any) -> Response:
        assert self.done is not None
        first = self.first if self.first is not None else self.done
        text = "".join(self.text)
        source, raw = "stream text", text.encode("utf-8")
        if self.content_b64 is not None:
            try:
                raw = base64.b64decode(self.content_b64, validate=True)
            except (ValueError, binascii.Error):
                raise fail("malformed_stream", "malformed stream: dflash.content_b64 is not "
                           "base64") from None
            if raw.decode("utf-8", "replace") != text:
                raise fail("malformed_stream", "malformed stream: the streamed text differs from "
                           "dflash.content_b64")
            source = "dflash.content_b64"
        prompt = _count(self.usage.get("prompt_tokens"))
        if prompt is None:
            prompt = _count(self.timings.get("prompt_n"))
        if prompt is None:
            raise fail("missing_usage", "missing usage: the stream reported neither "
                       "usage.prompt_tokens (stream_options.include_usage) nor timings.prompt_n")
        generated = _count(self.usage.get("completion_tokens"))
        if generated is None:
            generated = _count(self.timings.get("predicted_n"))
        if generated is None:
            generated = sum(1 for t in self.text if t)
        details = self.usage.get("prompt_tokens_details")
        cache = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
        if cache is None:
            cache = _count(self.timings.get("cache_n"))
        widths, weight_bytes = engine_extras(self.dflash)
        ttft_ms = (first - t0) * 1e3
        total_ms = (self.done - t0) * 1e3
        return Response(data=raw, prompt_tokens=prompt, generated_tokens=generated,
                        prefill_ms=ttft_ms, decode_ms=max(total_ms - ttft_ms, 0.0),
                        cache_hits=cache, tokens=None, band_widths=widths,
                        weight_bytes=weight_bytes,
                        timings={"ttft_ms": ttft_ms, "stream_ms": total_ms,
                                 "usage": self.usage, "server_timings": self.timings},
                        timing_source=TIMING_SOURCE, response_source=source)
