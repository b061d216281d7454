"""Health and metrics: `GET /healthz` (public) and `GET /metrics` (a metrics credential only)."""
