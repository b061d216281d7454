"""Citadel core: types, config, catalog, parsing, chunking, index adapters, retrieval.

Pure Python + numpy/pyarrow/pydantic. Never imports ray, fastapi, locust, or the
indexing/serving/capacity packages (DESIGN.md §2). `citadel.cli` is the composition root.
"""

__version__ = "0.1.0"
