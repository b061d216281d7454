"""tests/unit is fast and Ray-free (DESIGN.md §2). import-linter checks its imports (pyproject.toml);
this checks what it cannot see: a test that asks for Ray at run time (`pytest.importorskip("ray")`
or the `ray` marker) and would start it through some command, which belongs in tests/ray."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent


def _asks_for_ray(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip":
            if any(isinstance(arg, ast.Constant) and arg.value == "ray" for arg in node.args):
                return True
        if isinstance(node, ast.Attribute) and node.attr == "ray" and getattr(node.value, "attr", "") == "mark":
            return True
    return False


def test_no_unit_test_asks_for_ray():
    offenders = sorted(str(path.relative_to(UNIT)) for path in UNIT.rglob("*.py") if _asks_for_ray(path))
    assert not offenders, f"move these to tests/ray: {offenders}"
