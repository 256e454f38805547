"""The `llamacpp` target: llama.cpp's POST /completion, timed by the server-reported `timings`.

Field names are llama.cpp's own (tools/server/README.md, "POST /completion"; the timings
object is result_timings::to_json in tools/server/server-task.cpp): request `prompt`,
`n_predict`, `cache_prompt`, `return_tokens`, `stream`; response `content`, `tokens`,
`tokens_cached`, and `timings.{prompt_n, prompt_ms, predicted_n, predicted_ms, cache_n}`.
prefill_ms = prompt_ms, decode_ms = predicted_ms, prompt_tokens = prompt_n (tokens
evaluated), cache hits = cache_n (else tokens_cached). Response bytes are the non-standard
`dflash.content_b64` when the server sends it (`dflash-qualify serve` does: exact bytes, even
when not valid UTF-8), else `content` encoded as UTF-8; each sample's response_source says which.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from typing import Any

from .base import Request, Response
from .http_base import HttpFailure, HttpTarget

COMPLETION_PATH = "/completion"
DETOKENIZE_PATH = "/detokenize"
REQUIRED_TIMINGS = {"prompt_n": int, "prompt_ms": (int, float), "predicted_n": int,
                    "predicted_ms": (int, float)}


def completion_body(request: Request, cache_cold: bool) -> dict[str, Any]:
    """The fields this target owns in a /completion request."""
    fields: dict[str, Any] = {
        "prompt": request.tokens if request.tokens is not None else request.text,
        "n_predict": request.max_tokens, "stream": False, "return_tokens": True}
    if cache_cold:
        fields["cache_prompt"] = False   # llama.cpp's default is true (reuse the KV cache)
    return fields


def _number(value: Any, kind: type | tuple) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool) and value >= 0


def parse_completion(data: dict[str, Any], fail: Any) -> Response:
    """A /completion response object -> Response; ``fail(code, text)`` builds the named failure."""
    timings = data.get("timings")
    if not isinstance(timings, dict):
        raise fail("missing_timings", "missing timings: the /completion response has no "
                   "timings object (llama.cpp reports prompt_n, prompt_ms, predicted_n, "
                   "predicted_ms)")
    for key, kind in REQUIRED_TIMINGS.items():
        if not _number(timings.get(key), kind):
            raise fail("missing_timings", f"missing timings: timings.{key} is missing or not a "
                       f"number >= 0 ({timings.get(key)!r})")
    content = data.get("content")
    if not isinstance(content, str):
        raise fail("malformed_response", "malformed response: content is missing or not a string")
    source, raw = "content", content.encode("utf-8")
    dflash = data.get("dflash")
    if isinstance(dflash, dict) and "content_b64" in dflash:
        try:
            raw = base64.b64decode(dflash["content_b64"], validate=True)
        except (TypeError, ValueError, binascii.Error):
            raise fail("malformed_response", "malformed response: dflash.content_b64 is not "
                       "base64") from None
        if raw.decode("utf-8", "replace") != content:
            raise fail("malformed_response", "malformed response: dflash.content_b64 does not "
                       "decode to content")
        source = "dflash.content_b64"
    widths, weight_bytes = engine_extras(dflash)
    cache = timings.get("cache_n", data.get("tokens_cached"))
    tokens = data.get("tokens")
    if not (isinstance(tokens, list) and tokens and all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens)):
        tokens = None   # llama.cpp leaves tokens empty unless return_tokens is honoured
    return Response(data=raw, prompt_tokens=int(timings["prompt_n"]),
                    generated_tokens=int(timings["predicted_n"]),
                    prefill_ms=float(timings["prompt_ms"]),
                    decode_ms=float(timings["predicted_ms"]),
                    cache_hits=cache if _number(cache, int) else None, tokens=tokens,
                    band_widths=widths, weight_bytes=weight_bytes,
                    timings=dict(timings), timing_source="server", response_source=source)


def engine_extras(dflash: Any) -> tuple[dict[str, int] | None, int | None]:
    """Band widths and weight bytes from `dflash-qualify serve`'s raw engine timings, if sent."""
    raw = dflash.get("timings") if isinstance(dflash, dict) else None
    if not isinstance(raw, dict):
        return None, None
    widths = raw.get("band_widths")
    ok = isinstance(widths, dict) and all(isinstance(v, int) for v in widths.values())
    parts = [raw.get("weight_bytes_prefill"), raw.get("weight_bytes_decode")]
    weight = sum(parts) if all(_number(p, int) for p in parts) else None
    return (dict(widths) if ok else None), weight


class LlamaCppTarget(HttpTarget):
    """llama.cpp's server (or anything answering its /completion) for one arm."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._pieces: dict[int, str] = {}     # token id -> text (POST /detokenize), per server
        self._detokenize = True               # False once the server has no /detokenize

    async def _request(self, request: Request) -> Response:
        body = self.body(completion_body(request, self.cache_cold), request.options)
        data = await self.post_json(COMPLETION_PATH, body, request.id)

        def fail(code: str, text: str) -> HttpFailure:
            return self.fail(code, f"request {request.id}: {text}")

        response = parse_completion(data, fail)
        if response.tokens and self._detokenize:
            texts = await self._token_texts(response.tokens)
            if texts is not None:
                response = dataclasses.replace(response, token_texts=texts)
        return response

    async def _token_texts(self, tokens: list[int]) -> list[str] | None:
        """Each token's text via llama-server's POST /detokenize, one call per token id not
        seen before (after the timed request, so the server's own timings are unaffected); a
        mismatch can then name the first differing token's text. None without /detokenize."""
        assert self._session is not None
        for tok in dict.fromkeys(tokens):
            if tok in self._pieces:
                continue
            try:
                async with self._session.post(self.base_url + DETOKENIZE_PATH,
                                              json={"tokens": [tok]}) as r:
                    raw = await r.read()
                    ok = r.status == 200
                piece = json.loads(raw).get("content") if ok else None
            except (ValueError, AttributeError):
                piece = None
            if not isinstance(piece, str):
                self._detokenize = False
                self._note(f"POST {DETOKENIZE_PATH} unavailable: token texts not recorded")
                return None
            self._pieces[tok] = piece
        return [self._pieces[t] for t in tokens]
