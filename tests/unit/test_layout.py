"""The test tree follows DESIGN.md §2: tests/unit is fast and Ray-free (anything that needs Ray, even
only its Serve glue, lives in tests/ray), so `pytest tests/unit` runs on a machine without Ray."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent
# Modules that import Ray when imported (or are Ray's own).
RAY_MODULES = ("ray", "serving.ray", "indexing.pipeline")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip":
            names += [arg.value for arg in node.args if isinstance(arg, ast.Constant)]
    return names


def test_no_unit_test_imports_ray():
    offenders = {
        str(path.relative_to(UNIT)): name
        for path in UNIT.rglob("*.py")
        for name in _imports(path)
        if any(name == ray or name.startswith(ray + ".") for ray in RAY_MODULES)
    }
    assert not offenders, f"move these to tests/ray: {offenders}"
