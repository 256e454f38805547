"""Where the peer benches' llama.cpp binaries come from: a given folder, or scripts/build_llamacpp.sh's cache."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def llama_bin(given: str | None, cuda: bool = False) -> Path:
    """The folder holding llama-bench: `given` (--llama-bin), else scripts/build_llamacpp.sh's
    cached build (native CPU, or `--cuda` for sm_90), built on first use."""
    if given:
        path = Path(given)
    else:
        what = "CUDA, ~5 min on 16 cores" if cuda else "native CPU, ~10-20 min on 2 cores"
        print(f"peer: locating llama.cpp (scripts/build_llamacpp.sh; builds once, {what})", flush=True)
        cmd = ["bash", str(REPO / "scripts" / "build_llamacpp.sh")] + (["--cuda"] if cuda else [])
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[1:])} failed:\n{res.stderr[-3000:]}")
        path = Path(res.stdout.strip().splitlines()[-1])
    if not (path / "llama-bench").is_file():
        raise SystemExit(f"--llama-bin: expected a folder with llama-bench, got {path}")
    return path
