"""Rerankers: none, a local cross-encoder, the packaged small LM as a yes/no judge, or the reader
(reader.py: the project's reader rescoring the fused candidates)."""

from citadel.rerank.backends import CrossEncoderReranker, LLMJudgeReranker, NoRerank, make_reranker
from citadel.rerank.base import Reranker, RerankError

__all__ = ["CrossEncoderReranker", "LLMJudgeReranker", "NoRerank", "Reranker", "RerankError", "make_reranker"]
