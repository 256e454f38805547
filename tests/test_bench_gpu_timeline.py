"""bench/gpu/timeline.py's pure parts: kernel names, sites by launch order, per-step figures."""
from __future__ import annotations

import pytest

from bench.gpu.timeline import by_site, per_site, short_name, site_names

LAYER = ["mmvq_tma_kernel", "k_qk_rope", "k_attend", "k_pool", "mmvq_tma_kernel", "k_hc_step",
         "mmvq_group_kernel", "k_swiglu", "mmvq_group_kernel", "k_hc_step"]
STEP = ["k_hc_step"] + LAYER + LAYER[:3] + LAYER[4:] + ["mmvq_kernel", "k_step_end"]


def test_short_name_drops_namespaces_templates_and_parameters():
    assert short_name("void dq::gpu::(anonymous namespace)::k_hc_step(dq::gpu::HcStepArgs, int)") == "k_hc_step"
    assert short_name("void dq::cuda::(anonymous namespace)::mmvq_tma_kernel<1, 2, 2, 1, 4, 1>"
                      "(signed char const*, unsigned short const*)") == "mmvq_tma_kernel"
    assert short_name("mmvq_group_kernel<std::pair<int, int>, 4>(x)") == "mmvq_group_kernel"


def test_site_names_follow_the_fixed_launch_order():
    sites = site_names(STEP)
    assert sites[:12] == ["embed_pre", "L0 proj", "L0 qk_rope", "L0 attend", "L0 pool", "L0 w_o",
                          "L0 hc_post_pre_route", "L0 moe_up", "L0 swiglu", "L0 moe_down",
                          "L1 combine_post_pre", "L1 proj"]
    assert sites[14] == "L1 w_o"  # a layer without a pool: the output projection follows attention
    assert sites[-3:] == ["combine_post_final", "lm_head", "step_end"]


def records(steps: int, gap: float = 1.0, early: float = 0.5) -> list[dict]:
    """Kernels of `steps` identical steps, kernel i lasting i + 1 us after its predecessor's end,
    each starting `early` us before that end (programmatic dependent launch)."""
    out, end = [], 0.0
    for _ in range(steps):
        for i, name in enumerate(STEP):
            new_end = end + i + 1.0
            out.append({"name": name + "(x)", "start_us": end - early, "end_us": new_end})
            end = new_end
        end += gap
    return out


def test_per_site_reads_what_each_kernel_adds_to_the_chain():
    r = per_site(records(5))
    assert r["kernels_per_step"] == len(STEP) and r["steps_used"] == 4 and r["steps_traced"] == 5
    adds = [k["adds_us"] for k in r["kernels"]]
    assert adds[1:] == pytest.approx([i + 1.0 for i in range(1, len(STEP))])
    assert adds[0] == pytest.approx(2.0)  # 1 us of its own plus the 1 us gap after the last step
    assert all(k["early_us"] == pytest.approx(0.5) for k in r["kernels"][1:])
    assert r["step_us"] == pytest.approx(sum(i + 1.0 for i in range(len(STEP))) + 1.0)
    kinds = dict((site, us) for site, us, _ in by_site(r["kernels"]))
    assert kinds["proj"] == pytest.approx(2.0 + 12.0)  # L0 proj (2nd kernel) + L1 proj (12th)


def test_per_site_refuses_a_trace_without_step_ends():
    with pytest.raises(SystemExit, match="k_step_end"):
        per_site([{"name": "k_attend(x)", "start_us": 0.0, "end_us": 1.0}])
