"""Declared layers and import hygiene (acceptance 3 of issue 21): the import-linter contracts in
pyproject.toml pass; no import cycle among harness/ and engine/ modules, function-level (lazy)
and TYPE_CHECKING imports included; no module imports another module's `_private` name."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"harness": "dflash_qualify.harness", "engine": "dflash_qualify.engine"}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of harness/ and engine/."""
    out = {}
    for folder, dotted in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([dotted, *parts])] = path
    return out


MODULES = _modules()
EXTENSIONS = {"_core"}  # compiled modules (pybind11), not .py files


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str, path: Path) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) of every import statement, at any depth."""
    out = []
    package = _package_of(name, path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out += [(mod, a.name, node.lineno) for a in node.names]
    return out


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for mod, item, _ in _imports(name, path):
            # `from . import x` names module x when there is one (`_core`: the compiled extension)
            sub = item and (f"{mod}.{item}" in MODULES or item in EXTENSIONS)
            target = f"{mod}.{item}" if sub else mod
            if target in MODULES and target != name:
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan 1972)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_import_linter_contracts_pass():
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("import-linter is not installed (pip install '.[test]')")
    done = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "broken" in done.stdout and " 0 broken" in done.stdout


def test_no_import_cycles_lazy_imports_included():
    graph = _edges()
    assert sum(len(v) for v in graph.values()) > 100  # the walk found the imports
    # a package's __init__ importing its own submodules, and a submodule importing its package,
    # is a cycle too: Python runs the package first either way
    assert _cycles(graph) == []


def test_the_cycle_check_sees_function_level_imports(tmp_path):
    graph = {"a": {"b"}, "b": set()}
    assert _cycles(graph) == []
    graph["b"].add("a")
    assert _cycles(graph) == [["a", "b"]]
    lazy = tmp_path / "m.py"
    lazy.write_text("def f():\n    from . import other\n")
    assert _imports("pkg.m", lazy) == [("pkg", "other", 2)]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_module_imports_another_modules_private_names():
    problems = []
    for name, path in MODULES.items():
        package = _package_of(name, path)
        bound: set[str] = set()   # local names bound to our own modules
        for mod, item, line in _imports(name, path):
            full = f"{mod}.{item}" if item else mod
            if item and _is_private(item):
                # a private module may be imported inside its own package (engine/_core)
                own_module = mod == package and (f"{mod}.{item}" in MODULES or item in EXTENSIONS)
                if not own_module:
                    problems.append(f"{path.relative_to(ROOT)}:{line}: imports {mod}.{item}")
            if full in MODULES:
                bound.add(item or mod.rpartition(".")[2])
        tree = ast.parse(path.read_text(), str(path))
        aliases = {a.asname: a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                   for a in n.names if a.asname}
        bound |= {alias for alias, real in aliases.items() if real in bound}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in bound and _is_private(node.attr) and node.attr not in EXTENSIONS:
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: uses "
                                f"{node.value.id}.{node.attr}")
    assert problems == []
