"""Every public error code is defined once, in citadel/errors.py, by one class.

A client reads `error.code` (and the HTTP status) to decide what to do, so a code must mean one
thing: no two classes carry the same code, and no class outside the error tree's module carries a
code of its own (a room raises the tree's class, and may re-export it under its old import path).
The codes and statuses clients see are pinned here: moving a class must not change them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import citadel.errors as errors
from citadel.errors import CatalogUnavailable, CitadelError, PermissionsUnavailable

ROOT = Path(__file__).resolve().parents[2]
ERRORS_MODULE = ROOT / "citadel" / "errors.py"
# Where error classes may live: the core and the edges.
SOURCE_ROOTS = ("citadel", "serving", "indexing")

# What clients see: code -> HTTP status, for every class that carries a code.
PUBLIC_CODES = {
    "citadel_error": 400, "invalid_request": 422, "plan_invalid": 422, "invalid_tool_args": 422,
    "unauthenticated": 401, "forbidden": 403, "permission_denied": 403, "tool_not_allowed": 403,
    "not_found": 404, "conflict": 409, "reembed_required": 409, "payload_too_large": 413,
    "prompt_too_large": 413, "budget_exhausted": 429, "unavailable": 503, "overloaded": 503, "embedding_model_mismatch": 503,
    "permissions_unavailable": 503, "prompt_keys_unavailable": 503, "prompt_unreadable": 503,
    "state_unavailable": 503, "breaker_open": 503, "injected_fault": 503, "no_replica": 503,
    "planner_unavailable": 503, "tool_call_failed": 503, "token_service_unavailable": 503,
    "deadline_exceeded": 504, "internal_error": 500, "verification_failed": 500, "parse_error": 400,
    "input_rejected": 400, "invalid_tenant": 400, "bad_manifest": 400, "bad_metadata": 400,
    "duplicate_document": 400, "publish_conflict": 400, "generator_failed": 400, "rerank_failed": 400,
    "reader_failed": 400, "invalid_deadline": 400, "invalid_tool_spec": 422,
    "tool_call_refused": 403, "delegation_refused": 403,
}


def _error_tree() -> list[type[CitadelError]]:
    found, todo = [CitadelError], [CitadelError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def _coded_classes_in_source(path: Path) -> list[str]:
    """Classes in a file whose own body assigns `code = "..."`."""
    coded = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ClassDef) and any(
                isinstance(item, ast.Assign) and any(getattr(t, "id", None) == "code" for t in item.targets)
                and isinstance(item.value, ast.Constant) and isinstance(item.value.value, str)
                for item in node.body):
            coded.append(node.name)
    return coded


def test_no_class_outside_the_error_module_carries_a_code_of_its_own():
    outside = [f"{path.relative_to(ROOT)}:{name}"
               for folder in SOURCE_ROOTS for path in sorted((ROOT / folder).rglob("*.py"))
               if path != ERRORS_MODULE for name in _coded_classes_in_source(path)]
    assert outside == []


def test_every_class_with_a_code_is_in_citadel_errors_and_its_code_is_its_own():
    # The project's classes only: a test may define an error class of its own.
    coded = [cls for cls in _error_tree() if "code" in vars(cls) and cls.__module__.split(".")[0] in SOURCE_ROOTS]
    assert [cls.__qualname__ for cls in coded if getattr(errors, cls.__name__, None) is not cls] == []
    codes = [cls.code for cls in coded]
    assert sorted(code for code in set(codes) if codes.count(code) > 1) == []
    assert {cls.code: cls.http_status for cls in coded} == PUBLIC_CODES


def test_the_catalog_failing_is_the_permission_store_failing_to_a_client():
    error = CatalogUnavailable("the catalog is unavailable; try again shortly")
    assert isinstance(error, PermissionsUnavailable)
    assert (error.code, error.http_status) == ("permissions_unavailable", 503)
    assert "code" not in vars(CatalogUnavailable)


def test_moved_classes_still_import_from_their_rooms():
    from citadel.resilience.breaker import BreakerOpen, BreakerState
    from citadel.tools.http import InvalidToolArguments
    from citadel.tools.registry import ToolNotAllowed

    assert (ToolNotAllowed, InvalidToolArguments) == (errors.ToolNotAllowed, errors.InvalidToolArguments)
    opened = BreakerOpen("catalog", BreakerState.OPEN)
    assert (opened.code, opened.http_status, opened.breaker) == ("breaker_open", 503, "catalog")
    assert str(opened) == "catalog: circuit breaker open, call not admitted"
