"""One typed configuration root, loaded from YAML plus `CITADEL_*` environment variables.

Precedence (lowest first): field defaults, the YAML file (`CITADEL_CONFIG` or an explicit path),
then environment variables. `CITADEL_HOME` sets the data directory; any other field is reached with
`CITADEL_<SECTION>__<FIELD>` (double underscore between levels), e.g.
`CITADEL_RETRIEVAL__TOP_K=5` or `CITADEL_EMBEDDING__BACKEND=hash`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

ENV_PREFIX = "CITADEL_"
ENV_NESTING = "__"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EmbeddingConfig(_Section):
    backend: Literal["minilm", "hash"] = Field(
        "minilm", description="minilm: the offline all-MiniLM-L6-v2 package; hash: deterministic fake."
    )
    dim: int = Field(384, description="Embedding dimension (MiniLM is 384; the fake follows this).")
    batch_size: int = Field(64, description="Passages per encode() call.")
    torch_threads: int = Field(2, description="torch CPU threads for the embedder.")


class ChunkingConfig(_Section):
    max_tokens: int = Field(400, description="Target chunk size in approximate tokens.")
    overlap_tokens: int = Field(50, description="Overlap between consecutive chunks of one section.")


class IndexConfig(_Section):
    tiny_max_chunks: int = Field(20_000, description="Below this a tenant is 'tiny': exact search.")
    hot_max_chunks: int = Field(
        5_000_000, description="Up to this a tenant is 'hot' (HNSW in RAM); above it 'cold' (DiskANN)."
    )
    tier_overrides: dict[str, Literal["tiny", "hot", "cold"]] = Field(
        default_factory=dict, description="Per-tenant tier, overriding the size rule."
    )
    hnsw_m: int = Field(32, description="HNSW graph degree M.")
    hnsw_ef_construction: int = Field(200, description="HNSW efConstruction.")
    hnsw_ef_search: int = Field(64, description="HNSW efSearch for unfiltered queries.")
    hnsw_storage: Literal["fp32", "fp16"] = Field("fp32", description="Vector storage in HNSW.")
    hnsw_max_ef_search: int = Field(2048, description="Cap on efSearch raised for selective filters.")


class RetrievalConfig(_Section):
    top_k: int = Field(8, description="Passages returned by default.")
    max_top_k: int = Field(50, description="Largest top_k a caller may ask for.")
    candidates: int = Field(50, description="Candidates taken from each leg before fusion.")
    exact_max_readable: int = Field(
        20_000, description="Exact search over the readable set when it has at most this many chunks."
    )
    exact_max_fraction: float = Field(
        0.05, description="... or when it is at most this share of the partition."
    )
    rrf_k: int = Field(60, description="Reciprocal-rank fusion constant.")
    max_chunks_per_document: int = Field(2, description="Cap of chunks per document after fusion.")


class IngestConfig(_Section):
    max_file_bytes: int = Field(20 * 1024 * 1024, description="Larger files are refused (dead letter).")


class CitadelConfig(_Section):
    """The root. Every component receives the section it needs."""

    home: Path = Field(Path("./var"), description="Data directory (catalog, partitions).")
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    index: IndexConfig = Field(default_factory=IndexConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)

    @property
    def catalog_path(self) -> Path:
        return self.home / "catalog.sqlite"

    @property
    def partitions_dir(self) -> Path:
        return self.home / "partitions"


def _set_path(tree: dict[str, Any], path: list[str], value: str) -> None:
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ValueError(f"config key {'.'.join(path)} crosses a non-section value")
    node[path[-1]] = yaml.safe_load(value) if value.strip() else value


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name == "CITADEL_CONFIG":
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        if rest == "home":
            tree["home"] = value
        elif ENV_NESTING in rest:
            _set_path(tree, rest.split(ENV_NESTING), value)
    return tree


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> CitadelConfig:
    """Load the root config: defaults < YAML file < `CITADEL_*` environment variables."""
    environ = dict(os.environ if environ is None else environ)
    path = path or environ.get("CITADEL_CONFIG")
    data: dict[str, Any] = {}
    if path:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: the config file must be a mapping")
        data = loaded
    return CitadelConfig.model_validate(_deep_merge(data, _env_overrides(environ)))
