"""The GitHub action (action.yml): its run -> verify -> gate script writes the step outputs, the step
summary and JUnit on a real (small) bracket; the composite steps call it and upload the evidence."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "action_qualify.sh"


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    out_file, summary = tmp_path / "github_output", tmp_path / "summary.md"
    out_file.touch()
    full = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "GITHUB_OUTPUT": str(out_file), "GITHUB_STEP_SUMMARY": str(summary),
            "DQ_OUT": str(tmp_path / "ev"), **env}
    proc = subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True,
                          cwd=tmp_path)
    return proc, outputs(out_file)


def test_action_script_runs_verifies_gates_and_reports(tmp_path):
    proc, out = run_script(tmp_path, DQ_PROTOCOL=str(REPO / "examples" / "command-adapter-aba.toml"),
                           DQ_WARMUPS="0", DQ_MEASURED="3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = Path(out["evidence_dir"])
    assert d.parent == tmp_path / "ev" and (d / "manifest.json").is_file()
    assert len(out["manifest_sha256"]) == 64 and out["manifest_sha256"] in proc.stdout
    assert out["gate_rc"] in ("0", "1") and out["qualified"] == str(out["gate_rc"] == "0").lower()
    assert "<testsuite" in Path(out["junit"]).read_text()
    assert "command-adapter-aba" in (tmp_path / "summary.md").read_text()


def test_action_script_passes_a_failed_run_through(tmp_path):
    proc, out = run_script(tmp_path, DQ_PROTOCOL=str(tmp_path / "missing.toml"))
    assert proc.returncode == 2 and "no such protocol file" in proc.stderr
    assert "evidence_dir" not in out


def test_composite_action_calls_the_script_and_uploads_the_evidence():
    text = (REPO / "action.yml").read_text()
    assert "using: composite" in text
    assert 'run: bash "$GITHUB_ACTION_PATH/scripts/action_qualify.sh"' in text
    assert "actions/upload-artifact@v4" in text and "protocol:\n    description" in text
    for name in ("evidence-dir", "qualified", "manifest-sha256", "junit"):
        assert f"  {name}:\n" in text
