"""citadel.client installs without the server: its modules import the standard library, httpx and
each other, nothing else (the LangChain retriever also langchain_core). The import-linter contract
forbids the project's edges and frameworks by name; this checks the "nothing else"."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "citadel" / "client"
ALLOWED = {"httpx"}
ALLOWED_IN = {"langchain.py": {"langchain_core"}}


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_client_imports_only_httpx_the_standard_library_and_itself():
    modules = sorted(CLIENT.glob("*.py"))
    assert {p.name for p in modules} >= {"__init__.py", "clients.py", "langchain.py"}
    for path in modules:
        allowed = ALLOWED | ALLOWED_IN.get(path.name, set())
        foreign = {name for name in imported(path)
                   if name.split(".")[0] not in sys.stdlib_module_names | allowed
                   and not (name == "citadel.client" or name.startswith("citadel.client."))}
        assert not foreign, f"{path.name} imports {sorted(foreign)}"
