"""citadel.client: a typed Python client of Citadel's HTTP API (docs/client.md), sync (`Citadel`) and
asyncio (`AsyncCitadel`), over httpx. It speaks HTTP only: it imports httpx and the standard library,
nothing else of the project (an import-linter contract keeps it so), so an app installs it without the
server's dependencies. The LangChain retriever over it is citadel/client/langchain.py (the
`citadel[langchain]` extra).

    models.py     what the routes return, as dataclasses
    errors.py     the error tree, chosen by the JSON error's code and HTTP status
    routes.py     every public route as a Call, written once for both clients
    transport.py  credentials, when a request may be sent again, the run event stream's reader
    clients.py    Citadel and AsyncCitadel
"""

from citadel.client.clients import AsyncCitadel, Citadel
from citadel.client.errors import (ApiError, BadRequest, BudgetExhausted, CitadelClientError, Conflict,
                                   ConnectionFailed, DeadlineExceeded, Forbidden, InvalidRequest, NotFound,
                                   Overloaded, PayloadTooLarge, RequestTimeout, ServerError, StreamInterrupted,
                                   TransportError, Unauthenticated, Unavailable)
from citadel.client.models import (AclSet, Answer, Approval, Citation, Conversation, Job, JobStarted, Passage,
                                   RetrieveResult, ReviewPending, RunEvent, RunStarted, RunState, Section)
from citadel.client.transport import Retries, UserContext

__all__ = [
    "AsyncCitadel", "Citadel", "Retries", "UserContext",
    "ApiError", "BadRequest", "BudgetExhausted", "CitadelClientError", "Conflict", "ConnectionFailed",
    "DeadlineExceeded", "Forbidden", "InvalidRequest", "NotFound", "Overloaded", "PayloadTooLarge", "RequestTimeout",
    "ServerError", "StreamInterrupted", "TransportError", "Unauthenticated", "Unavailable",
    "AclSet", "Answer", "Approval", "Citation", "Conversation", "Job", "JobStarted", "Passage", "RetrieveResult",
    "ReviewPending", "RunEvent", "RunStarted", "RunState", "Section",
]
