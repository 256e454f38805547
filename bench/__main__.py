"""`python -m bench`: the engine suite (same as `python -m bench.engine`)."""
from .engine.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())
