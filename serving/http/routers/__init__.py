"""The HTTP API's endpoint families, one folder each (its routes and its protocol models):

    health     GET /healthz, GET /metrics
    query      POST /v1/retrieve, POST /v1/answer
    runs       conversations, messages, runs and their events, feedback, DELETE /v1/me/data
    approvals  GET /v1/approvals, POST /v1/approvals/{id}:decide
    admin      documents, jobs, kept prompts, the pause switch, candidate test items
    documents  GET /v1/documents/{document}/versions/{version}/sections/{chunk_id} (what a citation
               opens), GET /v1/policies/{id}, GET /v1/documents/{document}/versions/{version}/raw (raw.py)
    drills     /v1/admin/faults
    review     the reviewer page at /review (HTML, not in the OpenAPI document)
    openai     POST /v1/chat/completions, GET /v1/models (OpenAI-compatible; errors in OpenAI's shape)

Routes are defined at module level on each family's `APIRouter` and take what they need through
serving/http/deps.py; `ROUTERS` is what create_api includes, in this order.
"""

from __future__ import annotations

from serving.http.routers.admin import candidates as admin_candidates
from serving.http.routers.admin import routes as admin
from serving.http.routers.approvals import routes as approvals
from serving.http.routers.documents import raw as document_raw
from serving.http.routers.documents import routes as documents
from serving.http.routers.drills import routes as drills
from serving.http.routers.health import routes as health
from serving.http.routers.openai import routes as openai_chat
from serving.http.routers.query import routes as query
from serving.http.routers.review import routes as review
from serving.http.routers.runs import routes as runs

# The question routes first: a request's route is found by trying each in turn (here and in admission).
ROUTERS = (health.router, query.router, openai_chat.router, runs.router, approvals.router, admin.router,
           admin_candidates.router, drills.router, review.router, documents.router, document_raw.router)
