"""Matrix kind without Ray: the protocol's user errors, the local executor end to end (acceptance
3: the same cells on one host without Ray installed), matrix verify naming a tampered cell, and
`--executor ray` without the extra naming it."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dflash_qualify.harness import kinds
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.kinds.matrix import driver, summary
from dflash_qualify.harness.kinds.matrix.protocol import MatrixProtocol
from dflash_qualify.harness.verify import verify

from matrix_helpers import cell_layout, write_matrix

HERE = Path(__file__).resolve().parent
LIMIT_S = 300  # only stops a hung subprocess; nothing is timed


def _matrix_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


BASE = 'schema_version = 1\nkind = "matrix"\nname = "m"\nprotocols = ["exact-bands-quick"]\n'


@pytest.mark.parametrize("body, field, expected", [
    (BASE.replace('kind = "matrix"', 'kind = "bracket"'), "kind", '"matrix"'),
    (BASE.replace('name = "m"', 'name = "a b"'), "name", "letters"),
    (BASE.replace('["exact-bands-quick"]', "[]"), "protocols", "a list of 1 to"),
    (BASE.replace('["exact-bands-quick"]', "[3]"), "protocols[0]", "a bundled protocol name"),
    (BASE + "hosts = 'gpu'\n", "hosts", "a list of node labels"),
    (BASE + 'hosts = ["gpu", "a b"]\n', "hosts[1]", "a node label"),
    (BASE + "measured = 0\n", "measured", "an integer from 1"),
    (BASE + "[env]\nX = 1\n", "env.X", "a string value"),
    (BASE + "colour = 1\n", "colour", "unknown key"),
    (BASE.replace("schema_version = 1", "schema_version = 2"), "schema_version", "1 (the only"),
])
def test_matrix_protocol_user_errors_name_file_field_expected_got(tmp_path, body, field, expected):
    path = _matrix_file(tmp_path, body)
    with pytest.raises(UsageError) as err:
        MatrixProtocol.from_toml(path)
    text = str(err.value)
    assert text.startswith(f"{path}: {field}: "), text
    assert expected in text


def test_matrix_protocol_parses_hosts_env_and_paths(tmp_path):
    path = _matrix_file(tmp_path, BASE.replace('["exact-bands-quick"]', '["exact-bands-quick", "sub/p.toml"]')
                        + 'hosts = ["gpu-h200", "zone=lab"]\n[env]\nOMP_NUM_THREADS = "1"\n')
    m = MatrixProtocol.from_toml(path)
    assert m.protocol_paths == ("exact-bands-quick", str(tmp_path / "sub" / "p.toml"))
    assert [h.text for h in m.hosts] == ["gpu-h200", "zone=lab"]
    assert m.hosts[0].matches({}, {"gpu-h200": 1.0}) and not m.hosts[0].matches({}, {})
    assert m.hosts[1].matches({"zone": "lab"}, {}) and not m.hosts[1].matches({"zone": "x"}, {})
    assert m.env == (("OMP_NUM_THREADS", "1"),)
    doc = m.to_json()
    assert doc["kind"] == "matrix" and doc["hosts"] == ["gpu-h200", "zone=lab"]
    json.dumps(doc)  # JSON-ready
    assert MatrixProtocol.from_json(doc).to_json() == doc  # protocol.json round-trips
    with pytest.raises(AttributeError):
        m.name = "other"  # frozen


def test_the_example_matrix_parses_and_its_protocols_load():
    m = MatrixProtocol.from_toml(HERE.parent / "examples" / "matrix-quick.toml")
    assert m.name == "matrix-quick" and m.hosts == ()
    assert [lp.resolved["name"] for lp in driver.load_protocols(m, kinds.KINDS)] == \
        ["exact-bands-quick"]


def test_the_docs_matrix_file_and_cluster_commands_match_the_code(tmp_path):
    """Acceptance 4's docs: the matrix file shown in docs/matrix.md parses, and every `ray start`
    line there gives the host the cell slot the ray executor asks for."""
    import re
    from dflash_qualify.harness.kinds.matrix.executors import SLOT
    text = (HERE.parent / "docs" / "matrix.md").read_text(encoding="utf-8")
    block = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
    import tomllib
    m = MatrixProtocol.from_doc(tomllib.loads(block), file="docs/matrix.md", base_dir=tmp_path)
    assert [h.text for h in m.hosts] == ["gpu-h200", "gpu-4090", "zone=lab"]
    joined = text.replace("\\\n", " ")  # shell line continuations
    starts = [line for line in joined.splitlines() if line.startswith("ray start")]
    assert len(starts) >= 3
    for line in starts:
        assert f'"{SLOT}": 1' in line, line
    for command in ("dflash-qualify matrix", "--executor ray", "--ray-address auto",
                    "pip install 'dflash-qualify[ray]'"):
        assert command in text


def test_verdict_labels_follow_the_recorded_decision():
    assert summary.verdict_label({"qualified": True}) == "QUALIFIED"
    assert summary.verdict_label({"qualified": False}) == "NOT QUALIFIED"
    assert summary.verdict_label({"qualified": False, "decision": "INCONCLUSIVE"}) == "INCONCLUSIVE"


def test_cell_protocol_errors_stop_the_matrix_before_anything_runs(tmp_path):
    path = _matrix_file(tmp_path, BASE.replace('["exact-bands-quick"]', '["exact-bands-quick", "exact-bands-quick"]'))
    with pytest.raises(UsageError, match=r"protocols\[1\].*appears twice"):
        driver.load_protocols(MatrixProtocol.from_toml(path), kinds.KINDS)
    path = _matrix_file(tmp_path, BASE.replace('["exact-bands-quick"]', '["missing.toml"]'))
    with pytest.raises(UsageError, match=r"protocols\[0\] = 'missing.toml'.*no such protocol file"):
        driver.load_protocols(MatrixProtocol.from_toml(path), kinds.KINDS)
    path = _matrix_file(tmp_path, BASE.replace('["exact-bands-quick"]', '["exact-bands-trace-mini"]'))
    with pytest.raises(UsageError, match=r"protocols\[0\]: a matrix cell runs a protocol that "
                                         r"`dflash-qualify run` runs"):
        driver.load_protocols(MatrixProtocol.from_toml(path), kinds.KINDS)


LOCAL_WITHOUT_RAY = r"""
import json, sys
sys.modules["ray"] = None          # `import ray` now fails, as if the extra were not installed
from dflash_qualify.harness.cli.matrix import run_matrix
from dflash_qualify.harness import kinds
from dflash_qualify.harness.errors import UsageError
from dflash_qualify.harness.kinds.matrix.executors import EXECUTORS
from dflash_qualify.harness.verify import verify
try:
    EXECUTORS["ray"]()
    ray_error = None
except UsageError as exc:
    ray_error = str(exc)
sealed = run_matrix(sys.argv[1], "local", None, sys.argv[2])
result = verify(sealed.path)
loaded = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
print(json.dumps({"path": str(sealed.path), "ok": result.ok,
                  "problems": [str(p) for p in result.problems], "ray_error": ray_error,
                  "ray_modules": [m for m in loaded if sys.modules[m] is not None],
                  "cells": sealed.results["cells"]["cells"]}))
"""


def run_local_without_ray(matrix_path: Path, out: Path) -> dict:
    """The local executor in a fresh interpreter where `import ray` fails."""
    done = subprocess.run([sys.executable, "-c", LOCAL_WITHOUT_RAY, str(matrix_path), str(out)],
                          capture_output=True, text=True, timeout=LIMIT_S, cwd=str(HERE))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def local_matrix(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local-matrix")
    return run_local_without_ray(write_matrix(tmp / "in", hosts=["gpu-h200"]), tmp / "out")


def test_local_executor_runs_every_cell_here_without_ray(local_matrix):
    """Acceptance 3: every protocol's cell sealed on this host, verified, Ray never imported."""
    out = local_matrix
    assert out["ray_modules"] == []
    assert out["ray_error"] and "pip install 'dflash-qualify[ray]'" in out["ray_error"]
    assert out["ok"], out["problems"]
    assert [(c["id"], c["status"]) for c in out["cells"]] == [
        ("exact-bands-quick--local", "sealed"), ("quick-two--local", "sealed")]
    root = Path(out["path"])
    for cell in out["cells"]:
        layout = cell_layout(root / cell["dir"])
        assert {"manifest.json", "protocol.json", "samples.jsonl", "stats.json"} <= set(layout)
        assert set(cell["arms_on_node"]) == {"A", "cand", "B"}  # every arm in this one cell
    records = json.loads((root / "cells.json").read_text())
    assert records["executor"] == "local"
    assert any("not applied" in n for n in records["notes"])  # hosts are a Ray selection
    assert json.loads((root / "protocol.json").read_text())["kind"] == "matrix"
    report = (root / "report.md").read_text()
    assert "| exact-bands-quick--local | exact-bands-quick |" in report
    assert "never pooled" in report


def test_tampering_with_one_cell_fails_matrix_verify_naming_that_cell(local_matrix, tmp_path):
    copy = tmp_path / Path(local_matrix["path"]).name
    shutil.copytree(local_matrix["path"], copy)
    assert verify(copy).ok
    victim = copy / "cells" / "quick-two--local" / "samples.jsonl"
    victim.write_bytes(victim.read_bytes().replace(b'"ok": true', b'"ok": false', 1))
    result = verify(copy)
    assert not result.ok
    text = "\n".join(str(p) for p in result.problems)
    assert "cells/quick-two--local/samples.jsonl: modified" in text
    assert "exact-bands-quick--local" not in text


def test_a_cell_edited_with_its_own_and_the_matrix_manifest_resealed_is_still_caught(
        local_matrix, tmp_path):
    """Nested verify: the cell re-checked whole (stats recomputed from its samples), named."""
    from dflash_qualify.harness.evidence import dumps_json, sha256_file
    copy = tmp_path / "m"
    shutil.copytree(local_matrix["path"], copy)
    cell = copy / "cells" / "quick-two--local"
    samples = cell / "samples.jsonl"
    samples.write_bytes(samples.read_bytes().replace(b'"value": ', b'"value": 1', 1))

    def reseal(root: Path, skip: str = "") -> None:
        manifest = json.loads((root / "manifest.json").read_text())
        for entry in manifest["files"]:
            if entry["path"] != skip:
                entry["size"], entry["sha256"] = sha256_file(root / entry["path"])
        (root / "manifest.json").write_text(dumps_json(manifest))

    reseal(cell)
    reseal(copy)
    result = verify(copy)
    text = "\n".join(str(p) for p in result.problems)
    assert "quick-two--local" in text and "exact-bands-quick--local" not in text, text


def test_an_edited_cells_json_fails_matrix_verify(local_matrix, tmp_path):
    """A verdict edited in the matrix record is caught: the matrix manifest covers cells.json."""
    copy = tmp_path / "m"
    shutil.copytree(local_matrix["path"], copy)
    cells = json.loads((copy / "cells.json").read_text())
    cells["cells"][0]["summary"]["verdict"] = "QUALIFIED" if cells["cells"][0]["summary"]["verdict"] != "QUALIFIED" else "NOT QUALIFIED"
    (copy / "cells.json").write_text(json.dumps(cells, indent=2, sort_keys=True) + "\n")
    result = verify(copy)
    assert any(p.path == "cells.json" for p in result.problems)


def test_response_notes_name_hosts_that_differ_and_never_pool():
    def cell(node, sha):
        return {"id": f"p--{node}", "protocol": "p", "node": node, "status": "sealed",
                "summary": {"responses": [{"prompt_id": "x", "group": None, "sha256": sha,
                                           "distinct": 1}]}}
    same = [cell("a", "1" * 64), cell("b", "1" * 64)]
    assert summary.response_notes(same) == []
    notes = summary.response_notes([cell("a", "1" * 64), cell("b", "2" * 64)])
    assert len(notes) == 1 and "protocol p" in notes[0] and "a: 1111" in notes[0] \
        and "b: 2222" in notes[0]


def test_ray_executor_without_the_extra_is_a_clear_error(monkeypatch):
    from dflash_qualify.harness.kinds.matrix import executors
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UsageError, match=r"pip install 'dflash-qualify\[ray\]'"):
        executors.RayExecutor()


def test_a_cell_holding_a_driver_secret_is_refused_whole_not_stored_altered(tmp_path):
    """The matrix writer scrubs its secrets from every byte; a cell holding one would no longer
    match its own manifest, so the driver refuses it with the reason and the matrix still seals.
    Here the prompt id "p256", which every cell's samples hold, plays the secret."""
    from dflash_qualify.harness.evidence import EvidenceWriter

    def writer_with_secret(root, name, *, secrets=()):
        return EvidenceWriter.create(root, name, secrets=[*secrets, "p256"])

    matrix = kinds.load(str(write_matrix(tmp_path / "in")), command="matrix")
    sealed = kinds.seal("matrix", matrix, tmp_path / "out", invocation="test",
                        options={"verify": verify}, writer_factory=writer_with_secret)
    cells = sealed.results["cells"]["cells"]
    assert [c["status"] for c in cells] == ["failed", "failed"]
    for cell in cells:
        assert "holds a value this driver treats as a secret; not stored" in cell["reason"]
    assert not (sealed.path / "cells").exists()
    assert verify(sealed.path).ok
