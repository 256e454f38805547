"""`report --format html`: one self-contained file whose plots render in a real headless browser.

The browser test needs Chromium (Debian: `apt-get install -y chromium`); it is skipped, with
that message, only when no Chromium binary is found. Chromium runs with every host name
mapped to nowhere, so the page must render without the network.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dflash_qualify.harness import reports
from dflash_qualify.harness.evidence import load_evidence

EXE = str(Path(sys.executable).parent / "dflash-qualify")
LIMIT_S = 180  # only stops a hung browser; nothing is timed
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
RUN_PLOTS = ("strip", "time", "gain")   # a bracket run: three plots
# A plot counts as drawn when at least this many screenshot pixels carry its data colour
# (markers and lines of a 1200-px-wide page give thousands; 50 rules out stray anti-aliasing).
MIN_COLOURED_PIXELS = 50


def chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium not installed (Debian: apt-get install -y chromium); "
                "the HTML report's browser test needs it")


def browser(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-extensions", "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'profile'}",
            *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=LIMIT_S)


@pytest.fixture
def run_html(tmp_path, evidence_factory):
    d = evidence_factory.build(tmp_path / "ev", evidence_factory.QUALIFYING)
    done = subprocess.run([EXE, "report", str(d), "--format", "html"], capture_output=True,
                          text=True, timeout=LIMIT_S)
    assert done.returncode == 0, done.stderr
    page = tmp_path / "report.html"
    page.write_text(done.stdout, encoding="utf-8")
    return page, load_evidence(d)


def test_html_is_self_contained_and_complete(run_html):
    page, ev = run_html
    text = page.read_text(encoding="utf-8")
    assert re.findall(r'<figure class="plot" data-plot="(\w+)"', text) == list(RUN_PLOTS)
    assert text.count("<svg") == len(RUN_PLOTS)
    assert "<script" not in text and "<link" not in text and "<img" not in text
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', text)   # nothing to fetch
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text)
    assert ev.manifest_sha in text
    assert "identical" in text and "QUALIFIED" in text
    assert "AMD" in text or "CPU" in text  # the environment table


def test_html_renders_in_headless_chromium(run_html, tmp_path):
    from PIL import Image

    page, _ = run_html
    dom = browser(["--dump-dom", page.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    figures = re.findall(r'<figure class="plot" data-plot="(\w+)">(.*?)</figure>', dom.stdout, re.S)
    assert [name for name, _ in figures] == list(RUN_PLOTS)
    for name, body in figures:  # every plot is an svg with drawn paths
        assert body.count("<svg") == 1, name
        assert len(re.findall(r"<path\b", body)) >= 3, name

    shot = tmp_path / "shot.png"
    done = browser([f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()], tmp_path)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int16).reshape(-1, 3)
    background = int(np.all(pixels == 255, axis=1).sum())
    assert background < len(pixels) * 0.98  # something was drawn

    def near(colour: tuple[int, int, int], tol: int = 40) -> int:
        return int(np.all(np.abs(pixels - np.asarray(colour)) <= tol, axis=1).sum())

    assert near((0x1f, 0x77, 0xb4)) >= MIN_COLOURED_PIXELS   # reference samples / MAD bands
    assert near((0xd6, 0x27, 0x28)) >= MIN_COLOURED_PIXELS   # candidate samples, gain and CI


def test_html_of_calibration_and_compare(tmp_path, evidence_factory):
    p = evidence_factory.compare_protocol()
    values = {"main": {"64": [5.0, 5.1, 5.2, 5.05, 5.15], "128": [9.0, 9.1, 9.2, 9.3, 9.4]},
              "pr": {"64": [4.0, 4.1, 4.2, 4.05, 4.1], "128": [8.0, 8.1, 8.2, 8.3, 8.4]}}
    d = evidence_factory.build(tmp_path / "ev", values, protocol=p)
    text = reports.render(load_evidence(d), "html")
    assert text.count("<svg") == 2 * len(RUN_PLOTS)  # two groups
    assert "Wilcoxon signed-rank p" in text
