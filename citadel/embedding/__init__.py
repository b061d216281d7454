"""Embedders: the real offline MiniLM model and a deterministic fake for tests."""
