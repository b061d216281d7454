"""`GET /healthz` and `GET /metrics` (the metrics credential: serving/http/metrics.py)."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Header
from fastapi.responses import Response

from serving.http.deps import ServicesDep
from serving.http.metrics import require_metrics_credential
from serving.http.protocol import ERRORS
from serving.http.routers.health.protocol import METRICS_RESPONSE, Health

router = APIRouter()


@router.get("/healthz")
async def healthz(services: ServicesDep) -> Health:
    return Health(status="ok", topology=services.config.serving.topology)


@router.get("/metrics", response_class=Response, responses={**ERRORS, **METRICS_RESPONSE})
async def metrics(services: ServicesDep, authorization: Optional[str] = Header(None)) -> Response:
    """Prometheus metrics, for a metrics credential only (`serving.metrics_tokens_sha256`)."""
    require_metrics_credential(authorization, services.config.serving.metrics_tokens_sha256)
    return Response(services.metrics.render(), media_type=services.metrics.content_type)
