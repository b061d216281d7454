"""Evaluation harnesses: BEIR-style retrieval metrics and the labeled RAG regression set."""
