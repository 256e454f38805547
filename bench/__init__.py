"""Benchmarks (never tests), by subject; bench/README.md lists each one, what it prints and its target.

  engine/   the DS4-mini CPU suite: kernels, prefill bands, decode (`python -m bench`)
  gpu/      the CUDA kernel bench and device prefill
  harness/  measurements of the harness itself: calibration power and truth, overhead, soak
  peers/    peer engines (llama.cpp) measured side by side with ours
"""
