"""`python -m bench`: run the benchmark suite and write results.json + results.md."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import markdown, suite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results", help="output folder (git-ignored by default)")
    ap.add_argument("--quick", action="store_true", help="small matrices and prompts (smoke run, not figures)")
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts for end-to-end runs")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats per prefill mode")
    ap.add_argument("--prompts", default="128,512", help="comma list of prompt lengths for end-to-end prefill")
    ap.add_argument("--sections", default=",".join(suite.SECTIONS),
                    help=f"comma list of {', '.join(suite.SECTIONS)}")
    args = ap.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    json_path, md_path = out_dir / f"bench-{stamp}.json", out_dir / f"bench-{stamp}.md"

    def save(result: dict) -> None:  # rewritten after every section: a crash loses nothing done
        json_path.write_text(json.dumps(result, indent=2))
        md_path.write_text(markdown.render(result))

    cfg = suite.SuiteConfig(threads=[int(t) for t in args.threads.split(",")], repeats=args.repeats,
                            quick=args.quick, sections=args.sections.split(","),
                            prompts=tuple(int(n) for n in args.prompts.split(",")))
    result = suite.run(cfg, on_section=save)
    save(result)
    print()
    print(markdown.render(result))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
