"""Retrieval: the readable set, the plan (exact vs ANN), both legs, fusion, the live re-check."""
