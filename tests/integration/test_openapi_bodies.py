"""The OpenAPI document describes every body the API returns: each 2xx JSON response of each operation
has a schema with named properties (or a list of such), never an empty or free-form object; and every
route is defined at module level on its family's router, with a response model (or, for the metrics
text and the reviewer's HTML page, a response class of its own)."""

from __future__ import annotations

import pytest
from fastapi.responses import Response
from fastapi.routing import APIRoute

from serving.http.api import create_api
from serving.http.routers import ROUTERS

SPEC = create_api().openapi()
OPERATIONS = [(method.upper(), path, operation) for path, methods in SPEC["paths"].items()
              for method, operation in methods.items()]


def resolve(schema: dict) -> dict:
    while "$ref" in schema:
        schema = SPEC["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def described(schema: dict) -> bool:
    """An object schema that names its properties, or an array of such."""
    schema = resolve(schema)
    if schema.get("type") == "array":
        return described(schema.get("items", {}))
    return schema.get("type") == "object" and bool(schema.get("properties"))


def test_the_document_lists_every_family():
    paths = set(SPEC["paths"])
    assert {"/healthz", "/v1/retrieve", "/v1/answer", "/v1/runs/{run_id}/events", "/v1/approvals",
            "/v1/admin/tenants/{tenant_id}/documents", "/v1/admin/candidates", "/v1/admin/faults"} <= paths
    assert not any(path.startswith("/review") for path in paths)  # a page, not the API
    assert len(OPERATIONS) >= 28


@pytest.mark.parametrize("method, path, operation", OPERATIONS, ids=[f"{m} {p}" for m, p, _ in OPERATIONS])
def test_every_2xx_json_body_has_a_schema_with_properties(method, path, operation):
    successes = {code: response for code, response in operation["responses"].items() if code.startswith("2")}
    assert successes, f"{method} {path} documents no success"
    for code, response in successes.items():
        content = response.get("content", {})
        assert content, f"{method} {path} {code} documents no body"
        if "application/json" in content:
            schema = content["application/json"].get("schema", {})
            assert described(schema), f"{method} {path} {code}: {schema} does not describe the body"


def test_every_route_is_module_level_with_a_response_model():
    routes = [route for router in ROUTERS for route in router.routes]
    assert routes
    for route in routes:
        assert isinstance(route, APIRoute)
        assert "<locals>" not in route.endpoint.__qualname__, f"{route.path} is defined inside a function"
        page_or_text = not route.include_in_schema or route.path == "/metrics"
        assert route.response_model is not None or page_or_text or _file_download(route), \
            f"{route.path} has no response model"


def _file_download(route: APIRoute) -> bool:
    """A route that returns a file's bytes (a raw document): a plain Response, its media types documented."""
    return route.response_class is Response and bool(route.responses.get(200, {}).get("content"))
