"""`CitadelRetriever`: a LangChain retriever over citadel.client (the `citadel[langchain]` extra).

Each passage the user may read becomes a LangChain `Document`: its text as `page_content`, its chunk id
as `id`, and its citation as `metadata` (document_id, version, title, heading, page, chunk_id, url,
score, source, and the catalog's governance when set). Scope is the client's: its service token and
the user context it carries (one retriever per signed-in user, or a signer callable that knows who).

    retriever = CitadelRetriever(client=Citadel(url, token=TOKEN, user_context=signer), k=4)
    docs = retriever.invoke("What is the hotel limit per night?")      # or invoke(query, k=8)
"""

from __future__ import annotations

from typing import Any, Optional

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor

from citadel.client.clients import AsyncCitadel, Citadel
from citadel.client.models import Passage

METADATA_KEYS = ("document_id", "version", "title", "heading", "page", "chunk_id", "url", "score", "source")
GOVERNANCE_KEYS = ("policy_id", "policy_revision", "sensitivity", "retention_class")
# The API returns at most this many passages a request (serving/http/routers/query/protocol.py MAX_TOP_K).
MAX_K = 50


class CitadelRetriever(BaseRetriever):
    """Passages with citations from Citadel's `POST /v1/retrieve`, for the client's user.

    `k` passages at most (the API's top_k, 1 to 50), also per call: `invoke(query, k=3)`. `async_client`
    serves `ainvoke` without a thread; without it, `ainvoke` runs the sync client in an executor."""

    client: Citadel
    async_client: Optional[AsyncCitadel] = None
    k: int = 4

    model_config = {"arbitrary_types_allowed": True}

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: Optional[int] = None, **_: Any) -> list[Document]:
        return documents(self.client.retrieve(query, top_k=self._top_k(k)).passages)

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: Optional[int] = None, **_: Any) -> list[Document]:
        if self.async_client is None:
            return await run_in_executor(None, self._get_relevant_documents, query,
                                         run_manager=run_manager.get_sync(), k=k)
        return documents((await self.async_client.retrieve(query, top_k=self._top_k(k))).passages)

    def _top_k(self, k: Optional[int]) -> int:
        top_k = self.k if k is None else k
        if not 1 <= top_k <= MAX_K:
            raise ValueError(f"k is 1 to {MAX_K}, not {top_k}")
        return top_k


def documents(passages: list[Passage]) -> list[Document]:
    return [Document(page_content=p.text, id=p.chunk_id, metadata=metadata(p)) for p in passages]


def metadata(passage: Passage) -> dict[str, Any]:
    found = {key: getattr(passage, key) for key in METADATA_KEYS}
    found.update({key: getattr(passage, key) for key in GOVERNANCE_KEYS if getattr(passage, key) is not None})
    return found
