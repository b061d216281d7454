"""`POST /v1/retrieve` and `POST /v1/answer`: the caller's identity first (verified by the admission
middleware before the body was read), then the query service on the worker threads."""

from __future__ import annotations

from typing import Union

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from citadel.reviews.tasks import REVIEW_PENDING
from serving.http.deps import AsCaller, Ids, ServicesDep
from serving.http.protocol import ERRORS
from serving.http.routers.query.protocol import (AnswerRequest, AnswerResponse, RetrieveRequest, RetrieveResponse,
                                                 ReviewPendingBody)

router = APIRouter(responses=ERRORS)


@router.post("/v1/retrieve")
async def retrieve(body: RetrieveRequest, services: ServicesDep, work: AsCaller, ids: Ids) -> RetrieveResponse:
    result = await work("retrieve", services.query.retrieve, body.query, body.top_k, ids.request_id,
                        ids.correlation_id)
    return RetrieveResponse.model_validate(result)


@router.post("/v1/answer", response_model=AnswerResponse, responses={202: {"model": ReviewPendingBody}})
async def answer(body: AnswerRequest, services: ServicesDep, work: AsCaller,
                 ids: Ids) -> Union[AnswerResponse, JSONResponse]:
    """A cited answer or a refusal; `202 review_pending` when a failed check holds the answer for a
    person (citadel/reviews/tasks.py): ask again once it is reviewed."""
    result = await work("answer", services.query.answer, body.question, ids.request_id, ids.correlation_id)
    if result.get("status") == REVIEW_PENDING:
        return JSONResponse(ReviewPendingBody(**result).model_dump(), status_code=202)
    return AnswerResponse.model_validate(result)
