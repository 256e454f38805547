"""Shared by the matrix tests: a two-protocol matrix file on ds4-tiny with very few requests, and
running a matrix the way `dflash-qualify matrix` does (through the kind registry)."""
from __future__ import annotations

from pathlib import Path

from dflash_qualify.harness import protocol


# a sequential protocol's budget (a fixed-N copy drops them: a few requests per arm, no looks)
SEQUENTIAL_KEYS = ("sequential", "max_rounds", "max_seconds")


def fixed_n(text: str) -> str:
    """A bundled protocol's TOML without sequential budget lines (fixed N, as the matrix sets)."""
    return "\n".join(line for line in text.splitlines()
                     if line.split("=")[0].strip() not in SEQUENTIAL_KEYS) + "\n"


def write_matrix(tmp: Path, *, name: str = "two-quick", hosts: list[str] | None = None,
                 measured: int = 2, extra: str = "") -> Path:
    """matrix.toml under tmp over two fixed-N copies of the bundled exact-bands-quick beside it:
    quick-one.toml (named exact-bands-quick) and quick-two.toml (named quick-two)."""
    tmp.mkdir(parents=True, exist_ok=True)
    quick = fixed_n((protocol.bundled_dir() / "exact-bands-quick.toml").read_text(encoding="utf-8"))
    copy = quick.replace('name = "exact-bands-quick"', 'name = "quick-two"')
    assert copy != quick
    (tmp / "quick-one.toml").write_text(quick, encoding="utf-8")
    (tmp / "quick-two.toml").write_text(copy, encoding="utf-8")
    host_line = f"hosts = {hosts!r}\n".replace("'", '"') if hosts is not None else ""
    path = tmp / "matrix.toml"
    path.write_text(
        'schema_version = 1\nkind = "matrix"\n'
        f'name = "{name}"\ndescription = "two quick protocols on ds4-tiny"\n'
        'protocols = ["quick-one.toml", "quick-two.toml"]\n'
        f'{host_line}warmups = 0\nmeasured = {measured}\n{extra}', encoding="utf-8")
    return path


def cell_layout(cell_dir: Path) -> list[str]:
    """A cell's file names, response hashes and log names folded (what every cell must hold)."""
    names = set()
    for p in cell_dir.rglob("*"):
        if p.is_file():
            rel = p.relative_to(cell_dir).as_posix()
            names.add("responses/*.bin" if rel.startswith("responses/") else rel)
    return sorted(names)


def run(matrix_path: Path, out: Path, *, executor: str = "local", on_event=None):
    """(Sealed matrix, its cell records) via harness.cli.matrix.run_matrix; with Ray already
    initialized in this process, the ray executor uses that cluster."""
    from dflash_qualify.harness.cli.matrix import run_matrix
    sealed = run_matrix(matrix_path, executor, None, out, on_event=on_event)
    return sealed, sealed.results["cells"]["cells"]
