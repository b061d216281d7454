"""No import circle inside citadel/ or serving/: every module's imports, lazy ones inside functions
included, form a graph without cycles. import-linter's layers contracts (pyproject.toml) order the
core's rooms and serving's layers; this checks what they leave open: two modules of one room, or of
rooms one layer shares, importing each other (a contract module and its backend, say)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import grimp

PACKAGES = ("citadel", "serving")


def import_cycles(imports: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative, so a
    deep chain of imports cannot exhaust Python's recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports.get(target, ())))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_the_cycle_finder_finds_a_circle_and_nothing_else():
    imports = {"a.x": ["a.y"], "a.y": ["a.z"], "a.z": ["a.x", "b.w"], "b.w": [], "b.v": ["b.w"]}
    assert import_cycles(imports) == [["a.x", "a.y", "a.z"]]
    assert import_cycles({"a.x": ["a.y"], "a.y": []}) == []


def test_no_import_circle_inside_citadel_or_serving():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    imports = {module: [i for i in graph.find_modules_directly_imported_by(module) if i.split(".")[0] in PACKAGES]
               for module in graph.modules}
    assert import_cycles(imports) == [], "modules that import each other, directly or around a circle"
