// Start-up CPU feature detection (cpuid via __builtin_cpu_supports, which also checks OS support;
// AMX also needs the kernel's per-process permission, asked for once here).
#pragma once

namespace dq {

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512vnni = false;
    bool amx_tile = false;   // cpuid AMX-TILE
    bool amx_int8 = false;   // cpuid AMX-INT8
    bool amx_permitted = false;  // the kernel granted this process the tile data state (arch_prctl)

    // Whole ISA levels the kernel table needs.
    bool avx2_path() const { return avx2 && fma && f16c; }
    bool avx512vnni_path() const {
        return avx2_path() && avx512f && avx512bw && avx512vl && avx512vnni;
    }
    bool amx_path() const { return avx512vnni_path() && amx_tile && amx_int8 && amx_permitted; }
};

// Detected once (thread-safe static), then cached.
const CpuFeatures& cpu_features();

}  // namespace dq
