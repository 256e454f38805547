"""What an evidence kind is: the steps and pages the registry (harness/kinds) holds for one kind.

A kind never asks which kind it is; the registry answers that once, from a protocol file's or
an evidence directory's protocol.json, and everything after goes through these fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

# (root, manifest_sha256) -> the page's text, for a directory that has already verified
Page = Callable[[Path, str], str]


@dataclass(frozen=True)
class Kind:
    """One evidence kind.

    name: protocol.json's "kind" and the registry key.
    what: the noun used in messages ("run", "calibration", "exactness").
    command: the CLI command that runs protocol files of this kind (None: the kind is derived
        from another protocol, e.g. calibration from a bracket protocol).
    schema: schema(document, **overrides) -> the loaded protocol (protocol.LoadedProtocol: the
        resolved dict and the file's bytes), from a protocol.Document read once by the registry;
        overrides are the command's options (`run --warmups/--measured`). None when derived.
    run: the run flow, run(session) -> {arm id: facts}; writes raw records through
        session.writer and registers abandon hooks (kill workers) in session.on_abandon.
    analyze: analyze(session) -> results; writes the results files (e.g. stats.json).
    render: render(session, results) -> report.md text.
    qualified: qualified(results) -> the verdict as a bool (the command's exit code).
    required: files `verify` requires in a sealed directory of this kind.
    recompute: recompute(root, result) -> None; adds result.add(path, message) for every way
        the stored results disagree with what the raw files say (verify, after the hashes).
    pages: report format -> page(root, manifest_sha256) -> text (`report --format`).
    link: link(session) -> extra environment.json entries, after the run (None: nothing).
    decide: decide(stats, min_gain_pct, max_drift_pct) -> stats re-decided (`gate`; None: the
        kind has no gate verdict).
    summary: summary(root, manifest_sha256, stats) -> the markdown `gate` appends to the CI
        step summary, for stats as `decide` returned them.
    claims: claims(protocol_json) -> True when a directory whose protocol.json names another
        kind is this one's (calibration: a bracket protocol with a [calibration] table).
    default_protocol: the bundled protocol its command runs when given none.
    """

    name: str
    what: str
    command: str | None
    schema: Callable[..., Any] | None
    run: Callable[[Any], dict[str, dict[str, Any]]]
    analyze: Callable[[Any], dict[str, Any]]
    render: Callable[[Any, dict[str, Any]], str]
    qualified: Callable[[dict[str, Any]], bool]
    required: tuple[str, ...]
    recompute: Callable[[Path, Any], None]
    pages: Mapping[str, Page] = field(default_factory=dict)
    link: Callable[[Any], dict[str, Any]] | None = None
    decide: Callable[[dict[str, Any], float | None, float | None], dict[str, Any]] | None = None
    summary: Callable[[Path, str, dict[str, Any]], str] | None = None
    claims: Callable[[dict[str, Any]], bool] | None = None
    default_protocol: str | None = None
