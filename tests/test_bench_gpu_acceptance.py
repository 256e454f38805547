"""bench/gpu/mmvq_acceptance.py: the issue #9 acceptance-1 table from bench JSONs (pure; no GPU)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gpu_mmvq_acceptance", Path(__file__).resolve().parent.parent / "bench" / "gpu" / "mmvq_acceptance.py")
acc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(acc)

MIB_16K = 16384 * 16384 * 34 / 32 / 2**20  # 272 MiB of Q8_0
MIB_32K = 2 * MIB_16K


def kernels_doc(tbps_16k: dict[int, float], us_32k: dict[int, float]) -> dict:
    return {
        "matrix": {"rows": 16384, "cols": 16384},
        "results": [{"kernel": "mmvq", "ncols": n, "tbps": t} for n, t in tbps_16k.items()]
        + [{"kernel": "mmq", "ncols": 8, "tbps": 1.0}],
        "fixed_cost": {"sizes": [{"what": "read", "mib": 1024.0, "us": 240.0}]
                       + [{"what": f"mmvq {n}", "mib": MIB_16K, "us": 99.0} for n in us_32k]  # ignored: headline rows
                       + [{"what": f"mmvq {n}", "mib": MIB_32K, "us": us} for n, us in us_32k.items()]},
    }


def cublas_doc(rows: int, tbps: dict[int, float]) -> dict:
    return {"matrix": {"rows": rows, "cols": 16384, "bytes": 2 * rows * 16384},
            "results_w_at_xt": [{"ncols": n, "tbps": t} for n, t in tbps.items()]}


def test_rates_and_verdicts_per_shape():
    kb = kernels_doc({1: 4.25, 2: 4.14, 3: 4.12, 4: 3.97}, {1: 128.5, 2: 132.0, 3: 132.0, 4: 134.8})
    text = acc.render(kb, [cublas_doc(32768, {1: 4.42, 2: 3.26, 3: 0.64, 4: 3.23}),
                           cublas_doc(16384, {1: 4.34, 2: 3.05, 3: 1.11, 4: 3.04})])
    first, second = text.split("32768 x 16384")
    assert first.startswith("16384 x 16384: Q8_0 272 MiB (cuBLAS bf16 512 MiB)")
    assert "| 2 | 4.140 | 3.050 | 1.36x | yes |" in first
    assert "| 4 | 3.970 | 3.040 | 1.31x | no |" in first  # below 4.0 TB/s
    # 32768 rows from the fixed-cost sizes: 544 MiB / 134.8 us
    tbps4 = MIB_32K * 2**20 / 134.8e-6 / 1e12
    assert f"| 4 | {tbps4:.3f} | 3.230 | {tbps4 / 3.23:.2f}x | yes |" in second
    assert ": Q8_0 544 MiB (cuBLAS bf16 1024 MiB)" in second


def test_ratio_below_target_fails_even_above_4_tbps():
    kb = kernels_doc({1: 4.3, 2: 4.1, 3: 4.1, 4: 4.1}, {})
    text = acc.render(kb, [cublas_doc(16384, {1: 4.3, 2: 3.3, 3: 1.1, 4: 3.0})])
    assert "| 2 | 4.100 | 3.300 | 1.24x | no |" in text
    assert "| 4 | 4.100 | 3.000 | 1.37x | yes |" in text


def test_bad_input_is_a_message_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "k.json"
    bad.write_text("{not json")
    assert acc.main([str(bad), str(tmp_path / "missing.json")]) == 2
    assert "gpu_mmvq_acceptance:" in capsys.readouterr().err
    assert acc.main([]) == 2
    good = tmp_path / "g.json"
    good.write_text(json.dumps(kernels_doc({1: 4.0, 2: 4.0, 3: 4.0, 4: 4.0}, {})))
    assert acc.main([str(good)]) == 2  # a kernel bench JSON alone: nothing to compare against
    assert acc.main([str(good), str(good)]) == 2  # the second is not a cuBLAS JSON
    assert "not a kernel bench JSON followed by cuBLAS JSONs" in capsys.readouterr().err
