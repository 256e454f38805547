"""The `matrix` evidence kind: protocols x hosts, each cell one whole protocol sealed where it ran.

Modules: protocol (the matrix TOML), cell (one cell on its node), executors (local, ray),
driver (plan, run, verify and store cells, seal), summary (the table rows, pure), report
(markdown), verify (matrix verification). docs/matrix.md explains the Ray setup.
"""
from __future__ import annotations

KIND = "matrix"
