"""The walls of DESIGN.md that import-linter cannot see (its contracts are in pyproject.toml,
run by ``lint-imports`` in CI): heavy imports at ``import dpalign``, printing outside the
CLI, and branches on a backend's name outside the engine and the work queues."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dpalign"
HEAVY = ("skbio", "scipy", "matplotlib", "dask", "distributed", "pyopencl", "numba")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE.parent).with_suffix("").as_posix().replace("/", "."), path


def test_import_dpalign_loads_no_heavy_module():
    code = f"import sys, dpalign\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"import dpalign loads {out}"


@pytest.mark.parametrize(("module", "path"), list(_modules()), ids=lambda x: str(x))
def test_only_the_cli_prints(module, path):
    if module == "dpalign.cli":
        return
    tree = ast.parse(path.read_text())
    calls = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
    ]
    assert not calls, f"{module} prints (lines {calls}); the library logs and raises"


def _backend_names() -> set[str]:
    from dpalign.engine import backend_names

    return set(backend_names())


def _name_branches(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines comparing something with a backend's name (``x == "opencl"``, ``in ("numba",)``)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                found.append(node.lineno)
    return sorted(set(found))


@pytest.mark.parametrize(("module", "path"), list(_modules()), ids=lambda x: str(x))
def test_no_branch_on_a_backend_name_outside_the_engine(module, path):
    if module == "dpalign.engine" or module.startswith("dpalign.hybrid"):
        return
    lines = _name_branches(ast.parse(path.read_text()), _backend_names())
    assert not lines, f"{module} branches on a backend's name (lines {lines})"


def test_the_name_branch_check_can_fail():
    tree = ast.parse('if backend.name == "opencl" or b in ("numba", "x"):\n    pass\n')
    assert _name_branches(tree, {"opencl", "numba"}) == [1]
