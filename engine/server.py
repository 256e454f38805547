"""HTTP server of the embedded engine: llama.cpp and OpenAI APIs over aiohttp, one request at a time.

Routes: GET /health (/v1/health), POST /completion and GET /props (llama.cpp), GET /v1/models,
POST /v1/completions, POST /v1/chat/completions (OpenAI, with SSE streaming). Payloads are
shaped in server_api. The model loads in the background after the socket is bound (/health
answers 503 until it is ready). Every engine call runs on one dedicated thread and every
request holds one asyncio.Lock from prefill to its last byte, so concurrent clients queue and
never share engine state. Engine options come from flags (ServerConfig) over the environment
(DFLASH_DS4_EXACT_PREFILL_BANDS, LUCE_MMVQ_MAX_NCOLS), as the Engine resolves them.

Prefix cache: used only when the server has slots, the request says cache_prompt (llama.cpp's
default, true) and the response is not streamed; otherwise the prompt is prefilled cold.
"""
from __future__ import annotations

import asyncio
import codecs
import hashlib
import json
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from . import _core
from . import dflash_server_api as dflash_api
from . import server_api as api
from .config import load_config
from .engine import Engine
from .errors import EngineError
from .options import (ENV_BANDS, ENV_MMVQ, check_bands, check_chunk, check_mmvq, env_bands,
                      env_mmvq_max_ncols, resolve)
from .results import GenerateResult
from .tokenizer import detokenize, prompt_tokens

log = logging.getLogger("dflash_qualify.engine.server")
ACCESS_LOG_FORMAT = '%a "%r" %s %b %Tfs'
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
APIS = ("dflash", "dflash-server")  # serve --api: our routes, or lucebox dflash_server's shape
SHUTDOWN_GRACE_S = 5.0  # in-flight requests get this long after SIGTERM/SIGINT, then are cancelled


@dataclass(frozen=True)
class ServerConfig:
    """What `dflash-qualify serve` was asked for. None engine options defer to the environment."""

    model: str = "ds4-mini"
    seed: int = 0
    threads: int | None = None
    bands: bool | None = None
    chunk: int | None = None
    mmvq_max_ncols: int | None = None
    prefix_cache_slots: int = 0
    host: str = "127.0.0.1"
    port: int = 8080
    api: str = "dflash"   # "dflash": llama.cpp + OpenAI routes; "dflash-server": upstream shape


    @property
    def model_name(self) -> str:
        """The name clients see: a built-in config name, or a config file's stem."""
        return Path(self.model).stem if Path(self.model).suffix else str(self.model)


def check_config(config: ServerConfig) -> None:
    """Fail fast (EngineError) on a bad model file, option or environment value, before binding."""
    check_bands(config.bands)
    check_chunk(config.chunk)
    check_mmvq(config.mmvq_max_ncols)
    env_bands()
    env_mmvq_max_ncols()
    load_config(config.model)
    if not 0 <= config.port <= 65535:
        raise EngineError(f"port must be 0..65535, got {config.port}")
    if config.api not in APIS:
        raise EngineError(f"api must be one of {', '.join(APIS)}, got {config.api!r}")


# -- generation (every function here runs on the engine thread) ----------------------------------
def _widths(band_widths: list[int]) -> dict[str, int]:
    out = {str(w): 0 for w in range(1, 5)}
    for w in band_widths:
        out[str(w)] = out.get(str(w), 0) + 1
    return out


def _timings(toks: list[int], gen: list[int], pre: Any, decode_ns: int, decode_bytes: int | None,
             stop: str) -> dict[str, Any]:
    """Engine.generate's timings record for a cold (uncached) generation."""
    return {"prompt_tokens": len(toks), "generated_tokens": len(gen), "prefill_ns": pre.prefill_ns,
            "decode_ns": decode_ns, "band_widths": _widths(pre.band_widths),
            "weight_bytes_prefill": pre.weight_bytes, "weight_bytes_decode": decode_bytes,
            "cache_hits": 0, "mode": pre.mode, "exact": pre.exact, "stop": stop}


def _max_tokens(engine: Engine, req: api.GenRequest) -> int:
    # None: until EOS or the end of the context (decode stops there with stop "ctx")
    return engine.config["ctx"] if req.max_tokens is None else req.max_tokens


def generate(engine: Engine, req: api.GenRequest, bypass_cache: bool) -> GenerateResult:
    """One non-streamed generation: Engine.generate (as the worker runs it), or, to bypass a
    prefix cache the engine holds, the same prefill + decode on a fresh session."""
    max_tokens = _max_tokens(engine, req)
    if not bypass_cache:
        return engine.generate(req.prompt, max_tokens=max_tokens, **req.options)
    toks = prompt_tokens(req.prompt, vocab=engine.config["vocab"])
    sess = engine.session()
    pre = sess.prefill(toks, **req.options)
    dec = sess.decode(max_tokens)
    gen = [int(t) for t in dec["tokens"]]
    return GenerateResult(text=detokenize(gen), tokens=gen, prompt_tokens=toks, stop=dec["stop"],
                          timings=_timings(toks, gen, pre, int(dec["ns"]), int(dec["weight_bytes"]),
                                           dec["stop"]))


@dataclass
class TokenStream:
    """A generation emitted one token at a time; same tokens and stop rule as Session.decode.

    Each token is read from the current logits (decode(1) peeks without feeding) and fed with
    decode_step only when another token is wanted, so time to first token is prefill + argmax.
    """

    engine: Engine
    toks: list[int]
    sess: Any
    pre: Any
    max_tokens: int
    tokens: list[int] = field(default_factory=list)
    stop: str | None = None
    decode_ns: int = 0

    @classmethod
    def start(cls, engine: Engine, req: api.GenRequest) -> TokenStream:
        toks = prompt_tokens(req.prompt, vocab=engine.config["vocab"])
        sess = engine.session()
        pre = sess.prefill(toks, **req.options)
        return cls(engine, toks, sess, pre, _max_tokens(engine, req))

    def next(self) -> int | None:
        """The next token, or None once stopped (self.stop: "eos", "max_tokens" or "ctx")."""
        if self.stop is not None:
            return None
        t0 = time.perf_counter_ns()
        try:
            if len(self.tokens) >= self.max_tokens:
                self.stop = "max_tokens"
                return None
            if self.tokens:
                if self.sess.pos >= self.engine.config["ctx"]:
                    self.stop = "ctx"
                    return None
                self.sess.decode_step()  # feeds the previous token
            peek = self.sess.decode(1)["tokens"]
            if not peek:
                self.stop = "eos"
                return None
            self.tokens.append(int(peek[0]))
            return self.tokens[-1]
        finally:
            self.decode_ns += time.perf_counter_ns() - t0

    def result(self) -> GenerateResult:
        stop = self.stop or "max_tokens"
        return GenerateResult(text=detokenize(self.tokens), tokens=list(self.tokens), prompt_tokens=self.toks,
                              stop=stop, timings=_timings(self.toks, self.tokens, self.pre, self.decode_ns,
                                                          None, stop))


# -- the engine host -----------------------------------------------------------------------------
class EngineHost:
    """Owns the Engine, its one thread and the request lock."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.engine: Engine | None = None
        self.load_error: BaseException | None = None
        self.lock = asyncio.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dflash-engine")
        self.created = int(time.time())

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn on the engine thread (the single worker also serializes any late call)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def load(self) -> None:
        c = self.config
        kwargs = {"bands": c.bands, "chunk": c.chunk, "mmvq_max_ncols": c.mmvq_max_ncols,
                  "prefix_cache_slots": c.prefix_cache_slots}
        t0 = time.perf_counter()
        try:
            self.engine = await self.call(lambda: Engine(c.model, c.seed, c.threads, **kwargs))
        except Exception as exc:  # noqa: BLE001 - reported by serve()
            self.load_error = exc
            log.error("cannot load model %s: %s", c.model, exc)
        else:
            log.info("model %s ready in %.2f s; config %s; %d threads", c.model_name,
                     time.perf_counter() - t0, self.engine.config_hash, self.engine.threads)

    def ready_engine(self) -> Engine:
        if self.engine is None:
            raise api.ApiError(503, "Loading model", "unavailable_error")
        return self.engine

    def close(self) -> None:
        self._pool.shutdown(wait=True)


# -- handlers ----------------------------------------------------------------------------------
HOST_KEY = web.AppKey("host", EngineHost)


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda o: json.dumps(o, separators=(",", ":")))


def _sse(body: dict[str, Any] | str) -> bytes:
    data = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def _error(status: int, message: str, kind: str) -> web.Response:
    return _json(api.error_payload(status, message, kind), status)


@web.middleware
async def error_middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]):
    """Every failure leaves as OpenAI's error shape with the right status."""
    try:
        return await handler(request)
    except api.ApiError as exc:
        return _error(exc.status, str(exc), exc.kind)
    except EngineError as exc:
        return _error(400, str(exc), "invalid_request_error")
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        return _error(405, f"method {request.method} is not allowed on {request.path}; use {allowed}",
                      "invalid_request_error")
    except web.HTTPNotFound:
        return _error(404, f"no route {request.method} {request.path}", "not_found_error")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason, "invalid_request_error" if exc.status < 500 else "server_error")
    except Exception as exc:  # noqa: BLE001 - a bug or resource failure: 500, logged with traceback
        log.exception("internal error on %s %s", request.method, request.path)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}", "server_error")


async def health(request: web.Request) -> web.Response:
    host = request.app[HOST_KEY]
    if host.engine is not None:
        return _json({"status": "ok"})
    if host.load_error is not None:
        return _json({"status": "error", **api.error_payload(500, str(host.load_error), "server_error")}, 500)
    return _json({"status": "loading", **api.error_payload(503, "Loading model", "unavailable_error")}, 503)


async def props(request: web.Request) -> web.Response:
    """llama.cpp's GET /props, plus what evidence needs: build, config, resolved options, binary."""
    host = request.app[HOST_KEY]
    engine = host.ready_engine()
    return _json(api.props(host.config.model_name, str(host.config.model), _identity(host, engine)))


def _identity(host: EngineHost, engine: Engine) -> dict[str, Any]:
    c = host.config
    plan = resolve(call={}, ctor={"bands": c.bands, "chunk": c.chunk, "mmvq_max_ncols": c.mmvq_max_ncols})
    core = Path(_core.__file__)
    return {"pid": os.getpid(), "build_info": engine.build_info(), "config": engine.config,
            "config_hash": engine.config_hash, "threads": engine.threads,
            "prefix_cache_slots": c.prefix_cache_slots,
            "options": {"bands": plan.bands, "chunk": plan.chunk, "mmvq_max_ncols": plan.mmvq_max_ncols},
            "env": {ENV_BANDS: os.environ.get(ENV_BANDS), ENV_MMVQ: os.environ.get(ENV_MMVQ)},
            "binaries": [{"module": _core.__name__, "path": str(core),
                          "sha256": hashlib.sha256(core.read_bytes()).hexdigest()}]}


async def models(request: web.Request) -> web.Response:
    host = request.app[HOST_KEY]
    engine = host.ready_engine()
    return _json(api.models_list(host.config.model_name, engine.config_hash, host.created))


async def _body(request: web.Request) -> dict[str, Any]:
    return api.parse_json_object(await request.read())


async def _complete(host: EngineHost, req: api.GenRequest) -> GenerateResult:
    engine = host.ready_engine()
    bypass = not req.cache_prompt and host.config.prefix_cache_slots > 0
    async with host.lock:
        return await host.call(generate, engine, req, bypass)


Events = list[dict[str, Any] | str]  # SSE payloads: JSON objects, or a literal such as "[DONE]"


async def _stream(request: web.Request, host: EngineHost, req: api.GenRequest,
                  on_token: Callable[[str, int], dict[str, Any]],
                  on_finish: Callable[[str, GenerateResult], Events],
                  start: Events = ()) -> web.StreamResponse:
    """Stream one generation as SSE: prefill (errors still get a JSON status), then one event per
    token, then the finishing events. The lock is held until the last byte."""
    engine = host.ready_engine()
    async with host.lock:
        ts = await host.call(TokenStream.start, engine, req)
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            for event in start:
                await resp.write(_sse(event))
            while (tok := await host.call(ts.next)) is not None:
                await resp.write(_sse(on_token(decoder.decode(bytes(detokenize([tok]))), tok)))
            gen = ts.result()
            for event in on_finish(decoder.decode(b"", final=True), gen):
                await resp.write(_sse(event))
            await resp.write_eof()
        except EngineError as exc:  # after the headers went out: an error event ends the stream
            await resp.write(_sse(api.error_payload(500, str(exc), "server_error")))
        except ConnectionResetError:
            log.info("client went away during a stream after %d tokens", len(ts.tokens))
        return resp


async def completion(request: web.Request) -> web.StreamResponse:
    """llama.cpp POST /completion."""
    host = request.app[HOST_KEY]
    req = api.parse_llama_completion(await _body(request))
    name, chash = host.config.model_name, host.ready_engine().config_hash
    if not req.stream:
        return _json(api.llama_completion(await _complete(host, req), req, name, chash))

    def finish(piece: str, gen: GenerateResult) -> Events:
        last = api.llama_completion(gen, req, name, chash)
        last["content"] = piece  # llama.cpp: streamed text already went out token by token
        return [last]

    return await _stream(request, host, req, lambda piece, tok: api.llama_stream_event(piece, tok), finish)


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    host = request.app[HOST_KEY]
    body = await _body(request)
    req = api.parse_openai_chat(body) if chat else api.parse_openai_completion(body)
    name, chash = host.config.model_name, host.ready_engine().config_hash
    if not req.stream:
        gen = await _complete(host, req)
        return _json(api.openai_chat(gen, name, chash) if chat else api.openai_completion(gen, name, chash))
    chunks = api.OpenAIStream(chat, name)

    def finish(piece: str, gen: GenerateResult) -> Events:
        events: Events = [chunks.finish(piece, gen, chash)]
        if req.include_usage:
            events.append(chunks.usage_chunk(gen))
        return [*events, "[DONE]"]

    return await _stream(request, host, req, lambda piece, tok: chunks.token(piece), finish)


async def openai_completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=False)


async def openai_chat(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=True)


async def dflash_server_chat(request: web.Request) -> web.StreamResponse:
    """POST /v1/chat/completions in lucebox dflash_server's shape (dflash_server_api.py)."""
    host = request.app[HOST_KEY]
    req = api.parse_openai_chat(await _body(request))
    name = host.config.model_name
    if not req.stream:
        return _json(dflash_api.chat(await _complete(host, req), name))
    chunks = dflash_api.ChatStream(name)
    return await _stream(request, host, req, lambda piece, tok: chunks.token(piece),
                         chunks.finish, start=[chunks.start()])


def make_app(host: EngineHost) -> web.Application:
    app = web.Application(middlewares=[error_middleware])
    app[HOST_KEY] = host
    app.router.add_get("/health", health)
    app.router.add_get("/props", props)
    app.router.add_get("/v1/models", models)
    if host.config.api == "dflash-server":  # chat only, usage.timings (dflash_server_api.py)
        app.router.add_get("/", health)
        app.router.add_post("/v1/chat/completions", dflash_server_chat)
        return app
    app.router.add_get("/v1/health", health)
    app.router.add_post("/completion", completion)
    app.router.add_post("/v1/completions", openai_completions)
    app.router.add_post("/v1/chat/completions", openai_chat)
    return app


# -- lifecycle -----------------------------------------------------------------------------------
async def serve(config: ServerConfig, *, on_listening: Callable[[str, int], None]) -> None:
    """Bind, load the model in the background and serve until SIGTERM/SIGINT.

    on_listening(host, port) is called once the socket is bound (port is the actual one when
    config.port is 0). Raises EngineError for bad options or a model that fails to load, and
    OSError when the address cannot be bound.
    """
    check_config(config)
    host = EngineHost(config)
    runner = web.AppRunner(make_app(host), access_log_format=ACCESS_LOG_FORMAT, handle_signals=False,
                           shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:
        site = web.TCPSite(runner, config.host, config.port)
        await site.start()
        addr = runner.addresses[0]
        on_listening(str(addr[0]), int(addr[1]))
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loader = asyncio.ensure_future(host.load())
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait([loader, waiter], return_when=asyncio.FIRST_COMPLETED)
        if loader.done() and host.load_error is None:
            await waiter
        waiter.cancel()
        if not loader.done():
            await loader  # the engine thread cannot be interrupted mid-build
        log.info("shutting down")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        host.close()
    if host.load_error is not None:
        raise host.load_error if isinstance(host.load_error, EngineError) else EngineError(
            f"cannot load model {config.model}: {host.load_error}")
