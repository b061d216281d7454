"""Rerankers: none, a local cross-encoder, or the packaged small LM as a yes/no judge."""

from citadel.rerank.backends import CrossEncoderReranker, LLMJudgeReranker, NoRerank, make_reranker
from citadel.rerank.base import Reranker, RerankError

__all__ = ["CrossEncoderReranker", "LLMJudgeReranker", "NoRerank", "Reranker", "RerankError", "make_reranker"]
