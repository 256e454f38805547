"""Ad-hoc compare: two command lines -> a bracket protocol (TOML text) with the bundled defaults.

`dflash-qualify compare --target llamacpp|openai|command --reference CMD --candidate CMD ...`
builds its protocol here, like hyperfine compares two commands from one command line. CMD is a
shell-quoted command line (split with shlex, never run through a shell) holding {host} and
{port} for HTTP targets. The protocol is an ordinary A / candidate / B bracket: arm A and B run
the reference command, the candidate its own; `--reference-env K=V` / `--candidate-env K=V`
set variables for those arms (`K=` unsets one). The TOML text is what the evidence keeps as
protocol.toml, so `dflash-qualify run <evidence>/protocol.toml` reproduces the bracket.

Pure: arguments in, TOML text out (no IO).
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from .errors import UsageError

TARGETS = ("llamacpp", "openai", "command")
ENDPOINTS = ("completions", "chat")
HTTP = ("llamacpp", "openai")
DEFAULTS = {"prompt_length": 256, "max_tokens": 8, "warmups": 1, "measured": 5}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class CompareArgs:
    """What `dflash-qualify compare` was given (None: the bundled default)."""

    target: str
    reference: str
    candidate: str
    reference_env: tuple[str, ...] = ()
    candidate_env: tuple[str, ...] = ()
    endpoint: str | None = None
    timings: str | None = None
    prompt_length: int | None = None
    max_tokens: int | None = None
    warmups: int | None = None
    measured: int | None = None
    name: str | None = None


def split_command(text: str, option: str, http: bool) -> list[str]:
    """A shell-quoted command line as argv (UsageError naming the option on a bad one)."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"not a valid shell-quoted command line: {exc}", field=option) from None
    if not argv:
        raise UsageError("an empty command line", field=option)
    if http and not any("{port}" in part for part in argv):
        raise UsageError("expected a command line containing {port} (the harness picks a free "
                         "loopback port per arm; {host} is 127.0.0.1)", field=option)
    return argv


def parse_env(items: tuple[str, ...], option: str) -> dict[str, str | bool]:
    """K=V items -> {K: V}; K= (empty value) unsets K for that arm (TOML false)."""
    out: dict[str, str | bool] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(key):
            raise UsageError(f"expected K=V with K an environment variable name, got {item!r}",
                             field=option)
        out[key] = value if value else False
    return out


def _toml(value: object) -> str:
    """A TOML value: strings as JSON basic strings (valid TOML), arrays and inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value).__name__)


def protocol_toml(args: CompareArgs, invocation: str) -> str:
    """The bracket protocol for one compare invocation (recorded in the file's header)."""
    if args.target not in TARGETS:
        raise UsageError(f"expected one of {', '.join(TARGETS)}, got {args.target!r}",
                         field="--target")
    http = args.target in HTTP
    ref = split_command(args.reference, "--reference", http)
    cand = split_command(args.candidate, "--candidate", http)
    if args.target != "openai" and (args.endpoint or args.timings):
        given = "--endpoint" if args.endpoint else "--timings"
        raise UsageError(f"{given} applies to --target openai only", field=given)
    opts = {k: getattr(args, k) if getattr(args, k) is not None else v
            for k, v in DEFAULTS.items()}
    name = args.name or f"compare-{args.target}"
    lines = [
        "# Written by `dflash-qualify compare`; `dflash-qualify run` on this file reproduces it:",
        f"#   {invocation}",
        "schema_version = 1",
        'kind = "bracket"',
        f"name = {_toml(name)}",
        f"description = {_toml('ad-hoc compare: reference A / candidate / reference B')}",
        "",
        "[target]",
        f"kind = {_toml(args.target)}",
        f"command = {_toml(ref)}",
    ]
    if http:
        lines.append('health_path = "/health"')
    if args.target == "openai":
        lines.append(f"endpoint = {_toml(args.endpoint or 'completions')}")
        if args.timings:
            lines.append(f"timings = {{ preset = {_toml(args.timings)} }}")
    lines += [
        "",
        "[measure]",
        'metric = "prefill_tok_s"',
        f"warmups = {opts['warmups']}",
        f"measured = {opts['measured']}",
        f"max_tokens = {opts['max_tokens']}",
        'cache = "cold"',
        "start_timeout_s = 120",
        "",
        "[[prompts]]",
        f'id = "p{opts["prompt_length"]}"',
        f"length = {opts['prompt_length']}",
    ]
    envs = {"A": parse_env(args.reference_env, "--reference-env"),
            "cand": parse_env(args.candidate_env, "--candidate-env")}
    for aid, label, role in (("A", "reference A", "reference"), ("cand", "candidate", "candidate"),
                             ("B", "reference B", "reference")):
        lines += ["", "[[arms]]", f'id = "{aid}"', f'label = "{label}"', f'role = "{role}"']
        if aid == "cand":
            lines.append(f"command = {_toml(cand)}")
        env = envs["cand" if aid == "cand" else "A"]
        if env:
            lines.append(f"env = {_toml(env)}")
    return "\n".join(lines) + "\n"
