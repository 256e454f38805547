"""`dflash-qualify serve` against real servers on 127.0.0.1 (ds4-tiny): llama.cpp /completion
field names, OpenAI endpoints through the official client, errors, queueing, env options."""
from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web

from dflash_qualify.engine import Engine
from dflash_qualify.engine import server_api as api
from dflash_qualify.engine.server import EngineHost, ServerConfig, make_app

EXE = str(Path(sys.executable).parent / "dflash-qualify")
BANDS, MMVQ = "DFLASH_DS4_EXACT_PREFILL_BANDS", "LUCE_MMVQ_MAX_NCOLS"
# generous bounds: they only stop a hung test, nothing is timed
START_S, REQUEST_S, STOP_S = 60.0, 60.0, 30.0
PROMPT = "The lighthouse keeper kept a careful ledger of ships"
# llama.cpp result_timings::to_json (tools/server/server-task.cpp), README "POST /completion"
LLAMA_TIMINGS = {"cache_n": int, "prompt_n": int, "prompt_ms": float, "prompt_per_token_ms": float,
                 "prompt_per_second": float, "predicted_n": int, "predicted_ms": float,
                 "predicted_per_token_ms": float, "predicted_per_second": float}
LLAMA_FIELDS = {"content": str, "tokens": list, "stop": bool, "model": str, "tokens_predicted": int,
                "tokens_evaluated": int, "tokens_cached": int, "stop_type": str, "stopping_word": str,
                "truncated": bool, "generation_settings": dict, "timings": dict}


class Server:
    """One `dflash-qualify serve` subprocess; stop() sends a signal and reaps it."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str | None] | None = None) -> None:
        run_env = {k: v for k, v in os.environ.items() if k not in (BANDS, MMVQ)}
        for k, v in (env or {}).items():
            if v is not None:
                run_env[k] = v
        self.log_path = tmp / f"serve-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([EXE, "serve", "--model", "ds4-tiny", "--threads", "1", "--port", "0",
                                      *args], stdout=subprocess.DEVNULL, stderr=self._log, env=run_env)
        self.port = 0
        try:
            self._wait_ready()
        except BaseException:
            self.stop(signal.SIGKILL)
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}: {self.log()}")
            if not self.port:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log())
                self.port = int(m.group(1)) if m else 0
            elif request(self, "GET", "/health")[0] == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"server not healthy within {START_S} s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_S)
        self._log.close()
        return self.proc.returncode

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="unused", max_retries=0,
                             timeout=REQUEST_S)


def request(server: Server, method: str, path: str, body: bytes | dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=REQUEST_S)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def post(server: Server, path: str, body: dict | bytes) -> tuple[int, dict]:
    status, raw = request(server, "POST", path, body)
    return status, json.loads(raw)


def sse_events(raw: bytes) -> list[str]:
    return [line[len("data: "):] for line in raw.decode().split("\n\n") if line.startswith("data: ")]


@pytest.fixture(scope="module")
def engine():
    return Engine("ds4-tiny", 0, 1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("serve"), "--prefix-cache-slots", "4")
    yield srv
    assert srv.stop() == 0, srv.log()
    assert "dflash-qualify serve: stopped" in srv.log()


@pytest.fixture(scope="module")
def bands_server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("serve-bands"), env={BANDS: "1"})
    yield srv
    assert srv.stop() == 0, srv.log()


def check_rates(n: int, ms: float, per_token: float, per_second: float) -> None:
    assert ms > 0 and n > 0
    assert per_second == pytest.approx(n / ms * 1000, rel=1e-12)
    assert per_token == pytest.approx(ms / n, rel=1e-12)


# -- llama.cpp /completion -------------------------------------------------------------------------
def test_health(server):
    status, body = request(server, "GET", "/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}


def test_props_names_the_engine(server, bands_server, engine):
    status, raw = request(server, "GET", "/props")
    body = json.loads(raw)
    assert status == 200 and body["model_alias"] == "ds4-tiny" and body["total_slots"] == 1
    ident = body["dflash"]
    assert ident["config_hash"] == engine.config_hash and ident["config"]["name"] == "ds4-tiny"
    assert ident["threads"] == 1 and ident["prefix_cache_slots"] == 4
    assert ident["options"] == {"bands": False, "chunk": 1, "mmvq_max_ncols": 4}
    assert ident["build_info"]["simd_path"] and len(ident["binaries"][0]["sha256"]) == 64
    banded = json.loads(request(bands_server, "GET", "/props")[1])["dflash"]
    assert banded["options"]["bands"] is True and banded["env"][BANDS] == "1"


def test_completion_string_prompt_fields_and_content(server, engine):
    status, body = post(server, "/completion", {"prompt": PROMPT, "n_predict": 8, "cache_prompt": False})
    assert status == 200, body
    for key, typ in LLAMA_FIELDS.items():
        assert isinstance(body[key], typ), key
    t = body["timings"]
    assert set(t) == set(LLAMA_TIMINGS)
    for key, typ in LLAMA_TIMINGS.items():
        assert isinstance(t[key], typ), key
    n_prompt = len(PROMPT) + 1  # byte tokens + BOS
    assert body["tokens_evaluated"] == t["prompt_n"] == n_prompt
    assert body["tokens_predicted"] == t["predicted_n"] == len(body["tokens"]) == 8
    assert t["cache_n"] == 0 and body["tokens_cached"] == 0
    assert body["stop"] is True and body["stop_type"] == "limit" and body["model"] == "ds4-tiny"
    check_rates(t["prompt_n"], t["prompt_ms"], t["prompt_per_token_ms"], t["prompt_per_second"])
    check_rates(t["predicted_n"], t["predicted_ms"], t["predicted_per_token_ms"], t["predicted_per_second"])
    ref = engine.generate(PROMPT, max_tokens=8)
    assert body["content"] == ref.text.decode("utf-8", errors="replace")
    assert body["tokens"] == ref.tokens
    raw = body["dflash"]
    assert base64.b64decode(raw["content_b64"]) == ref.text
    assert raw["config_hash"] == engine.config_hash
    assert raw["timings"]["band_widths"] == {"1": n_prompt, "2": 0, "3": 0, "4": 0}
    assert raw["timings"]["prefill_ns"] / 1e6 == t["prompt_ms"] and raw["timings"]["exact"] is True
    assert raw["timings"]["weight_bytes_prefill"] > 0


def test_completion_token_array_prompt_equals_text_prompt(server):
    ids = [256, *PROMPT.encode()]  # BOS + bytes: what the text prompt becomes
    _, by_ids = post(server, "/completion", {"prompt": ids, "n_predict": 6, "cache_prompt": False})
    _, by_text = post(server, "/completion", {"prompt": PROMPT, "n_predict": 6, "cache_prompt": False})
    assert by_ids["tokens_evaluated"] == len(ids)
    assert by_ids["content"] == by_text["content"] and by_ids["tokens"] == by_text["tokens"]


def test_cache_prompt_false_never_hits_and_true_uses_the_cache(server):
    prompt = "A prompt only the cache test sends"
    first = post(server, "/completion", {"prompt": prompt, "n_predict": 4, "cache_prompt": True})[1]
    cached = post(server, "/completion", {"prompt": prompt, "n_predict": 4, "cache_prompt": True})[1]
    n = len(prompt) + 1
    assert first["timings"]["cache_n"] == 0 and cached["timings"]["cache_n"] == n
    assert cached["timings"]["prompt_n"] == n - cached["timings"]["cache_n"]  # llama.cpp: evaluated only
    assert cached["content"] == first["content"]
    for _ in range(2):
        cold = post(server, "/completion", {"prompt": prompt, "n_predict": 4, "cache_prompt": False})[1]
        assert cold["timings"]["cache_n"] == 0 and cold["dflash"]["timings"]["cache_hits"] == 0
        assert cold["timings"]["prompt_n"] == n and cold["content"] == first["content"]


def test_completion_stream_concatenates_to_the_plain_response(server):
    body = {"prompt": PROMPT, "n_predict": 7, "cache_prompt": False}
    plain = post(server, "/completion", body)[1]
    status, raw = request(server, "POST", "/completion", {**body, "stream": True})
    assert status == 200
    events = [json.loads(e) for e in sse_events(raw)]
    assert len(events) == 8 and all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == plain["content"]
    assert [e["tokens"][0] for e in events[:-1]] == plain["tokens"]
    assert events[-1]["timings"]["predicted_n"] == 7


EOS_PROMPT = "p25"  # ds4-tiny seed 0 emits EOS after 6 tokens (found by search; pinned here)


@pytest.mark.parametrize("prompt, n_predict, stop_type", [
    (EOS_PROMPT, 40, "eos"),
    ("x" * 500, -1, "limit"),  # 501 prompt tokens: generation runs into the 512-token context
], ids=["eos", "context-end"])
def test_stream_stops_exactly_where_plain_generation_stops(server, engine, prompt, n_predict, stop_type):
    body = {"prompt": prompt, "n_predict": n_predict, "cache_prompt": False}
    plain = post(server, "/completion", body)[1]
    ref = engine.generate(prompt, max_tokens=40 if n_predict > 0 else 512)
    assert plain["tokens"] == ref.tokens and plain["stop_type"] == stop_type
    assert plain["truncated"] is (ref.stop == "ctx")
    streamed = request(server, "POST", "/completion", {**body, "stream": True})[1]
    events = [json.loads(e) for e in sse_events(streamed)]
    assert [e["tokens"][0] for e in events[:-1]] == ref.tokens
    assert events[-1]["stop_type"] == stop_type and events[-1]["truncated"] is plain["truncated"]
    with server.openai() as client:
        done = client.completions.create(model="m", prompt=prompt, max_tokens=40 if n_predict > 0 else 600)
        chunks = list(client.completions.create(model="m", prompt=prompt, stream=True,
                                                max_tokens=40 if n_predict > 0 else 600))
    want = "stop" if stop_type == "eos" else "length"
    assert done.choices[0].finish_reason == want and chunks[-1].choices[0].finish_reason == want
    assert "".join(c.choices[0].text for c in chunks) == done.choices[0].text


# -- OpenAI API through the official client ------------------------------------------------------------
def test_openai_models_and_completions(server, engine):
    with server.openai() as client:
        assert [m.id for m in client.models.list().data] == ["ds4-tiny"]
        done = client.completions.create(model="ds4-tiny", prompt=PROMPT, max_tokens=6)
    ref = engine.generate(PROMPT, max_tokens=6)
    assert done.object == "text_completion" and done.model == "ds4-tiny"
    assert done.choices[0].text == ref.text.decode("utf-8", errors="replace")
    assert done.choices[0].finish_reason == "length"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (
        len(PROMPT) + 1, 6, len(PROMPT) + 7)


def test_openai_chat_uses_the_documented_template(server, engine):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a ship."}]
    with server.openai() as client:
        done = client.chat.completions.create(model="ds4-tiny", messages=messages, max_completion_tokens=5)
    prompt = "<|system|>\nBe brief.\n<|user|>\nName a ship.\n<|assistant|>\n"
    assert api.render_chat(messages) == prompt
    ref = engine.generate(prompt, max_tokens=5)
    assert done.choices[0].message.role == "assistant"
    assert done.choices[0].message.content == ref.text.decode("utf-8", errors="replace")
    assert done.choices[0].finish_reason == "length"
    assert done.usage.prompt_tokens == len(prompt) + 1 and done.usage.completion_tokens == 5


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_openai_streaming_matches_non_streamed(server, chat):
    messages = [{"role": "user", "content": PROMPT}]
    with server.openai() as client:
        if chat:
            plain = client.chat.completions.create(model="m", messages=messages, max_tokens=9)
            stream = client.chat.completions.create(model="m", messages=messages, max_tokens=9, stream=True,
                                                    stream_options={"include_usage": True})
        else:
            plain = client.completions.create(model="m", prompt=PROMPT, max_tokens=9)
            stream = client.completions.create(model="m", prompt=PROMPT, max_tokens=9, stream=True,
                                               stream_options={"include_usage": True})
        chunks = list(stream)
    pieces = [c.choices[0].delta.content if chat else c.choices[0].text for c in chunks if c.choices]
    plain_text = plain.choices[0].message.content if chat else plain.choices[0].text
    assert "".join(p or "" for p in pieces) == plain_text
    assert len(pieces) == 9 + 1  # one chunk per token, then the finishing chunk
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishing[:-1] == [None] * 9 and finishing[-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 9
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens


# -- errors ------------------------------------------------------------------------------------------
def error_of(status: int, body: dict, want_status: int, want_type: str) -> str:
    assert status == want_status, body
    err = body["error"]
    assert set(err) == {"message", "type", "code"} and err["type"] == want_type and err["code"] == want_status
    return err["message"]


def test_bad_json_out_of_range_token_unknown_route_wrong_method(server):
    status, raw = request(server, "POST", "/completion", b'{"prompt": ')
    assert "not valid JSON" in error_of(status, json.loads(raw), 400, "invalid_request_error")
    msg = error_of(*post(server, "/completion", {"prompt": [256, 999]}), 400, "invalid_request_error")
    assert "999 is out of range" in msg
    status, raw = request(server, "GET", "/v2/nothing")
    assert "/v2/nothing" in error_of(status, json.loads(raw), 404, "not_found_error")
    status, raw = request(server, "GET", "/v1/completions")
    error_of(status, json.loads(raw), 405, "invalid_request_error")
    msg = error_of(*post(server, "/completion", {"prompt": "x", "n_predict": 2, "chunk": 9}), 400,
                   "invalid_request_error")
    assert "chunk must be an integer 1..4" in msg
    error_of(*post(server, "/completion", {"n_predict": 2}), 400, "invalid_request_error")


def test_openai_client_sees_bad_requests_as_400(server):
    with server.openai() as client:
        with pytest.raises(openai.BadRequestError, match="out of range"):
            client.completions.create(model="m", prompt=[1, 2, 300], max_tokens=2)
        with pytest.raises(openai.BadRequestError, match="role"):
            client.chat.completions.create(model="m", messages=[{"role": "robot", "content": "x"}])


def test_client_leaving_mid_stream_frees_the_server(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=REQUEST_S)
    conn.request("POST", "/completion", body=json.dumps({"prompt": PROMPT, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    conn.close()  # n_predict -1: the server would stream to the end of the context
    status, body = post(server, "/completion", {"prompt": PROMPT, "n_predict": 3, "cache_prompt": False})
    assert status == 200 and body["tokens_predicted"] == 3


def test_loading_state_answers_503_in_process():
    async def scenario() -> list[tuple[int, dict]]:
        host = EngineHost(ServerConfig(model="ds4-tiny", threads=1))
        runner = web.AppRunner(make_app(host))
        await runner.setup()
        seen = []
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            base = f"http://127.0.0.1:{runner.addresses[0][1]}"
            async with aiohttp.ClientSession() as session:
                for when in ("before", "after"):
                    if when == "after":
                        await host.load()
                    async with session.get(f"{base}/health") as r:
                        seen.append((r.status, await r.json()))
                    async with session.post(f"{base}/completion", json={"prompt": "x", "n_predict": 1}) as r:
                        seen.append((r.status, await r.json()))
        finally:
            await runner.cleanup()
            host.close()
        return seen

    (h0, b0), (c0, e0), (h1, b1), (c1, d1) = asyncio.run(scenario())
    assert (h0, b0["status"]) == (503, "loading")
    assert error_of(c0, e0, 503, "unavailable_error") == "Loading model"
    assert (h1, b1) == (200, {"status": "ok"}) and c1 == 200 and d1["tokens_predicted"] == 1


# -- queueing ----------------------------------------------------------------------------------------
def test_concurrent_clients_get_the_sequential_responses(server):
    bodies = [{"prompt": f"{PROMPT} #{i}", "n_predict": 12, "cache_prompt": False} for i in range(4)]
    sequential = [post(server, "/completion", b)[1] for b in bodies]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(lambda b: post(server, "/completion", b)[1], bodies * 2))
    for i, got in enumerate(concurrent):
        want = sequential[i % 4]
        assert (got["content"], got["tokens"], got["dflash"]["content_b64"]) == (
            want["content"], want["tokens"], want["dflash"]["content_b64"])


# -- engine options from the environment and flags ------------------------------------------------------
def test_env_bands_give_wide_bands_and_the_same_content(server, bands_server):
    body = {"prompt": PROMPT, "n_predict": 10, "cache_prompt": False}
    q1 = post(server, "/completion", body)[1]
    banded = post(bands_server, "/completion", body)[1]
    widths = banded["dflash"]["timings"]["band_widths"]
    assert sum(n for w, n in widths.items() if int(w) > 1) > 0
    assert set(w for w, n in q1["dflash"]["timings"]["band_widths"].items() if n) == {"1"}
    assert banded["dflash"]["content_b64"] == q1["dflash"]["content_b64"]
    assert banded["content"] == q1["content"]


def test_flag_overrides_env_and_sigint_stops_cleanly(tmp_path):
    srv = Server(tmp_path, "--no-bands", env={BANDS: "1"})
    try:
        body = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 2})[1]
        assert set(w for w, n in body["dflash"]["timings"]["band_widths"].items() if n) == {"1"}
    finally:
        assert srv.stop(signal.SIGINT) == 0, srv.log()
    assert "stopped" in srv.log() and "Traceback" not in srv.log()


# -- CLI usage errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("args, env, message", [
    (["--model", "no-such-model.json"], {}, "no-such-model.json"),
    (["--chunk", "9"], {}, "chunk must be an integer 1..4"),
    ([], {BANDS: "yes"}, f"{BANDS}='yes' is malformed"),
], ids=["model", "chunk", "env"])
def test_usage_errors_exit_2_without_traceback(args, env, message):
    done = subprocess.run([EXE, "serve", "--port", "0", *args], capture_output=True, text=True,
                          timeout=START_S, env={**os.environ, **env})
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_port_in_use_is_a_usage_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = subprocess.run([EXE, "serve", "--model", "ds4-tiny", "--port", str(port)], capture_output=True,
                              text=True, timeout=START_S)
    assert done.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


# -- pure parsing ----------------------------------------------------------------------------------
def test_parsing_rules():
    assert api.parse_llama_completion({"prompt": "x"}).max_tokens is None  # n_predict -1: unlimited
    assert api.parse_openai_completion({"prompt": ["x"]}).max_tokens == 16  # OpenAI's default
    with pytest.raises(api.ApiError, match="batched"):
        api.parse_openai_completion({"prompt": ["a", "b"]})
    with pytest.raises(api.ApiError, match="stop strings"):
        api.parse_llama_completion({"prompt": "x", "stop": ["\n"]})
    with pytest.raises(api.ApiError, match="cache_prompt"):
        api.parse_llama_completion({"prompt": "x", "cache_prompt": "no"})
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert api.render_chat(parts) == "<|user|>\nab\n<|assistant|>\n"
