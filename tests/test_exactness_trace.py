"""Tensor-level exactness (issue 5): traces, the q1-oracle diff, coverage, evidence, CLI.

One bundled exact-bands-trace run (ds4-tiny, ~20 s on 2 cores) is shared by the tests that
read its evidence; the perturbation and rejection tests trace in-process.
"""
from __future__ import annotations

from evidence_factory import fixed_n_text

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dflash_qualify.engine import Engine
from dflash_qualify.engine.trace import traced_generate
from dflash_qualify.harness.kinds.exactness import schema as exactness_protocol
from dflash_qualify.harness.cli import main
from dflash_qualify.harness.kinds.exactness.diff import (VERDICT_IDENTICAL, TraceError, diff_traces, load_trace,
                                                   ulp_distance)
from dflash_qualify.harness.kinds.exactness import run
from dflash_qualify.harness.verify import verify

PROMPT = "The quick brown fox jumps over the lazy dog; exact bands must equal q1."  # 72 tokens with BOS


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    loaded = exactness_protocol.load("exact-bands-trace")
    out = run(loaded, tmp_path_factory.mktemp("ev"), invocation="test")
    return loaded, out


@pytest.fixture(scope="module")
def tiny():
    return Engine("ds4-tiny", threads=2)


def test_bundled_protocol_bitwise_with_full_coverage(bundled):
    _, out = bundled
    res = out.results
    by_id = {c["id"]: c for c in res["candidates"]}
    for cid in ("q2", "q3", "q4"):
        c = by_id[cid]
        assert c["verdict"] == VERDICT_IDENTICAL, c["first_divergence"]
        assert c["coverage_ok"] and all(r["ok"] for r in c["coverage"]), c["coverage"]
        assert c["mmq_steps"] == 0
    items = {r["item"] for r in by_id["q4"]["coverage"]}
    assert {"tail width 1", "tail width 2", "tail width 3", "repeated request",
            "snapshot mid-prompt, restore, continue", "hash-routed layers",
            "learned-routed layers", "sliding-window boundary (pos 16)",
            "compressor ratio 4 boundary (pos 7)", "compressor ratio 8 boundary (pos 15)"} <= items
    assert res["missing_coverage"] == [] and res["passed"]


def test_mmvq_cap_is_caught_at_the_first_mmq_tensor(bundled, tiny):
    """The negative control differs; its first divergence matches an independent in-process
    comparison of the engine state (Session.state(), no trace code involved)."""
    loaded, out = bundled
    c = next(c for c in out.results["candidates"] if c["id"] == "q4-ncols2")
    assert c["verdict"] != VERDICT_IDENTICAL and c["passed"]
    fd = c["first_divergence"]
    assert (fd["request"], fd["step"], fd["kernel"], fd["layer"], fd["tensor"], fd["pos"]) == \
        ("r1", 0, "mmq", 0, "kv_window", 3)
    # Independent: the state after the first 4-wide step, computed through the public session API.
    text = next(q["text"] for q in loaded.resolved["requests"] if q["id"] == "r1")
    toks = [256, *text.encode()[:3]]
    a, b = tiny.session(), tiny.session()
    a.prefill(toks, bands=False)
    b.prefill(toks, bands=True, chunk=4, mmvq_max_ncols=2)
    x = a.state()["layer0.kv_window"].ravel()
    y = b.state()["layer0.kv_window"].ravel()
    diff = np.flatnonzero(x.view(np.uint32) != y.view(np.uint32))
    assert fd["index"] == int(diff[0]) and fd["differing"] == diff.size and fd["elements"] == x.size
    assert fd["oracle"] == float(x[diff[0]]) and fd["candidate"] == float(y[diff[0]])
    assert fd["ulp"] == ulp_distance(float(x[diff[0]]), float(y[diff[0]])) >= 1


def test_evidence_verifies_and_tampering_is_caught(bundled, tmp_path):
    _, out = bundled
    result = verify(out.path)
    assert result.ok, result.problems
    assert result.manifest_sha == out.manifest_sha256
    assert (out.path / "report.md").read_text().count("bitwise identical") >= 3
    copy = tmp_path / "copy"
    import shutil
    shutil.copytree(out.path, copy)
    trace = copy / "traces" / "q4" / "r1.jsonl.gz"
    trace.write_bytes(trace.read_bytes()[:-10])
    problems = [str(p) for p in verify(copy).problems]
    assert any("traces/q4/r1.jsonl.gz" in p and "modified" in p for p in problems)


def _trace(engine, tmp_path, name, **kw):
    path = tmp_path / f"{name}.jsonl.gz"
    trace = {"level": "raw", "path": str(path), **kw.pop("trace", {})}
    traced_generate(engine, kw.pop("prompt", PROMPT), max_tokens=2, trace=trace, **kw)
    return load_trace(path)


@pytest.mark.parametrize("place", [
    {"step": 5, "layer": 1, "tensor": "comp_kv", "index": 37},            # compressor state
    {"step": 3, "layer": 2, "tensor": "route_weights", "token": 2, "index": 1},
    {"step": 7, "layer": 3, "tensor": "compressed", "index": 10},
    {"step": 2, "layer": 0, "tensor": "hc_ffn", "token": 1, "index": 300},
    {"step": 9, "layer": None, "tensor": "logits", "token": 3, "index": 65},
])
def test_one_ulp_perturbation_is_localized(tiny, tmp_path, place):
    ref = _trace(tiny, tmp_path, "q1", bands=False)
    cand = _trace(tiny, tmp_path, "q4p", bands=True, chunk=4, trace={"perturb": place})
    d = diff_traces(cand, ref, "p")
    fd = d["first_divergence"]
    step = next(s for s in cand.steps if s["step"] == place["step"])
    state = place["tensor"] in ("comp_kv", "comp_score", "compressed", "kv_window")
    pos = step["pos"] + (step["width"] - 1 if state else place.get("token", 0))
    assert (fd["step"], fd["layer"], fd["tensor"], fd["pos"], fd["index"]) == \
        (place["step"], place["layer"], place["tensor"], pos, place["index"])
    assert fd["ulp"] == 1 and fd["differing"] == 1 and d["differing_tensors"] == 1
    assert d["responses_identical"]


def test_bad_traces_are_rejected(tiny, tmp_path):
    good = tmp_path / "g.jsonl.gz"
    traced_generate(tiny, PROMPT, max_tokens=2, trace={"level": "digest", "path": str(good)})
    data = good.read_bytes()
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(TraceError, match="corrupted"):
        load_trace(bad)
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated"):
        load_trace(bad)
    lines = gzip.decompress(data).decode().splitlines()
    head = json.loads(lines[0])
    bad.write_bytes(gzip.compress(("\n".join([json.dumps({**head, "version": 2}), *lines[1:]]) + "\n").encode()))
    with pytest.raises(TraceError, match="version 2 is not supported"):
        load_trace(bad)
    bad.write_bytes(gzip.compress(("\n".join(lines[:-1]) + "\n").encode()))
    with pytest.raises(TraceError, match="truncated: no end record"):
        load_trace(bad)
    other = tmp_path / "o.jsonl.gz"
    traced_generate(tiny, PROMPT + "!", max_tokens=2, trace={"level": "digest", "path": str(other)})
    with pytest.raises(TraceError, match="different prompts"):
        diff_traces(load_trace(other), load_trace(good), "x")


def test_missing_coverage_fails_with_named_items(tmp_path):
    proto = tmp_path / "short.toml"
    proto.write_text('schema_version = 1\nkind = "exactness"\nname = "short"\n'
                     '[target]\nmodel = "ds4-tiny"\nthreads = 2\n'
                     '[[requests]]\nid = "s"\nlength = 10\n'
                     '[[candidates]]\nid = "q4"\nengine = { bands = true, chunk = 4 }\n')
    r = CliRunner().invoke(main, ["exactness", str(proto), "--out", str(tmp_path / "ev")])
    assert r.exit_code == 1, r.output
    assert "bitwise identical" in r.output
    for item in ("q4: tail width 1", "q4: tail width 2", "q4: sliding-window boundary (pos 16)",
                 "q4: compressor ratio 8 boundary (pos 15)", "q4: repeated request",
                 "q4: snapshot mid-prompt, restore, continue"):
        assert item in r.output
    assert "Missing coverage (a failure)" in r.output
    [ev] = (tmp_path / "ev").iterdir()
    assert verify(ev).ok  # a failed qualification still leaves valid evidence of what was seen


def test_unknown_protocol_key_is_a_usage_error(tmp_path):
    proto = tmp_path / "bad.toml"
    proto.write_text('schema_version = 1\nkind = "exactness"\nname = "b"\nbogus = 1\n'
                     '[[requests]]\nid = "s"\nlength = 10\n')
    r = CliRunner().invoke(main, ["exactness", str(proto), "--out", str(tmp_path / "ev")])
    assert r.exit_code == 2 and "bogus" in r.output


def test_run_report_says_tensor_exactness_was_proven(tmp_path):
    """A bracket protocol with [exactness] runs the exactness check too and its report names the
    exactness evidence by manifest SHA-256 (here a short exactness protocol, so it says NOT proven)."""
    short = tmp_path / "short.toml"
    short.write_text('schema_version = 1\nkind = "exactness"\nname = "short"\n'
                     '[target]\nmodel = "ds4-tiny"\nthreads = 2\n'
                     '[[requests]]\nid = "s"\nlength = 10\n'
                     '[[candidates]]\nid = "q4"\nengine = { bands = true, chunk = 4 }\n')
    from dflash_qualify.harness.protocol import bundled_dir
    text = fixed_n_text((bundled_dir() / "exact-bands-quick.toml").read_text())
    text = text.replace("warmups = 1", "warmups = 0").replace("measured = 5", "measured = 2")
    bracket = tmp_path / "bracket.toml"
    bracket.write_text(text + f'\n[exactness]\nprotocol = "{short}"\n')
    r = CliRunner().invoke(main, ["run", str(bracket), "--out", str(tmp_path / "ev")])
    assert r.exit_code in (0, 1), r.output
    ex = next(p for p in (tmp_path / "ev").iterdir() if p.name.endswith("-short"))
    sha = verify(ex).manifest_sha
    line = next(ln for ln in r.output.splitlines() if ln.startswith("Tensor-level exactness"))
    assert "NOT proven" in line and sha in line and "q4: tail width 1" in line
    run_dir = next(p for p in (tmp_path / "ev").iterdir() if p.name.endswith("-exact-bands-quick"))
    assert verify(run_dir).ok


@pytest.mark.parametrize("name", ["exact-bands-trace", "exact-bands-trace-mini"])
def test_bundled_exactness_protocols_load(name):
    r = exactness_protocol.load(name).resolved
    assert r["kind"] == "exactness" and r["name"] == name
    assert [a["id"] for a in r["arms"]][:4] == ["q1", "q2", "q3", "q4"]
    assert any(q.get("snapshot_at") for q in r["requests"]) and any(q["repeat_of"] for q in r["requests"])
    with pytest.raises(Exception, match="dflash-qualify exactness"):
        from dflash_qualify.harness import kinds
        kinds.load(name, command="run")


def test_forged_verdict_under_a_resealed_manifest_is_caught(bundled, tmp_path):
    """verify recomputes exactness.json from the traces, so a forged verdict fails even when the
    manifest is rewritten to match the edited file."""
    import hashlib
    import shutil

    from dflash_qualify.harness.evidence import dumps_json
    _, out = bundled
    copy = tmp_path / "forged"
    shutil.copytree(out.path, copy)
    res = json.loads((copy / "exactness.json").read_text())
    ctl = next(c for c in res["candidates"] if c["id"] == "q4-ncols2")
    ctl["verdict"] = VERDICT_IDENTICAL
    (copy / "exactness.json").write_text(dumps_json(res))
    manifest = json.loads((copy / "manifest.json").read_text())
    for e in manifest["files"]:
        data = (copy / e["path"]).read_bytes()
        e["size"], e["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (copy / "manifest.json").write_text(dumps_json(manifest))
    problems = [str(p) for p in verify(copy).problems]
    assert len(problems) == 1 and "exactness.json" in problems[0] and "verdict" in problems[0], problems


def test_non_exact_candidate_expected_bitwise_exits_non_zero(tmp_path):
    proto = tmp_path / "cap.toml"
    proto.write_text('schema_version = 1\nkind = "exactness"\nname = "cap"\n'
                     '[target]\nmodel = "ds4-tiny"\nthreads = 2\n'
                     '[[requests]]\nid = "s"\nlength = 12\n'
                     '[[candidates]]\nid = "q4-ncols2"\nengine = { bands = true, chunk = 4 }\n'
                     'env = { LUCE_MMVQ_MAX_NCOLS = "2" }\n')
    r = CliRunner().invoke(main, ["exactness", str(proto), "--out", str(tmp_path / "ev")])
    assert r.exit_code == 1, r.output
    row = next(ln for ln in r.output.splitlines() if ln.startswith("| q4-ncols2"))
    assert ("responses identical but tensors differ" in row or "responses differ" in row) and "FAIL" in row
    assert "- q4-ncols2: request s, step 0 (pos 0..3, w=4, mmq), layer 0, tensor kv_window" in r.output


def test_report_renders_exactness_evidence(bundled):
    _, out = bundled
    r = CliRunner().invoke(main, ["report", str(out.path)])
    assert r.exit_code == 0, r.output
    assert "| q4 (exact bands chunk 4) | bitwise | bitwise identical |" in r.output
    assert f"Evidence manifest SHA-256: {out.manifest_sha256}" in r.output
