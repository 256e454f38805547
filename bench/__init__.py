"""Benchmarks of the DS4-mini engine (not tests): kernels, prefill bands, decode, the llama.cpp peer.

`python -m bench` (from the repository root) runs the whole suite side by side in one process
and writes JSON and a markdown table; bench/kernels.py and bench/prefill.py also run alone.
"""
