"""The `openai` target: POST /v1/completions or /v1/chat/completions, streamed or not.

`endpoint = "completions"` (default) sends the prompt as `prompt`; `endpoint = "chat"` sends
it as one user message. `stream = true` (default) reads server-sent events until
`data: [DONE]`; `stream = false` reads one JSON object. Timings follow the target's
TimingSpec (timings.py): server-reported fields wherever the spec names them; otherwise the
harness measures on the client: t0 just before the request is sent, TTFT = arrival of the
first stream event carrying a choice; prefill_ms = TTFT, decode_ms = end of the stream - TTFT
(both include HTTP and queueing; samples say "client-side TTFT"). Counts come from the spec's
fields (default: the OpenAI `usage` object, stream_options.include_usage when streamed), else
from a llama.cpp-style `timings` object. Response bytes: the text as UTF-8, or the
non-standard `dflash.content_b64` when the server sends it (exact bytes).
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import json
import time
from typing import Any, AsyncIterator

from . import timings as timings_mod
from .base import Request, Response
from .http_base import HttpFailure, HttpTarget
from .llamacpp import engine_extras

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
COMPLETIONS_PATH = ENDPOINTS["completions"]
MODELS_PATH = "/v1/models"
TIMING_SOURCE = timings_mod.CLIENT


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


def request_fields(endpoint: str, stream: bool, model: str | None, request: Request,
                   cold_body: dict[str, Any]) -> dict[str, Any]:
    """The fields this target owns in a request body (chat: the prompt as one user message)."""
    if endpoint == "chat":
        if request.text is None:
            raise ValueError("the chat endpoint sends text prompts only")
        fields: dict[str, Any] = {"messages": [{"role": "user", "content": request.text}]}
    else:
        fields = {"prompt": request.tokens if request.tokens is not None else request.text}
    fields.update(model=model, max_tokens=request.max_tokens, stream=stream)
    if stream:
        fields["stream_options"] = {"include_usage": True}
    fields.update(cold_body)
    return fields


def choice_text(choice: dict[str, Any], endpoint: str, streamed: bool) -> str | None:
    """The text one choice carries: completions `text`, chat `delta.content` / `message.content`."""
    if endpoint == "completions":
        text = choice.get("text")
    else:
        holder = choice.get("delta" if streamed else "message")
        text = holder.get("content") if isinstance(holder, dict) else None
    return text if isinstance(text, str) else None


class OpenAITarget(HttpTarget):
    """An OpenAI-compatible server's completions or chat completions endpoint for one arm."""

    def __init__(self, arm_id: str, *, endpoint: str = "completions", stream: bool = True,
                 timings: timings_mod.TimingSpec | None = None, **kw: Any) -> None:
        super().__init__(arm_id, **kw)
        if endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint {endpoint!r}")
        self.endpoint = endpoint
        self.stream = stream
        self.spec = timings or timings_mod.DEFAULT
        if not stream and not self.spec.server_prefill:
            raise ValueError("stream = false needs server-reported prefill_ms and decode_ms")

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
        path = ENDPOINTS[self.endpoint]

        def fail(code: str, text: str) -> HttpFailure:
            return self.fail(code, f"request {request.id}: {text}")

        cold = dict(self.spec.cold_body) if self.cache_cold else {}
        body = self.body(request_fields(self.endpoint, self.stream, self.model, request, cold),
                         request.options)
        state = _State(self.endpoint, self.stream)
        t0 = time.perf_counter()
        if not self.stream:
            data = await self.post_json(path, body, request.id)
            state.done = time.perf_counter()
            state.take(data, state.done, fail)
            return state.response(t0, self.spec, request.max_tokens, fail)
        async with self._session.post(self.base_url + path, json=body) as r:
            if r.status >= 400:
                raise self.http_error(r.status, path, await r.read(), request.id)
            ctype = r.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                raw = await r.read()
                raise fail("malformed_stream", f"malformed stream: POST {path} "
                           f"answered {ctype or 'no content type'}, not text/event-stream: "
                           f"{raw[:120].decode('utf-8', 'replace')!r}")
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
        self._note(f"POST {path} ({request.id}) -> {r.status}, stream of "
                   f"{state.choices} choice events")
        if state.done is None:
            raise fail("connection_reset", "connection reset: the stream ended before "
                       "data: [DONE]")
        return state.response(t0, self.spec, request.max_tokens, fail)


class _State:
    """What one response (a stream of events, or one object) has delivered so far."""

    def __init__(self, endpoint: str, streamed: bool) -> None:
        self.endpoint = endpoint
        self.streamed = streamed
        self.first: float | None = None
        self.done: float | None = None
        self.text: list[str] = []
        self.choices = 0
        self.events: list[dict[str, Any]] = []
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.content_b64: str | None = None
        self.dflash: dict[str, Any] | None = None

    def take(self, event: dict[str, Any], arrived: float, fail: Any) -> None:
        if "error" in event:
            err = event["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise fail("server_error", f"server error in the response: {str(msg)[:200]}")
        self.events.append(event)
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if self.first is None:
                self.first = arrived
            self.choices += 1
            text = choice_text(choice, self.endpoint, self.streamed)
            if text is not None:
                self.text.append(text)
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        dflash = event.get("dflash")
        if isinstance(dflash, dict) and isinstance(dflash.get("content_b64"), str):
            self.content_b64 = dflash["content_b64"]
            self.dflash = dflash

    def _bytes(self, fail: Any) -> tuple[str, bytes]:
        text = "".join(self.text)
        source, raw = ("stream text" if self.streamed else "text"), text.encode("utf-8")
        if self.content_b64 is not None:
            try:
                raw = base64.b64decode(self.content_b64, validate=True)
            except (ValueError, binascii.Error):
                raise fail("malformed_response", "malformed response: dflash.content_b64 is "
                           "not base64") from None
            if raw.decode("utf-8", "replace") != text:
                raise fail("malformed_response", "malformed response: the text differs from "
                           "dflash.content_b64")
            source = "dflash.content_b64"
        return source, raw

    def response(self, t0: float, spec: timings_mod.TimingSpec, max_tokens: int,
                 fail: Any) -> Response:
        assert self.done is not None
        source, raw = self._bytes(fail)
        got = timings_mod.extract(spec, self.events, max_tokens, fail)
        prompt = got.prompt_tokens
        if prompt is None:
            prompt = _count(self.timings.get("prompt_n"))
        if prompt is None:
            raise fail("missing_usage", "missing usage: the response reported neither "
                       "usage.prompt_tokens (stream_options.include_usage) nor timings.prompt_n")
        generated = got.generated_tokens
        if generated is None:
            generated = _count(self.timings.get("predicted_n"))
        if generated is None:
            generated = sum(1 for t in self.text if t)
        cache = got.cache_tokens
        if cache is None and "cache_tokens" not in spec.fields:
            cache = _count(self.timings.get("cache_n"))
        widths, weight_bytes = engine_extras(self.dflash)
        first = self.first if self.first is not None else self.done
        ttft_ms = (first - t0) * 1e3
        total_ms = (self.done - t0) * 1e3
        if spec.server_prefill:
            prefill_ms, decode_ms = got.prefill_ms, got.decode_ms
        else:
            prefill_ms, decode_ms = ttft_ms, max(total_ms - ttft_ms, 0.0)
        return Response(data=raw, prompt_tokens=prompt, generated_tokens=generated,
                        prefill_ms=float(prefill_ms), decode_ms=float(decode_ms),
                        cache_hits=cache, tokens=None, band_widths=widths,
                        weight_bytes=weight_bytes,
                        timings={"client_ttft_ms": ttft_ms if self.streamed else None,
                                 "client_total_ms": total_ms, "usage": self.usage,
                                 "server_timings": self.timings, "reported": got.raw},
                        timing_source=spec.source, response_source=source)
