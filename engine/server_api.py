"""HTTP API shapes of `dflash-qualify serve`: request parsing and llama.cpp / OpenAI payloads.

No IO here: functions take parsed JSON and engine results and return dicts. Field names follow
llama.cpp's server (tools/server/README.md, "POST /completion" response format, and
result_timings::to_json in tools/server/server-task.cpp) and OpenAI's completions and chat
completions APIs. Decoding is always greedy: sampling fields (temperature, top_p, ...) are
accepted and ignored.

Chat template (/v1/chat/completions): each message becomes "<|{role}|>\\n{content}\\n", in
order, and the prompt ends with "<|assistant|>\\n". The prompt is then byte-tokenized with BOS
prepended, like any text prompt. Content may be a string or a list of {"type": "text"} parts.
"""
from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

ENGINE_OPTIONS = ("bands", "chunk", "mmvq_max_ncols", "mode")  # per-request engine options
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
OPENAI_COMPLETION_DEFAULT_MAX = 16  # OpenAI's documented default for /v1/completions

# engine stop reason -> llama.cpp stop_type / OpenAI finish_reason
STOP_TYPE = {"eos": "eos", "max_tokens": "limit", "ctx": "limit"}
FINISH_REASON = {"eos": "stop", "max_tokens": "length", "ctx": "length"}


class ApiError(Exception):
    """A request the server refuses: HTTP status, OpenAI error type and a one-line message."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def error_payload(status: int, message: str, kind: str) -> dict[str, Any]:
    """OpenAI's error shape (llama.cpp uses the same, with the HTTP status as code)."""
    return {"error": {"message": message, "type": kind, "code": status}}


@dataclass(frozen=True)
class GenRequest:
    """One generation request, whichever API it came from.

    prompt: text (BOS prepended) or token ids (used as is). max_tokens: None means until EOS
    or the end of the context. options: per-request engine options (ENGINE_OPTIONS).
    """

    prompt: str | list[int]
    max_tokens: int | None
    cache_prompt: bool = True
    stream: bool = False
    include_usage: bool = False
    options: dict[str, Any] = field(default_factory=dict)


# -- parsing ------------------------------------------------------------------------------------
def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or ApiError 400."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        msg = f"{exc.msg} at line {exc.lineno} column {exc.colno}" if isinstance(
            exc, json.JSONDecodeError) else "body is not UTF-8"
        raise ApiError(400, f"request body is not valid JSON: {msg}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _int_field(body: dict[str, Any], key: str, *, minimum: int) -> int | None:
    val = body.get(key)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, int) or val < minimum:
        raise ApiError(400, f"{key} must be an integer >= {minimum}, got {val!r}")
    return val


def _bool_field(body: dict[str, Any], key: str, default: bool) -> bool:
    val = body.get(key, default)
    if not isinstance(val, bool):
        raise ApiError(400, f"{key} must be true or false, got {val!r}")
    return val


def _prompt(val: Any, key: str = "prompt") -> str | list[int]:
    if isinstance(val, str):
        return val
    if isinstance(val, list):
        if len(val) == 1 and isinstance(val[0], (str, list)):
            return _prompt(val[0], key)  # a batch of one
        if all(isinstance(t, int) and not isinstance(t, bool) for t in val):
            return list(val)  # token ids; range checked by the engine
        raise ApiError(400, f"{key} must be a string or an array of token ids "
                            "(batched and mixed prompts are not supported)")
    raise ApiError(400, f"{key} must be a string or an array of token ids, got {type(val).__name__}")


def _no_stop_strings(body: dict[str, Any]) -> None:
    stop = body.get("stop")
    if stop not in (None, [], ""):
        raise ApiError(400, "stop strings are not supported; generation stops at EOS or max tokens")


def _options(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ENGINE_OPTIONS if k in body and body[k] is not None}


def parse_llama_completion(body: dict[str, Any]) -> GenRequest:
    """llama.cpp POST /completion: prompt, n_predict (-1 = unlimited), cache_prompt, stream."""
    if "prompt" not in body:
        raise ApiError(400, "missing field: prompt")
    n_predict = body.get("n_predict", -1)
    if isinstance(n_predict, bool) or not isinstance(n_predict, int) or n_predict < -1:
        raise ApiError(400, f"n_predict must be an integer >= -1, got {n_predict!r}")
    _no_stop_strings(body)
    return GenRequest(prompt=_prompt(body["prompt"]), max_tokens=None if n_predict == -1 else n_predict,
                      cache_prompt=_bool_field(body, "cache_prompt", True),
                      stream=_bool_field(body, "stream", False), options=_options(body))


def _openai_common(body: dict[str, Any]) -> dict[str, Any]:
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, f"n must be 1 (one choice per request), got {n!r}")
    _no_stop_strings(body)
    so = body.get("stream_options") or {}
    if not isinstance(so, dict):
        raise ApiError(400, "stream_options must be an object")
    return {"cache_prompt": _bool_field(body, "cache_prompt", True),
            "stream": _bool_field(body, "stream", False),
            "include_usage": _bool_field(so, "include_usage", False), "options": _options(body)}


def parse_openai_completion(body: dict[str, Any]) -> GenRequest:
    """OpenAI POST /v1/completions: prompt, max_tokens (default 16), stream."""
    if "prompt" not in body:
        raise ApiError(400, "missing field: prompt")
    max_tokens = _int_field(body, "max_tokens", minimum=0)
    return GenRequest(prompt=_prompt(body["prompt"]),
                      max_tokens=OPENAI_COMPLETION_DEFAULT_MAX if max_tokens is None else max_tokens,
                      **_openai_common(body))


def render_chat(messages: Any) -> str:
    """Messages -> prompt text with the template in this module's docstring."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty array")
    parts = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ApiError(400, f"messages[{i}] must be an object")
        role, content = msg.get("role"), msg.get("content")
        if role not in CHAT_ROLES:
            raise ApiError(400, f"messages[{i}].role must be one of {list(CHAT_ROLES)}, got {role!r}")
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(
                        part.get("text"), str):
                    raise ApiError(400, f"messages[{i}].content[{j}] must be a text part")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string or an array of text parts")
        parts.append(f"<|{role}|>\n{content}\n")
    return "".join(parts) + "<|assistant|>\n"


def parse_openai_chat(body: dict[str, Any]) -> GenRequest:
    """OpenAI POST /v1/chat/completions: messages, max_completion_tokens / max_tokens, stream."""
    max_tokens = _int_field(body, "max_completion_tokens", minimum=0)
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens", minimum=0)
    return GenRequest(prompt=render_chat(body.get("messages")), max_tokens=max_tokens,
                      **_openai_common(body))


# -- responses ----------------------------------------------------------------------------------
def _rate(n: int, ms: float) -> tuple[float, float]:
    """(ms per token, tokens per second); 0.0 for both when undefined (JSON has no NaN)."""
    if n <= 0 or ms <= 0:
        return 0.0, 0.0
    return ms / n, 1e3 / ms * n


def llama_timings(gen: Any) -> dict[str, Any]:
    """llama.cpp result_timings: prompt_n counts prompt tokens evaluated (not served from cache)."""
    t = gen.timings
    cache_n = int(t.get("cache_hits", 0))
    prompt_n = len(gen.prompt_tokens) - cache_n
    prompt_ms = t["prefill_ns"] / 1e6
    predicted_n = len(gen.tokens)
    predicted_ms = t["decode_ns"] / 1e6
    p_tok, p_sec = _rate(prompt_n, prompt_ms)
    d_tok, d_sec = _rate(predicted_n, predicted_ms)
    return {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms, "prompt_per_token_ms": p_tok,
            "prompt_per_second": p_sec, "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": d_tok, "predicted_per_second": d_sec}


def dflash_block(gen: Any, config_hash: str) -> dict[str, Any]:
    """Non-standard: the engine's raw timings and the exact response bytes (base64)."""
    return {"content_b64": base64.b64encode(bytes(gen.text)).decode("ascii"), "config_hash": config_hash,
            "timings": dict(gen.timings)}


def text_of(gen: Any) -> str:
    return bytes(gen.text).decode("utf-8", errors="replace")


def llama_completion(gen: Any, req: GenRequest, model: str, config_hash: str) -> dict[str, Any]:
    """The llama.cpp /completion response body (non-streamed, or the final streamed event)."""
    return {
        "index": 0, "content": text_of(gen), "tokens": [int(x) for x in gen.tokens], "id_slot": 0,
        "stop": True, "model": model, "tokens_predicted": len(gen.tokens),
        "tokens_evaluated": len(gen.prompt_tokens),
        "generation_settings": {"n_predict": -1 if req.max_tokens is None else req.max_tokens,
                                "cache_prompt": req.cache_prompt, "stream": req.stream, "model": model,
                                **req.options},
        "truncated": gen.stop == "ctx", "stop_type": STOP_TYPE.get(gen.stop, gen.stop),
        "stopping_word": "", "tokens_cached": int(gen.timings.get("cache_hits", 0)),
        "timings": llama_timings(gen), "dflash": dflash_block(gen, config_hash),
    }


def llama_stream_event(piece: str, token: int) -> dict[str, Any]:
    """One streamed /completion event (llama.cpp: content, tokens, stop)."""
    return {"index": 0, "content": piece, "tokens": [token], "stop": False}


def usage(gen: Any) -> dict[str, int]:
    p, c = len(gen.prompt_tokens), len(gen.tokens)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": int(gen.timings.get("cache_hits", 0))}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _envelope(rid: str, obj: str, model: str, created: int) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": created, "model": model}


def openai_completion(gen: Any, model: str, config_hash: str) -> dict[str, Any]:
    """OpenAI text_completion response (plus llama.cpp-style timings and the dflash block)."""
    body = _envelope(new_id("cmpl"), "text_completion", model, int(time.time()))
    body["choices"] = [{"text": text_of(gen), "index": 0, "logprobs": None,
                        "finish_reason": FINISH_REASON.get(gen.stop, "stop")}]
    body.update(usage=usage(gen), timings=llama_timings(gen), dflash=dflash_block(gen, config_hash))
    return body


def openai_chat(gen: Any, model: str, config_hash: str) -> dict[str, Any]:
    """OpenAI chat.completion response (plus llama.cpp-style timings and the dflash block)."""
    body = _envelope(new_id("chatcmpl"), "chat.completion", model, int(time.time()))
    body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text_of(gen)},
                        "logprobs": None, "finish_reason": FINISH_REASON.get(gen.stop, "stop")}]
    body.update(usage=usage(gen), timings=llama_timings(gen), dflash=dflash_block(gen, config_hash))
    return body


class OpenAIStream:
    """Builds the SSE chunks of one streamed OpenAI response (completions or chat)."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.model = model
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        self._first = True

    def _chunk(self, choice: dict[str, Any] | None) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        body = _envelope(self.id, obj, self.model, self.created)
        body["choices"] = [] if choice is None else [choice]
        return body

    def token(self, piece: str) -> dict[str, Any]:
        """The chunk for one generated token (piece may be "" while UTF-8 is incomplete)."""
        if not self.chat:
            return self._chunk({"text": piece, "index": 0, "logprobs": None, "finish_reason": None})
        delta: dict[str, Any] = {"content": piece}
        if self._first:
            delta = {"role": "assistant", **delta}
            self._first = False
        return self._chunk({"index": 0, "delta": delta, "logprobs": None, "finish_reason": None})

    def finish(self, piece: str, gen: Any, config_hash: str) -> dict[str, Any]:
        """The last choice chunk: any held-back text, finish_reason, timings, dflash block."""
        reason = FINISH_REASON.get(gen.stop, "stop")
        if self.chat:
            delta: dict[str, Any] = {"content": piece} if piece else {}
            if self._first:
                delta = {"role": "assistant", **delta}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"text": piece, "index": 0, "logprobs": None, "finish_reason": reason}
        body = self._chunk(choice)
        body.update(timings=llama_timings(gen), dflash=dflash_block(gen, config_hash))
        return body

    def usage_chunk(self, gen: Any) -> dict[str, Any]:
        """stream_options.include_usage: a final chunk with empty choices and the usage."""
        body = self._chunk(None)
        body["usage"] = usage(gen)
        return body


def props(model: str, model_path: str, identity: dict[str, Any]) -> dict[str, Any]:
    """GET /props: llama.cpp's model_alias / model_path / total_slots, and the engine identity."""
    return {"model_alias": model, "model_path": model_path, "total_slots": 1, "dflash": identity}


def models_list(model: str, config_hash: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created,
                                        "owned_by": "dflash-qualify", "meta": {"config_hash": config_hash}}]}
