"""Engine suite: kernels, prefill bands, decode (CPU); `python -m bench.engine` runs it all."""
