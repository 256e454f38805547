#!/usr/bin/env python3
"""A stand-in for an engine binary, for the adapter example: prompt on stdin, text on stdout.

It prints its generated text on stdout and, on stderr, timing lines in the shape llama.cpp's
command-line tools print at exit:

    llama_perf_context_print: prompt eval time =      12.80 ms /    64 tokens (...)
    llama_perf_context_print:        eval time =       4.00 ms /     8 runs   (...)

The text is a deterministic function of the prompt (so every build and every run answers the
same bytes). The times are simulated, not measured: 0.2 ms per prompt token (env
FAKE_ENGINE_PREFILL_MS), divided by --batch (a "faster build"), with +-1% noise; 0.5 ms per
generated token. Usage: fake_engine.py [-n N_PREDICT] [--batch B] < prompt.txt
"""
import argparse
import os
import random
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--n-predict", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1, help="prefill tokens per step (faster)")
    args = ap.parse_args()
    prompt = sys.stdin.buffer.read()
    if not prompt:
        print("error: empty prompt", file=sys.stderr)
        return 1
    seed = sum(prompt) * 31 + len(prompt)
    text = bytes(ord("a") + (seed + 7 * i * i) % 26 for i in range(args.n_predict))
    sys.stdout.buffer.write(text)
    sys.stdout.flush()
    per_token = float(os.environ.get("FAKE_ENGINE_PREFILL_MS", "0.2"))
    prompt_ms = len(prompt) * per_token / max(args.batch, 1) * random.uniform(0.99, 1.01)
    eval_ms = 0.5 * args.n_predict
    print(f"llama_perf_context_print: prompt eval time = {prompt_ms:10.2f} ms / "
          f"{len(prompt):5d} tokens", file=sys.stderr)
    print(f"llama_perf_context_print:        eval time = {eval_ms:10.2f} ms / "
          f"{args.n_predict:5d} runs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
