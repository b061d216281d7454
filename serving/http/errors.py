"""One JSON error shape for every failure the API returns (DESIGN.md §9).

    {"error": {"code": "<machine-readable>", "message": "<for people>", "request_id": "<id>"}}

`code` is stable; clients branch on it. The status comes from the error's class in the error tree
(citadel/errors.py), so a new error needs no row here. Unknown failures are 500 `internal_error`
and never leak a traceback.
"""

from __future__ import annotations


def error_body(code: str, message: str, request_id: str) -> dict:
    return {"error": {"code": code, "message": message, "request_id": request_id}}
