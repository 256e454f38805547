// Start-up CPU feature detection: one cpuid pass, cached for the process lifetime.
#include "cpu_features.h"

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace dq {

namespace {
CpuFeatures detect() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512vnni = __builtin_cpu_supports("avx512vnni");
    f.amx_tile = __builtin_cpu_supports("amx-tile");
    f.amx_int8 = __builtin_cpu_supports("amx-int8");
#if defined(__linux__) && defined(__x86_64__)
    // Linux enables the AMX tile data state per process on request (ARCH_REQ_XCOMP_PERM for
    // XFEATURE_XTILEDATA, kernel 5.16+); refused or unknown: no AMX path, the others stay.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (f.amx_tile && f.amx_int8) f.amx_permitted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#endif
#endif
    return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = detect();
    return features;
}

}  // namespace dq
