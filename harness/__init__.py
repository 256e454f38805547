"""dflash-qualify harness: protocols, targets, runner, stats, evidence, reports, CLI."""
