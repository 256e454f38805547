"""The harness side of the CUDA backend: [target] device, nvidia-smi readings in the
environment record (a fake nvidia-smi script first on PATH, run as a real subprocess), the
GPU protocol, and an engine that cannot start on cuda failing its arm by name."""
from __future__ import annotations

from evidence_factory import fixed_n_text

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_qualify.harness import environment, gpu, kinds, protocol
from dflash_qualify.harness.evidence import load_evidence
from dflash_qualify.harness.reports import render
from dflash_qualify.harness.targets.fake import FakeScript, fake_factory
from dflash_qualify.harness.targets.worker import embedded_argv
from dflash_qualify.harness.verify import verify

# beside the interpreter (a venv), else on PATH (scripts/gpu_device_run.sh installs to a prefix)
EXE = next((str(p) for p in [Path(sys.executable).parent / "dflash-qualify"] if p.exists()),
           shutil.which("dflash-qualify") or "dflash-qualify")
H200 = "0, NVIDIA H200, 580.159.04, 1980, 3201, 700.00, 124.76, 36"   # as the H200 printed it
QUIET_PATH = "/usr/bin:/bin"   # no nvidia-smi on it (checked in the fixture below)


# --------------------------------------------------------------------------- fake nvidia-smi

@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """install(stdout, rc=0, stderr="", sleep_s=0): an nvidia-smi script first on PATH that
    logs its argv to calls.log and prints `stdout`; returns the log path."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    log = tmp_path / "calls.log"

    def install(stdout: str, rc: int = 0, stderr: str = "", sleep_s: float = 0) -> Path:
        script = bindir / "nvidia-smi"
        script.write_text(
            f"#!{sys.executable}\n"
            "import sys, time\n"
            f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
            f"time.sleep({sleep_s!r})\n"
            f"sys.stdout.write({stdout!r}); sys.stderr.write({stderr!r})\n"
            f"sys.exit({rc})\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{QUIET_PATH}")
        return log

    return install


@pytest.fixture
def no_smi(monkeypatch):
    monkeypatch.setenv("PATH", QUIET_PATH)
    if any(Path(d, "nvidia-smi").exists() for d in QUIET_PATH.split(os.pathsep)):
        pytest.skip("this host has nvidia-smi in /usr/bin or /bin")


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_reading_parses_the_h200_line(fake_smi):
    log = fake_smi(H200 + "\n")
    snap = gpu.read()
    assert snap["source"] == "nvidia-smi" and snap["reason"] is None
    assert snap["read_utc"].endswith("Z")
    assert snap["gpus"] == [{"index": 0, "name": "NVIDIA H200", "driver_version": "580.159.04",
                             "sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "power_limit_w": 700.0,
                             "power_draw_w": 124.76, "temperature_c": 36}]
    assert calls(log) == ["--query-gpu=index,name,driver_version,clocks.sm,clocks.mem,"
                          "power.limit,power.draw,temperature.gpu --format=csv,noheader,nounits"]


def test_unreadable_values_become_null_and_several_gpus_are_listed(fake_smi):
    fake_smi("0, NVIDIA H200, 580.159.04, 1980, 3201, [N/A], [N/A], 36\n"
             "1, NVIDIA H200, 580.159.04, [Not Supported], 3201, 700.00, N/A, [Unknown Error]\n\n")
    snap = gpu.read()
    assert snap["reason"] is None
    first, second = snap["gpus"]
    assert first["power_limit_w"] is None and first["power_draw_w"] is None
    assert first["sm_clock_mhz"] == 1980
    assert second["index"] == 1 and second["sm_clock_mhz"] is None
    assert second["power_draw_w"] is None and second["temperature_c"] is None


@pytest.mark.parametrize("stdout, expect", [
    ("garbage\n", "output line 1 has 1 fields, expected 8"),
    (H200 + "\nNVIDIA H200, 580.159.04, 1980\n", "output line 2 has 3 fields, expected 8"),
    ("", "nvidia-smi listed no GPU"),
    ("\x00\xff,,\n", "output line 1 has 3 fields"),
])
def test_malformed_output_is_null_with_a_reason(fake_smi, stdout, expect):
    fake_smi(stdout)
    snap = gpu.read()
    assert snap["gpus"] is None
    assert expect in snap["reason"]


def test_a_value_that_is_no_number_is_null_and_named(fake_smi):
    fake_smi("0, NVIDIA H200, 580.159.04, fast, 3201 MHz, 700.00 W, 124.76, 36\n")
    snap = gpu.read()
    assert snap["gpus"][0]["sm_clock_mhz"] is None
    assert snap["gpus"][0]["mem_clock_mhz"] == 3201 and snap["gpus"][0]["power_limit_w"] == 700.0
    assert snap["reason"] == "line 1 clocks.sm: 'fast' is not a number"


def test_failing_hanging_and_missing_nvidia_smi(fake_smi, monkeypatch):
    fake_smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
             rc=9)
    snap = gpu.read()
    assert snap["gpus"] is None
    assert snap["reason"].startswith("nvidia-smi exited with status 9: ")
    assert "NVIDIA-SMI has failed because it couldn't communicate" in snap["reason"]
    fake_smi(H200 + "\n", sleep_s=5)
    assert gpu.read(timeout_s=0.3)["reason"] == "nvidia-smi did not answer within 0.3 s"
    monkeypatch.setenv("PATH", QUIET_PATH)
    assert gpu.read(exe="/nonexistent/nvidia-smi")["reason"].startswith("nvidia-smi could not run")


def test_missing_nvidia_smi(no_smi):
    snap = gpu.read()
    assert snap == {"source": "nvidia-smi", "read_utc": snap["read_utc"], "gpus": None,
                    "reason": "nvidia-smi not found on PATH"}


# --------------------------------------------------------------------------- protocol

def protocol_text(device: str | None, *, base: str = "exact-bands-quick", extra: str = "") -> str:
    text = fixed_n_text((protocol.bundled_dir() / f"{base}.toml").read_text())  # one block
    if extra.startswith("schedule"):  # replace the bundled protocol's own schedule line
        text = "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("schedule"))
    line = f'device = "{device}"\n' if device is not None else ""
    return text.replace('[target]\nkind = "embedded"\n', f'[target]\nkind = "embedded"\n{line}'
                        ).replace("schema_version = 1\n", f"schema_version = 1\n{extra}")


def load_text(tmp_path: Path, text: str, **kw) -> protocol.LoadedProtocol:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return protocol.load(str(path), **kw)


def test_device_defaults_to_cpu_and_accepts_cuda(tmp_path):
    assert protocol.load("exact-bands-aba").resolved["target"]["device"] == "cpu"
    assert load_text(tmp_path, protocol_text("cuda")).resolved["target"]["device"] == "cuda"
    assert load_text(tmp_path, protocol_text("cpu")).resolved["target"]["device"] == "cpu"


@pytest.mark.parametrize("value, found", [('"gpu"', "string 'gpu'"), ("1", "integer 1"),
                                          ('"CUDA"', "string 'CUDA'")])
def test_bad_device_is_one_line_naming_file_field_expected_found(tmp_path, value, found):
    text = protocol_text(None).replace('[target]\nkind = "embedded"\n',
                                       f'[target]\nkind = "embedded"\ndevice = {value}\n')
    path = tmp_path / "bad.toml"
    path.write_text(text)
    done = subprocess.run([EXE, "run", str(path), "--out", str(tmp_path / "ev")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    message = done.stderr.strip()
    assert "Traceback" not in message and len(message.splitlines()) == 1
    assert f'{path}: target.device: expected one of "cpu", "cuda", found {found}' in message
    assert not (tmp_path / "ev").exists()


def test_device_on_targets_that_take_it(tmp_path):
    quick = fixed_n_text((protocol.bundled_dir() / "exact-bands-quick.toml").read_text())
    head, rest = quick.split("[target]\n", 1)
    command = (head + '[target]\nkind = "command"\ncommand = ["my-engine", "--gpu"]\n'
               'device = "cuda"\n\n[measure]' + rest.split("[measure]", 1)[1])
    r = load_text(tmp_path, command).resolved
    assert r["target"]["device"] == "cuda" and r["target"]["command"] == ["my-engine", "--gpu"]
    http = (protocol.bundled_dir() / "llama-server-aba.toml").read_text().replace(
        "[target]\n", '[target]\ndevice = "cuda"\n')
    with pytest.raises(protocol.UsageError, match=r"target\.device: unknown key"):
        load_text(tmp_path, http)


def test_gpu_protocol_loads_without_a_gpu():
    """exact-bands-gpu-aba: ds4-gpu on cuda, a 512-token prompt, q1 A / bands chunk 4 / q1 B,
    and few enough requests that the whole bracket stays well inside 3 minutes on an H200."""
    from dflash_qualify.engine.config import MODEL_CONFIGS

    assert "exact-bands-gpu-aba" in protocol.bundled_names()
    r = protocol.load("exact-bands-gpu-aba").resolved
    assert r["kind"] == "bracket" and r["metric"] == "prefill_tok_s" and r["cache"] == "cold"
    assert r["target"] == {"kind": "embedded", "model": "ds4-gpu", "seed": 0, "threads": None,
                           "prefix_cache_slots": 0, "device": "cuda", "pin_cpu": None}
    assert "ds4-gpu" in MODEL_CONFIGS
    (prompt,) = r["prompts"]
    assert prompt["length"] == 512 and prompt["bytes"] == 512
    assert prompt["text"] == protocol.cut_corpus(512)
    assert [(a["id"], a["role"]) for a in r["arms"]] == [("A", "reference"), ("cand", "candidate"),
                                                         ("B", "reference")]
    assert r["schedule"] == ["A", "cand", "B"]
    q1 = {"DFLASH_DS4_EXACT_PREFILL_BANDS": None, "LUCE_MMVQ_MAX_NCOLS": None}
    assert r["arms"][0]["env"] == r["arms"][2]["env"] == q1 and r["arms"][0]["engine"] == {}
    assert r["arms"][1]["env"]["DFLASH_DS4_EXACT_PREFILL_BANDS"] == "1"
    assert r["arms"][1]["engine"] == {"chunk": 4}
    # 0.85 s: a 512-token q1 prefill on the H200 (~630 tok/s measured; bands are faster)
    requests_s = sum(a["warmups"] + a["measured"] for a in r["arms"]) * 0.85
    assert requests_s < 60 and all(a["measured"] >= 10 for a in r["arms"])
    argv = embedded_argv(r["target"], r["arms"][1])
    assert argv[argv.index("--device") + 1] == "cuda" and argv[argv.index("--model") + 1] == "ds4-gpu"


def test_cpu_worker_command_line_is_unchanged():
    target = {"kind": "embedded", "model": "ds4-tiny", "seed": 0, "threads": 1,
              "prefix_cache_slots": 0}
    arm = {"engine": {"chunk": 4}}
    before = embedded_argv(target, arm)  # a protocol.json written before `device` existed
    assert "--device" not in before
    assert embedded_argv({**target, "device": "cpu"}, arm) == before
    assert embedded_argv({**target, "device": "cuda"}, arm) == before[:11] + [
        "--device", "cuda"] + before[11:]


# --------------------------------------------------------------------------- runs (fake engine)

def run_fake(tmp_path: Path, loaded: protocol.LoadedProtocol) -> kinds.Sealed:
    scripts = {"A": FakeScript(prefill_ms=[10.0]), "cand": FakeScript(prefill_ms=[5.0]),
               "B": FakeScript(prefill_ms=[10.0])}
    return kinds.qualify(loaded, tmp_path / "ev", invocation="test",
                          make_target=fake_factory(scripts))


def test_cuda_run_reads_the_gpu_before_and_after_each_arm(tmp_path, fake_smi):
    log = fake_smi(H200 + "\n")
    out = run_fake(tmp_path, load_text(tmp_path, protocol_text("cuda"), warmups=1, measured=3))
    assert len(calls(log)) == 1 + 2 * 3   # once for the run, before and after each arm
    env = json.loads((out.path / "environment.json").read_text())
    assert env["version"] == 2 and env["target"]["device"] == "cuda"
    assert env["gpu"]["gpus"][0]["name"] == "NVIDIA H200" and env["gpu"]["reason"] is None
    assert not any("GPU" in w for w in env["warnings"])
    for arm in ("A", "cand", "B"):
        (visit,) = env["arms"][arm]["gpu"]
        assert visit["visit"] == 0
        assert visit["before"]["gpus"][0]["sm_clock_mhz"] == 1980
        assert visit["after"]["gpus"][0]["power_limit_w"] == 700.0
        assert visit["before"]["read_utc"] <= visit["after"]["read_utc"]
    assert verify(out.path).ok
    ev = load_evidence(out.path)
    md = render(ev, "md")
    assert "GPU NVIDIA H200 (driver 580.159.04; at start SM 1980 MHz, memory 3201 MHz, " \
           "power limit 700 W)" in md
    assert "| arm | read | GPU | SM MHz | memory MHz | power limit W | power draw W | " \
           "temperature C |" in md
    assert "| cand | after | 0: NVIDIA H200 | 1980 | 3201 | 700 | 124.76 | 36 |" in md
    assert (out.path / "report.md").read_text().count("| 0: NVIDIA H200 |") == 6
    page = render(ev, "html")
    assert "<h3>GPU state per arm</h3>" in page
    assert "<td>B</td><td>before</td><td>0: NVIDIA H200</td><td>1980</td>" in page
    assert "NVIDIA H200 (driver 580.159.04; at start SM 1980 MHz" in page


def test_cuda_run_without_nvidia_smi_records_null_with_a_reason_and_warns(tmp_path, no_smi):
    out = run_fake(tmp_path, load_text(tmp_path, protocol_text("cuda"), warmups=0, measured=3))
    env = json.loads((out.path / "environment.json").read_text())
    assert env["gpu"]["gpus"] is None and env["gpu"]["reason"] == "nvidia-smi not found on PATH"
    warning = ("the target runs on cuda but the GPU (name, driver, clocks, power limit) is not "
               "recorded: nvidia-smi not found on PATH")
    assert env["warnings"] == [warning]   # said once, not again per arm
    assert env["arms"]["A"]["gpu"][0]["before"]["gpus"] is None
    md = (out.path / "report.md").read_text()
    assert f"**Warning:** {warning}." in md
    assert "GPU not recorded (nvidia-smi not found on PATH)" in md
    assert "| A | before | not read: nvidia-smi not found on PATH | n/a |" in md
    assert verify(out.path).ok


def test_cuda_run_with_malformed_nvidia_smi_output_still_completes(tmp_path, fake_smi):
    fake_smi("NVIDIA H200|580|oops\n")
    out = run_fake(tmp_path, load_text(tmp_path, protocol_text("cuda"), warmups=0, measured=3))
    env = json.loads((out.path / "environment.json").read_text())
    reason = ("nvidia-smi output line 1 has 1 fields, expected 8 (index,name,driver_version,"
              "clocks.sm,clocks.mem,power.limit,power.draw,temperature.gpu): "
              "'NVIDIA H200|580|oops'")
    assert env["gpu"] == {**env["gpu"], "gpus": None, "reason": reason}
    assert len(env["warnings"]) == 1 and env["warnings"][0].endswith(reason)
    md = render(load_evidence(out.path), "md")
    assert "not read: nvidia-smi output line 1" in md and "NVIDIA H200\\|580\\|oops" in md


def test_cuda_arm_readings_that_fail_later_are_warned_per_reason(tmp_path, fake_smi):
    """nvidia-smi works at the start of the run, then starts failing: the arms say so."""
    log = fake_smi(H200 + "\n")
    loaded = load_text(tmp_path, protocol_text("cuda"), warmups=0, measured=2)
    scripts = {"A": FakeScript(on_request=lambda n: fake_smi("", rc=15, stderr="GPU is lost\n"))}
    out = kinds.qualify(loaded, tmp_path / "ev", invocation="test",
                         make_target=fake_factory(scripts))
    env = json.loads((out.path / "environment.json").read_text())
    assert env["gpu"]["gpus"] and env["arms"]["A"]["gpu"][0]["before"]["gpus"]
    assert env["arms"]["A"]["gpu"][0]["after"]["reason"] == "nvidia-smi exited with status 15: " \
                                                            "'GPU is lost'"
    assert env["warnings"] == ["GPU state around arm(s) A, cand, B not fully read: nvidia-smi "
                               "exited with status 15: 'GPU is lost'"]
    assert len(calls(log)) == 7


def test_cuda_readings_follow_every_visit_of_a_schedule(tmp_path, fake_smi):
    log = fake_smi(H200 + "\n")
    loaded = load_text(tmp_path, protocol_text("cuda", extra='schedule = "ABBA"\n'),
                       warmups=0, measured=4)
    out = run_fake(tmp_path, loaded)
    env = json.loads((out.path / "environment.json").read_text())
    assert [v["visit"] for v in env["arms"]["cand"]["gpu"]] == [0, 1]
    assert all(v["before"]["gpus"] and v["after"]["gpus"]
               for arm in env["arms"].values() for v in arm["gpu"])
    assert len(calls(log)) == 1 + 2 * 6
    assert "| cand | after (visit 2) | 0: NVIDIA H200 |" in (out.path / "report.md").read_text()


def test_cpu_run_records_the_gpu_once_when_nvidia_smi_exists(tmp_path, fake_smi):
    log = fake_smi(H200 + "\n")
    out = run_fake(tmp_path, load_text(tmp_path, protocol_text(None), warmups=0, measured=3))
    assert len(calls(log)) == 1
    env = json.loads((out.path / "environment.json").read_text())
    assert env["gpu"]["gpus"][0]["driver_version"] == "580.159.04"
    assert all(arm["gpu"] is None for arm in env["arms"].values())
    md = (out.path / "report.md").read_text()
    assert "GPU NVIDIA H200" in md and "GPU state per arm" not in md


def test_cpu_run_without_nvidia_smi_is_as_before(tmp_path, no_smi):
    out = run_fake(tmp_path, load_text(tmp_path, protocol_text(None), warmups=0, measured=3))
    env = json.loads((out.path / "environment.json").read_text())
    assert env["gpu"] is None and env["warnings"] == []
    assert all(arm["gpu"] is None for arm in env["arms"].values())
    md = (out.path / "report.md").read_text()
    assert "GPU" not in md


def test_reports_read_a_version_1_gpu_record():
    from dflash_qualify.harness.reports.base import engine_device, gpu_state_rows, gpu_summary

    gpu_build = {"build_type": "Release", "simd_path": "avx2", "device": "cuda",
                 "cuda": {"built": True, "gpu": "NVIDIA H200"}}
    assert engine_device({"engine_build": gpu_build}) == "on cuda (NVIDIA H200)"
    assert engine_device({"engine_build": {**gpu_build, "device": "cpu"}}) is None
    assert engine_device({"engine_build": {"build_type": "Release"}}) is None
    assert engine_device({"engine_build": None}) is None

    old = {"gpu": [{"name": "NVIDIA A100", "driver_version": "535.1", "clocks.sm": "1410 MHz",
                    "clocks.mem": "1215 MHz", "temperature.gpu": "40"}], "arms": {"A": {}}}
    assert gpu_summary(old) == "NVIDIA A100"
    assert gpu_state_rows(old) == []
    assert gpu_summary({"gpu": None}) is None and gpu_summary({}) is None
    two = {"gpu": environment.gpu_mod.parse(H200 + "\n" + H200.replace("0,", "1,", 1))[0]}
    two["gpu"] = {"gpus": two["gpu"], "reason": None}
    assert gpu_summary(two) == "2 x NVIDIA H200 (driver 580.159.04)"


# --------------------------------------------------------------------------- the real worker

def _worker_ready(args: list[str], env: dict | None = None) -> tuple[int, dict, str]:
    done = subprocess.run([sys.executable, "-m", "dflash_qualify.engine.worker", *args],
                          input="", capture_output=True, text=True, timeout=300, env=env)
    first = done.stdout.splitlines()[0] if done.stdout else "{}"
    return done.returncode, json.loads(first), done.stderr


def test_worker_passes_device_only_when_not_cpu(tmp_path):
    """An Engine stand-in that refuses to start and names the keyword arguments it got."""
    probe = ("import sys, dflash_qualify.engine as e\n"
             "class Probe:\n"
             "    def __init__(self, **kw): raise e.EngineError('kwargs ' + ','.join(sorted(kw)))\n"
             "e.Engine = Probe\n"
             "from dflash_qualify.engine import worker\n"
             "sys.exit(worker.main(sys.argv[1:]))\n")
    results = {}
    for device in ("cpu", "cuda"):
        done = subprocess.run([sys.executable, "-c", probe, "--model", "ds4-tiny",
                               "--device", device], input="", capture_output=True, text=True,
                              timeout=120)
        results[device] = (done.returncode, json.loads(done.stdout.splitlines()[0]))
    rc, ready = results["cpu"]
    assert rc == 2 and ready["ready"] is False and "device" not in ready
    assert ready["error"]["message"] == "kwargs model,prefix_cache_slots,seed,threads"
    rc, ready = results["cuda"]
    assert rc == 2 and ready["device"] == "cuda"
    assert ready["error"]["message"] == "kwargs device,model,prefix_cache_slots,seed,threads"


def test_cpu_worker_ready_line_has_no_device():
    rc, ready, _ = _worker_ready(["--model", "ds4-tiny", "--threads", "1"])
    assert rc == 0 and ready["ready"] is True and "device" not in ready


def test_run_on_cuda_without_a_gpu_fails_the_arm_by_name(tmp_path):
    """dflash-qualify run with device = "cuda" where the engine cannot start on cuda (no CUDA
    build or no GPU): exit 3, one line naming the arm and the device, no traceback, and the
    evidence left incomplete with that reason."""
    from dflash_qualify.engine import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("the engine runs on cuda here (a CUDA build and a GPU): nothing fails")
    path = tmp_path / "cuda.toml"
    path.write_text(protocol_text("cuda"))
    done = subprocess.run([EXE, "run", str(path), "--out", str(tmp_path / "ev"),
                           "--warmups", "0", "--measured", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "run failed: arm A: the worker could not start the engine on device cuda: " \
           in done.stderr
    (partial,) = (tmp_path / "ev").iterdir()
    assert partial.name.endswith(".partial")
    reason = (partial / "INCOMPLETE").read_text()
    assert "failed: arm A: the worker could not start the engine on device cuda: " in reason
    assert "cannot start the engine on device cuda" in (partial / "logs" / "A.log").read_text()


def test_calibrate_on_cuda_keeps_every_repeats_gpu_readings(tmp_path, fake_smi):
    from dflash_qualify.harness.kinds.calibration import calibrate

    log = fake_smi(H200 + "\n")
    loaded = load_text(tmp_path, protocol_text("cuda"), warmups=0, measured=3)
    settings = {"repeats": 2, "simulations": 20, "seed": 1, "target_effect_pct": 5.0,
                "target_power": 0.8, "max_false_rate_pct": 1.0}
    out = calibrate(loaded, tmp_path / "ev", settings, invocation="test",
                    make_target=fake_factory({}))
    assert verify(out.path).ok
    env = json.loads((out.path / "environment.json").read_text())
    assert [(v["repeat"], v["visit"]) for v in env["arms"]["B"]["gpu"]] == [(0, 0), (1, 0)]
    assert len(calls(log)) == 1 + 2 * 3 * 2
    md = (out.path / "report.md").read_text()
    assert "| B | after (repeat 2, visit 1) | 0: NVIDIA H200 | 1980 |" in md


def test_gpu_protocol_is_listed(tmp_path):
    """Where protocols are listed: `run --help` and the unknown-protocol message."""
    helped = subprocess.run([EXE, "run", "--help"], capture_output=True, text=True, timeout=120)
    assert "exact-bands-gpu-aba (ds4-gpu on cuda)" in " ".join(helped.stdout.split())
    with pytest.raises(protocol.UsageError, match=r"bundled: .*exact-bands-gpu-aba"):
        protocol.load("no-such-protocol")


def test_exactness_protocol_on_cuda_is_refused_up_front(tmp_path):
    """The embedded engine captures traces on the CPU only: say so at load, not per request."""
    from dflash_qualify.harness.kinds.exactness import schema as exactness_protocol

    text = (protocol.bundled_dir() / "exact-bands-trace.toml").read_text()
    assert '[target]\nkind = "embedded"\n' in text
    path = tmp_path / "trace-cuda.toml"
    path.write_text(text.replace('[target]\nkind = "embedded"\n',
                                 '[target]\nkind = "embedded"\ndevice = "cuda"\n'))
    with pytest.raises(protocol.UsageError) as err:
        exactness_protocol.load(str(path))
    assert str(err.value) == (f'{path}: target.device: expected "cpu" (the embedded engine '
                              "captures traces on the CPU only), found string 'cuda'")
