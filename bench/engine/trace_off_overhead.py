"""Trace capture's cost when off (not a test): q1 prefill tok/s of two builds of the engine core,
one as shipped (trace hooks compiled in, null when off) and one with the hooks compiled out,
run in interleaved processes.

Build the two variants from the same tree, then compare:

    git archive HEAD csrc CMakeLists.txt | tar -x -C /tmp/hook
    git archive HEAD csrc CMakeLists.txt | tar -x -C /tmp/nohook
    sed -i 's/if (sc.trace) /if (false) /' /tmp/nohook/csrc/model_forward.cpp
    sed -i 's/if (trace_) /if (false) /' /tmp/nohook/csrc/model_session.cpp
    for d in /tmp/hook /tmp/nohook; do cmake -S $d -B $d/build -DCMAKE_BUILD_TYPE=Release \
        -Dpybind11_DIR=$(python -m pybind11 --cmakedir) && cmake --build $d/build -j2; done
    python bench/engine/trace_off_overhead.py /tmp/hook/build/_core*.so /tmp/nohook/build/_core*.so ds4-mini 48 5 8

Local result (2026-11-29, 2-core AVX2 VM under load ~7, ds4-mini, 48-token q1 prefill, 1 thread,
8 interleaved processes x 5 prefills each): hooks in 73.344 tok/s, hooks out 73.437 tok/s
median (-0.13%, well inside the run-to-run spread of 57..110 tok/s).
"""
import importlib.machinery, importlib.util, json, statistics, subprocess, sys, time
if len(sys.argv) > 2 and sys.argv[1] == "child":
    so = sys.argv[2]
    loader = importlib.machinery.ExtensionFileLoader("_core", so)
    spec = importlib.util.spec_from_file_location("_core", so, loader=loader)
    core = importlib.util.module_from_spec(spec); loader.exec_module(core)
    MODEL_CONFIGS = {"ds4-mini": {
        "name": "ds4-mini", "vocab": 258, "d_model": 1024, "n_layers": 6, "n_heads": 8, "head_dim": 128,
        "rope_dim": 64, "n_swa": 64, "n_experts": 16, "top_k": 2, "d_ff": 768, "n_hash_layers": 1,
        "hc_mult": 4, "sinkhorn_iters": 3, "ctx": 4096, "ratios": [0, 4, 16, 4, 16, 4],
        "rope_theta": 10000.0, "norm_eps": 1e-6, "routed_scale": 1.5, "swiglu_limit": 7.0}}
    import numpy as np
    cfg = dict(MODEL_CONFIGS[sys.argv[3]], seed=0)
    m = core.Model(cfg, 1)
    toks = np.array([256] + list(b"Exact prefill bands let an engine read each weight block once for several")[:int(sys.argv[4]) - 1], dtype=np.int32)
    out = []
    for _ in range(int(sys.argv[5])):
        s = core.Session(m)
        r = s.prefill(toks, 1, 4, False, 32)
        out.append(len(toks) / (r["ns"] * 1e-9))
    print(json.dumps(out)); sys.exit(0)
a, b, model, n, reps, rounds = sys.argv[1:7]
res = {"hook": [], "nohook": []}
for i in range(int(rounds)):
    for name, so in (("hook", a), ("nohook", b)) if i % 2 == 0 else (("nohook", b), ("hook", a)):
        o = subprocess.run([sys.executable, __file__, "child", so, model, n, reps], capture_output=True, text=True, check=True)
        res[name] += json.loads(o.stdout)
for k, v in res.items():
    print(k, "median tok/s %.3f" % statistics.median(v), "n", len(v), "min %.3f max %.3f" % (min(v), max(v)))
print("hook/nohook - 1 = %.2f%%" % ((statistics.median(res["hook"]) / statistics.median(res["nohook"]) - 1) * 100))
