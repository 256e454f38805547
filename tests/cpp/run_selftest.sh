#!/bin/sh
# Builds the kernel self-test with AddressSanitizer + UBSan (no Python, no model) and runs it.
set -e
cd "$(dirname "$0")/../.."
OUT=${OUT_DIR:-/tmp/dq_selftest}
mkdir -p "$OUT"
CF="-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -ffp-contract=off -Wall -Wextra -Wno-unused-parameter -Icsrc"
SRC="csrc/q8_0.cpp csrc/kernels_ref.cpp csrc/kernels_dispatch.cpp csrc/cpu_features.cpp csrc/threadpool.cpp"
g++ $CF -c csrc/simd/q8_0_avx2.cpp -mavx2 -mfma -mf16c -o "$OUT/avx2.o"
g++ $CF -c csrc/simd/mmvq_avx512.cpp -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni -o "$OUT/avx512.o"
g++ $CF $SRC tests/cpp/kernels_selftest.cpp "$OUT/avx2.o" "$OUT/avx512.o" -lpthread -o "$OUT/kernels_selftest"
"$OUT/kernels_selftest"
