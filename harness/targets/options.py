"""[target] options of a protocol: one parser per target kind (OPTIONS, beside targets.TARGETS),
each returning a frozen dataclass whose to_json() is the resolved protocol's `target` table.

Errors are one line naming the file, the key path, what was expected and what was found
(harness/checker.py). Adding a target kind: a factory in targets.TARGETS and a parser here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from ..checker import Checker, join_key

TARGET_KINDS = ("embedded", "command", "llamacpp", "openai")
HTTP_KINDS = ("llamacpp", "openai")     # HTTP servers: started per arm (command) or attached (url)
# what an HTTP target's prefill_ms / decode_ms mean (protocol.json target.timing, the report)
HTTP_TIMING = {
    "llamacpp": "server-reported: prefill_ms = timings.prompt_ms, decode_ms = timings.predicted_ms "
                "(llama.cpp /completion)",
    "openai": "client-side TTFT: prefill_ms = time from sending the request to the first streamed "
              "token, measured by the harness (includes HTTP and queueing); decode_ms = the rest "
              "of the stream",
}
# request fields an HTTP target sets itself (extra_body may not override them)
HTTP_RESERVED = {"llamacpp": ("prompt", "n_predict", "stream", "cache_prompt", "return_tokens"),
                 "openai": ("prompt", "max_tokens", "stream", "stream_options", "model")}
DEVICES = ("cpu", "cuda")   # [target] device of embedded/command targets
RESPONSE_BYTES = ("dflash.content_b64 when the server sends it (exact bytes), else the text as "
                  "UTF-8; each sample's response_source says which")


@dataclass(frozen=True)
class EmbeddedOptions:
    """kind = "embedded": the bundled engine's worker (model, seed, threads, device)."""

    model: str = "ds4-mini"
    seed: int = 0
    threads: int | None = None
    prefix_cache_slots: int = 0
    device: str = "cpu"
    pin_cpu: int | str | None = None
    kind: str = "embedded"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "seed": self.seed, "threads": self.threads,
                "prefix_cache_slots": self.prefix_cache_slots, "device": self.device,
                "pin_cpu": self.pin_cpu}


@dataclass(frozen=True)
class CommandOptions:
    """kind = "command": any program that speaks the worker protocol."""

    command: tuple[str, ...]
    device: str = "cpu"
    pin_cpu: int | str | None = None
    kind: str = "command"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "command": list(self.command), "model": None, "seed": None,
                "threads": None, "prefix_cache_slots": 0, "device": self.device,
                "pin_cpu": self.pin_cpu}


@dataclass(frozen=True)
class HttpOptions:
    """kind = "llamacpp" | "openai": a server command template started per arm, or a url."""

    kind: str
    command: tuple[str, ...] | None = None
    url: str | None = None
    health_path: str = "/health"
    model: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    start_timeout_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind, "command": list(self.command) if self.command else None,
            "url": self.url, "health_path": self.health_path, "model": self.model,
            "extra_body": dict(self.extra_body), "seed": None, "threads": None,
            "prefix_cache_slots": 0, "timing": HTTP_TIMING[self.kind],
            "response_bytes": RESPONSE_BYTES,
        }
        if self.start_timeout_s is not None:
            out["start_timeout_s"] = self.start_timeout_s
        return out


TargetOptions = EmbeddedOptions | CommandOptions | HttpOptions


def parse(ck: Checker, table: dict) -> TargetOptions:
    """The [target] table of a protocol (kind defaults to "embedded")."""
    kind = ck.string(table.get("kind", "embedded"), "target.kind", choices=TARGET_KINDS)
    return OPTIONS[kind](ck, table)


def parse_embedded(ck: Checker, t: dict) -> EmbeddedOptions:
    ck.table(t, "target", {"kind", "model", "seed", "threads", "prefix_cache_slots", "device",
                           "pin_cpu"})
    model = ck.string(t.get("model", "ds4-mini"), "target.model")
    seed = ck.integer(t.get("seed", 0), "target.seed", lo=0, hi=2**63 - 1)
    # the worker's Engine(device=...); "cpu" runs exactly as before the option existed
    device = ck.string(t.get("device", "cpu"), "target.device", choices=DEVICES)
    pin_cpu = parse_pin_cpu(ck, t)
    threads = ck.integer(t["threads"], "target.threads", lo=1, hi=1024) if "threads" in t else None
    slots = (ck.integer(t["prefix_cache_slots"], "target.prefix_cache_slots", lo=0, hi=1024)
             if "prefix_cache_slots" in t else 0)
    return EmbeddedOptions(model=model, seed=seed, device=device, pin_cpu=pin_cpu, threads=threads,
                           prefix_cache_slots=slots)


def parse_command(ck: Checker, t: dict) -> CommandOptions:
    # any program that speaks the worker protocol (protocols/worker-protocol.schema.json)
    # device: where that program runs (it is not told: give it its own flag); on "cuda"
    # the harness records the GPU's state around each arm
    ck.table(t, "target", {"kind", "command", "prefix_cache_slots", "device", "pin_cpu"},
             {"command"})
    return CommandOptions(command=tuple(parse_argv(ck, t["command"], "target.command")),
                          device=ck.string(t.get("device", "cpu"), "target.device", choices=DEVICES),
                          pin_cpu=parse_pin_cpu(ck, t))


def parse_pin_cpu(ck: Checker, t: dict) -> int | str | None:
    """[target] pin_cpu: every arm's worker process pinned to one CPU ("auto": the highest CPU
    this process may use; an integer: that CPU), so no arm runs on a faster or busier core than
    another for its whole life (a process-level block effect; docs/calibration.md)."""
    if "pin_cpu" not in t:
        return None
    v = t["pin_cpu"]
    if v == "auto":
        return "auto"
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 4095:
        ck.fail("target.pin_cpu", '"auto" or a CPU number 0..4095', v)
    return v


def _http(kind: str) -> Callable[[Checker, dict], HttpOptions]:
    def parse_http(ck: Checker, t: dict) -> HttpOptions:
        """llamacpp / openai: a server command template started per arm, or a running server's url."""
        ck.table(t, "target", {"kind", "command", "url", "health_path", "start_timeout_s", "model",
                               "extra_body"})
        given = [k for k in ("command", "url") if k in t]
        if len(given) != 1:
            ck.fail("target", "exactly one of command (a server started per arm) or url (attach to "
                    "a running server)", found=" and ".join(given) if given else "neither")
        health = ck.string(t.get("health_path", "/health"), "target.health_path")
        model = ck.string(t["model"], "target.model") if "model" in t else None
        extra = parse_extra_body(ck, ck.sub_table(t, "extra_body", "target.extra_body"),
                                 "target.extra_body", kind)
        if not health.startswith("/") or any(c.isspace() for c in health):
            ck.fail("target.health_path", "a path starting with '/'", health)
        command = url = None
        if "command" in t:
            command = tuple(parse_server_argv(ck, t["command"], "target.command"))
        else:
            url = parse_url(ck, t["url"], "target.url")
        start = (ck.number(t["start_timeout_s"], "target.start_timeout_s", lo=0, lo_open=True)
                 if "start_timeout_s" in t else None)
        return HttpOptions(kind=kind, command=command, url=url, health_path=health, model=model,
                           extra_body=extra, start_timeout_s=start)
    return parse_http


def parse_argv(ck: Checker, value, path: str) -> list[str]:
    """A command line as an array of strings (no shell), at least the program."""
    if not isinstance(value, list) or not value:
        ck.fail(path, "a non-empty array of strings (program and arguments)", value)
    for i, part in enumerate(value):
        if not isinstance(part, str) or not part or "\0" in part:
            ck.fail(f"{path}[{i}]", "a non-empty string", part)
    return list(value)


def parse_server_argv(ck: Checker, value, path: str) -> list[str]:
    """A server command template: argv with {port} (and optionally {host}) to fill in per arm."""
    argv = parse_argv(ck, value, path)
    if not any("{port}" in part for part in argv):
        ck.fail(path, "a command line containing {port} (the harness picks a free loopback port)",
                found=" ".join(argv)[:60])
    return argv


def parse_url(ck: Checker, value, path: str) -> str:
    """An http:// or https:// base URL (no query, fragment or whitespace), without a final '/'."""
    text = ck.string(value, path)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or \
            parts.fragment or any(c.isspace() for c in text):
        ck.fail(path, "an http:// or https:// base URL without query or fragment", text)
    return text.rstrip("/")


def parse_extra_body(ck: Checker, table: dict, path: str, kind: str) -> dict:
    """Extra JSON fields sent with every request (e.g. sampling settings); plain JSON values only."""
    def check(value, where):
        if isinstance(value, dict):
            for k, v in value.items():
                check(v, join_key(where, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                check(v, f"{where}[{i}]")
        elif not isinstance(value, (str, int, float, bool)) or value != value:
            ck.fail(where, "a JSON value (string, number, boolean, array or table)", value)

    for key in table:
        if key in HTTP_RESERVED[kind]:
            ck.fail(join_key(path, key), "a field the harness does not set itself (it sets "
                    + ", ".join(HTTP_RESERVED[kind]) + ")", found=f"key {key!r}")
    check(table, path)
    return dict(table)


# target kind -> parser of its [target] table (registered beside targets.TARGETS)
OPTIONS: dict[str, Callable[[Checker, dict], TargetOptions]] = {
    "embedded": parse_embedded,
    "command": parse_command,
    "llamacpp": _http("llamacpp"),
    "openai": _http("openai"),
}
