"""The requests the drills send: retrieval queries and the one question whose answer always reaches
the generator."""

from __future__ import annotations

RETRIEVE_PATH = "/v1/retrieve"
ANSWER_PATH = "/v1/answer"
RETRIEVE_QUERIES = ["hotel limit per night", "home office equipment", "standard discount", "expense approval",
                    "remote work days", "meal per diem", "lost laptop", "travel booking"]
RETRIEVE_TOP_K = 8
ANSWER_QUESTION = "What is the hotel limit per night in London?"
ANSWER_TENANT = "acme"  # whose documents answer ANSWER_QUESTION (every request reaches the generator)


def retrieve_body(turn: int) -> dict:
    return {"query": RETRIEVE_QUERIES[turn % len(RETRIEVE_QUERIES)], "top_k": RETRIEVE_TOP_K}


def answer_body(_turn: int) -> dict:
    return {"question": ANSWER_QUESTION}
