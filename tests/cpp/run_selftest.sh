#!/bin/sh
# Builds the kernel self-test with AddressSanitizer + UBSan (no Python, no model) and runs it.
set -e
cd "$(dirname "$0")/../.."
OUT=${OUT_DIR:-/tmp/dq_selftest}
mkdir -p "$OUT"
CF="-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -ffp-contract=off -Wall -Wextra -Wno-unused-parameter -Icsrc"
SRC="csrc/q8_0.cpp csrc/kernels_ref.cpp csrc/kernels_dispatch.cpp csrc/cpu_features.cpp csrc/threadpool.cpp"
OBJS=""
for f in csrc/simd/*_avx2.cpp; do  # every ISA file, with the flags CMakeLists.txt gives it
  o="$OUT/$(basename "$f" .cpp).o"; g++ $CF -c "$f" -mavx2 -mfma -mf16c -o "$o"; OBJS="$OBJS $o"
done
for f in csrc/simd/*_avx512.cpp; do
  o="$OUT/$(basename "$f" .cpp).o"
  g++ $CF -c "$f" -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni -o "$o"; OBJS="$OBJS $o"
done
for f in csrc/simd/*_amx.cpp; do
  o="$OUT/$(basename "$f" .cpp).o"
  g++ $CF -c "$f" -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mamx-tile -mamx-int8 -o "$o"; OBJS="$OBJS $o"
done
g++ $CF $SRC tests/cpp/kernels_selftest.cpp $OBJS -lpthread -o "$OUT/kernels_selftest"
"$OUT/kernels_selftest"
