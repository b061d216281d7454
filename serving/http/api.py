"""The HTTP API (DESIGN.md §9): the app factory. The routes are the endpoint families' routers
(serving/http/routers/), given their services through serving/http/deps.py; every error has one JSON
shape (serving/http/errors.py); admission (request ids, authentication, body limits) runs before any
route reads a body (serving/http/admission.py).

The app is served either by Ray Serve (serving/ray/app.py builds it in each gateway replica, with that
replica's services) or by any ASGI server / TestClient.
"""

from __future__ import annotations

import concurrent.futures

from fastapi import FastAPI

from serving.http.admission import Admission
from serving.http.deps import services_of_scope
from serving.http.errors import add_error_handlers
from serving.http.mcp import mount_mcp
from serving.http.routers import ROUTERS
from serving.http.routers.review.session import SessionKeys
from serving.services.compose import Services

API_VERSION = "1"


def create_api(services: Services | None = None) -> FastAPI:
    """The app; with `services`, installed with a worker pool of `serving.gateway_threads` (without,
    the caller sets `app.state.services` and `app.state.executor` before the first request)."""
    app = FastAPI(title="Citadel", version=API_VERSION,
                  description="Multi-tenant, ACL-safe retrieval and cited answers. Every error is "
                              '`{"error": {"code", "message", "request_id"}}`.')
    app.state.review_keys = SessionKeys()
    if services is not None:
        install(app, services)
    # Request ids, authentication and body limits, all before any route reads the body.
    app.add_middleware(Admission, services_of=services_of_scope)
    add_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    mount_mcp(app)  # the MCP server at /mcp (serving/http/mcp.py): the same services, its own authentication
    return app


def install(app: FastAPI, services: Services) -> None:
    """Make `services` the app's, with a worker pool sized in config."""
    app.state.services = services
    app.state.executor = concurrent.futures.ThreadPoolExecutor(services.config.serving.gateway_threads,
                                                               thread_name_prefix="gateway")
