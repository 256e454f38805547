"""The one sealing path of every evidence kind: create, protocol + environment, run, analyze,
render, seal; on any failure or signal the directory stays `<name>.partial` with the reason.

A kind supplies the steps (harness/kinds: `run`, `analyze`, `render`, `qualified`); this
module owns their order, the redaction set, the signal handling and the failure path, so no
kind can write evidence another way. Nothing here prints.
"""
from __future__ import annotations

import contextlib
import signal
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from .. import environment
from ..errors import QualifyError, RunFailed
from .writer import EvidenceWriter


class Interrupted(BaseException):
    """The harness received SIGINT/SIGTERM; carries the signal name."""


@dataclass
class Session:
    """What a kind's steps see while its evidence is being written.

    protocol: the resolved protocol the arms run (secrets intact: workers need them).
    stored: protocol.json as written (secret-named arm env values redacted); analysis and
        reports read this, exactly as `verify` will.
    writer: the evidence writer (it scrubs every secret from every file it writes).
    options: the caller's hooks by name (e.g. make_target, on_event, progress, settings).
    registry: every registered kind by name (a kind may seal a linked kind's evidence).
    environment: the environment record (capture, then finish after the run).
    arm_info: what the run flow returned (each arm's worker facts).
    on_abandon: hooks the failure path calls, last first (kill workers, save their logs).
    state: whatever a kind's run flow hands to its analysis and report (e.g. the samples).
    """

    kind: Any
    protocol: dict[str, Any]
    stored: dict[str, Any]
    writer: EvidenceWriter
    out_root: Path
    invocation: str
    options: Mapping[str, Any]
    registry: Mapping[str, Any]
    environment: dict[str, Any] = field(default_factory=dict)
    arm_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    on_abandon: list[Callable[[], None]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)   # a kind's own data between its steps

    def option(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    def read(self, rel: str) -> bytes:
        """Bytes of a file already written into this evidence directory."""
        return (Path(self.writer.path) / rel).read_bytes()

    def seal_linked(self, kind_name: str, loaded: Any, *, invocation: str) -> "Sealed":
        """Seal another kind's evidence under the same root (e.g. a bracket's exactness check)."""
        return seal(self.registry[kind_name], loaded, self.out_root, invocation=invocation,
                    registry=self.registry)


@dataclass(frozen=True)
class Sealed:
    """A sealed evidence directory: where it is, its id, the kind's verdict and its results."""

    path: Path
    manifest_sha256: str
    qualified: bool
    results: dict[str, Any]

    @property
    def stats(self) -> dict[str, Any]:  # the name `run` and `calibrate` callers know
        return self.results


def secrets_of(protocol: Mapping[str, Any], source_bytes: bytes = b"") -> list[str]:
    """Every value this evidence must never hold: secret-named arm env values of the resolved
    protocol, secret-named variables of the harness's own environment
    (harness.environment.secret_values), and every string under a secret-named key anywhere in
    the protocol file (a kind may run a derived protocol whose arms are not the file's)."""
    values = set(environment.secret_values(dict(protocol)))
    try:
        doc = tomllib.loads(source_bytes.decode("utf-8")) if source_bytes else {}
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        doc = {}
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(value, (dict, list)):
                stack.append(value)
            elif isinstance(value, str) and isinstance(key, str) and environment.is_secret_name(key):
                values.add(value)
    return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


def seal(kind: Any, loaded: Any, out_root: str | Path, *, invocation: str,
         options: Mapping[str, Any] | None = None, registry: Mapping[str, Any] | None = None,
         writer_factory: Callable[..., EvidenceWriter] | None = None) -> Sealed:
    """Run one kind end to end and seal its evidence.

    Args:
        kind: a registered Kind (harness.kinds.KINDS): run, analyze, render, qualified, what.
        loaded: the loaded protocol (`resolved` dict, `source_bytes` of the protocol file).
        out_root: evidence root; the directory is <root>/<stamp>-<name>[.partial].
        invocation: the command line that reproduces it (environment.json).
        options: hooks handed to the kind's steps (Session.options).
        registry: the kinds a step may link to (Session.registry).
        writer_factory: replaces EvidenceWriter.create (tests); called (root, name, secrets=...).
    Returns:
        Sealed (qualified or not).
    Raises:
        RunFailed: a step failed or a signal arrived; the directory stays .partial with
            INCOMPLETE saying why. UsageError if the root is unusable.
    """
    protocol = loaded.resolved
    secrets = secrets_of(protocol, loaded.source_bytes)
    create = writer_factory or EvidenceWriter.create
    writer = create(Path(out_root), protocol["name"], secrets=secrets)
    session = Session(kind=kind, protocol=protocol, stored=environment.redact_protocol(protocol),
                      writer=writer, out_root=Path(out_root), invocation=invocation,
                      options=dict(options or {}), registry=registry or {})
    with failures_leave_partial(kind.what, session), signals_raise():
        writer.write_json("protocol.json", session.stored)
        writer.write_bytes("protocol.toml", loaded.source_bytes)
        session.environment = environment.capture(protocol, invocation=invocation)
        writer.write_json("environment.json", session.environment)
        session.arm_info = kind.run(session) or {}
        session.environment = environment.finish(session.environment, protocol, session.arm_info)
        if kind.link is not None:  # e.g. a bracket's [exactness]: sealed first, linked here
            session.environment.update(kind.link(session))
        writer.write_json("environment.json", session.environment)
        results = kind.analyze(session)
        writer.write_text("report.md", kind.render(session, results))
        path, sha = writer.seal()
    return Sealed(Path(path), sha, bool(kind.qualified(results)), results)


@contextlib.contextmanager
def failures_leave_partial(what: str, session: Session) -> Iterator[None]:
    """Every way out but success runs the kind's abandon hooks (kill workers, save logs), marks
    the evidence incomplete with a named reason and raises RunFailed (exit 3)."""
    writer = session.writer
    partial = str(writer.path)

    def abandon(reason: str) -> None:
        with signals_ignored():
            for hook in reversed(session.on_abandon):
                with contextlib.suppress(Exception):
                    hook()
            with contextlib.suppress(Exception):
                writer.mark_incomplete(reason)

    try:
        yield
    except (Interrupted, KeyboardInterrupt) as exc:
        name = str(exc) if isinstance(exc, Interrupted) else "SIGINT"
        abandon(f"interrupted: {name}")
        raise RunFailed(f"interrupted ({name}); evidence left incomplete in {partial}",
                        evidence_dir=partial) from None
    except QualifyError as exc:
        abandon(f"failed: {exc}")
        raise RunFailed(f"{what} failed: {exc}; evidence left incomplete in {partial}",
                        evidence_dir=partial) from None
    except OSError as exc:
        abandon(f"failed: writing evidence: {exc}")
        raise RunFailed(f"{what} failed writing evidence: {exc}; evidence left incomplete in "
                        f"{partial}", evidence_dir=partial) from None
    except BaseException as exc:  # a bug: still never leave a worker behind or a dir looking live
        abandon(f"failed: internal error {type(exc).__name__}: {exc}")
        raise


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGTERM (and SIGINT) into Interrupted while evidence is being written."""
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: leave signals alone
            pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """A second Ctrl-C while cleaning up must not leave workers behind."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):
            previous[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
