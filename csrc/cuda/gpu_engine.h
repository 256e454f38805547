// The CUDA backend of DS4-mini (Engine(device="cuda")): weights resident on the GPU and a
// session whose state stays there. CUDA-free header (pimpl) so bindings.cpp builds with g++.
// The forward mirrors model_forward.cpp op by op; see docs/gpu.md for the exactness rules.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model_config.h"
#include "model_forward.h"
#include "model_session.h"

namespace dq { namespace gpu {

// "" when a CUDA device is usable, else why not (no device, no driver, ...).
std::string unavailable_reason();

struct GpuModelImpl;
struct GpuSessionImpl;

// What a prefill's steps cost the host (benches report them per step): kernels run on the GPU,
// host launch calls (a replayed graph is one), and host synchronizations inside steps (the MoE
// table read back by launched steps; graphed steps have none).
struct GpuPrefillCounts {
    long long steps = 0, graph_steps = 0, kernels = 0, host_launches = 0, host_syncs = 0;
    std::map<std::string, double> op_us;  // DQ_GPU_OP_TIMING=1: GPU time per launch site (us)
};

class GpuModel {
public:
    // Builds the weights on the CPU (threads), converts them to SoA Q8_0 and uploads them once.
    GpuModel(const ModelConfig& cfg, int threads);
    ~GpuModel();
    GpuModel(const GpuModel&) = delete;
    GpuModel& operator=(const GpuModel&) = delete;

    const ModelConfig& config() const;
    double build_seconds() const;   // CPU weight generation
    double upload_seconds() const;  // SoA conversion + host-to-device copies
    size_t weight_bytes_total() const;  // Q8_0 bytes (34 per 32 weights), same as the CPU count
    std::string device_name() const;
    GpuPrefillCounts last_prefill_counts() const;  // of the latest prefill of any session
    GpuModelImpl& impl() const { return *impl_; }

private:
    std::unique_ptr<GpuModelImpl> impl_;
};

class GpuSession {
public:
    explicit GpuSession(const GpuModel& m);
    ~GpuSession();
    GpuSession(const GpuSession&) = delete;
    GpuSession& operator=(const GpuSession&) = delete;

    int pos() const;
    const GpuModel& model() const { return m_; }
    // Same contract as Session::prefill; ns is host steady_clock around the steps, ended by a
    // device synchronize. op_ns stays zero (per-op timing would need a sync per op).
    PrefillOutcome prefill(const int32_t* tokens, int n, const PrefillOptions& opt, float* logits,
                           int32_t* rid, float* rw);
    DecodeOutcome decode(int max_tokens);
    int32_t decode_step(StepStats& stats);
    // Host copy of the device state (for snapshot, state dumps) and back.
    State download_state() const;
    void upload_state(const State& st);

private:
    const GpuModel& m_;
    std::unique_ptr<GpuSessionImpl> impl_;
};

}}  // namespace dq::gpu
