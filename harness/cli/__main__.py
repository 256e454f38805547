"""`python -m dflash_qualify.harness.cli`: the same command line as `dflash-qualify` (for {python} in protocols)."""
from . import main

main(prog_name="dflash-qualify")
