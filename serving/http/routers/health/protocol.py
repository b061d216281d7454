"""The health family's response bodies."""

from __future__ import annotations

from pydantic import Field

from serving.http.protocol import ResponseBody


class Health(ResponseBody):
    status: str = Field(..., description="`ok` once the gateway's services are up (503 `overloaded` before).")
    topology: str = Field(..., description="`fused` or `split` (serving.topology).")


METRICS_RESPONSE = {200: {"description": "Prometheus text exposition.",
                          "content": {"text/plain": {"schema": {"type": "string"}}}}}
