"""GPU benchmarks: the CUDA kernel bench (built by CMake), prefill on the device, cuBLAS reference."""
