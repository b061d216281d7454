"""What goes into a config bundle: each section that shapes an answer, as plain JSON values.

Files are named by checksum (citadel/quality/checksums.py), never by path. Left out on purpose,
because they do not change what an answer says: where things live (home, URLs of servers, the
environment variables holding keys), secrets and credentials, ports and hosts, infrastructure
timeouts, thread and batch sizes, caches, and retention of logs. Sections take whole config
sections minus such fields, rather than a list of fields to keep, so a new setting that shapes
answers is in the bundle from the day it is added.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from citadel.config import AgentConfig, AnswerConfig, CitadelConfig, EmbeddingConfig, IndexConfig
from citadel.quality.checksums import MISSING, file_sha256, tree_sha256, value_sha256

# answer.* fields that are not answer-shaping settings: paths (the models section names their
# content by checksum), the model choices (in the models section, with their checksums), where a
# server is and how long to wait for it, performance knobs, logs and their retention.
ANSWER_LEFT_OUT = frozenset({
    "reader_artefact", "gate_model", "cross_encoder_dir",
    "reranker", "reader", "reader_runtime", "generator", "secondary_generator", "openai_model",
    "openai_base_url", "openai_api_key_env", "openai_timeout_s", "rerank_timeout_s",
    "reader_threads", "rerank_batch_size", "screen_cache_chunks",
    "answer_log_retention_days", "answer_log_purge_interval_s", "prompt_retention_days", "prompt_key_env",
    "mask_known_users",
})
# agent.* fields about where the planner's server is, leases, retention and request limits.
AGENT_LEFT_OUT = frozenset({
    "openai_base_url", "openai_api_key_env", "openai_timeout_s", "lease_ttl_s", "retention_days",
    "deadline_s", "max_message_chars",
})
# index.* fields that decide how a search runs (exact or HNSW, and how wide), not how segments are built.
INDEX_SEARCH_FIELDS = ("tiny_max_chunks", "hot_max_chunks", "tier_overrides", "hnsw_ef_search",
                       "hnsw_max_ef_search")


def sections(config: CitadelConfig) -> dict[str, Any]:
    """Every section of the bundle, by name."""
    return {"prompts": prompts_section(config.agent), "models": models_section(config),
            "retrieval": retrieval_section(config), "answer": _without(config.answer, ANSWER_LEFT_OUT),
            "agent": _without(config.agent, AGENT_LEFT_OUT), "tools": tools_section(config)}


def _without(section, left_out: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in section.model_dump(mode="json").items() if k not in left_out}


# ---------------------------------------------------------------------- prompts
def prompts_section(agent: AgentConfig) -> dict[str, Any]:
    """The prompt versions and a checksum of every prompt text, so an edited text changes the
    bundle even when nobody raised its version."""
    from citadel.agent import planner
    from citadel.prompting import prompt
    from citadel.reader import judge

    return {"answer": {"version": prompt.PROMPT_VERSION, "assembled_version": prompt.ASSEMBLED_PROMPT_VERSION,
                       "texts_sha256": value_sha256(_texts(prompt))},
            "planner": {"backend": agent.planner,
                        "texts_sha256": value_sha256(_texts(planner, suffix="_SYSTEM"))},
            "reader_judge": {"texts_sha256": value_sha256(_texts(judge, suffix="SYSTEM"))}}


def _texts(module, suffix: str = "") -> dict[str, str]:
    """The module's upper-case string constants (its prompt texts), by name."""
    return {name: value for name, value in vars(module).items()
            if name.isupper() and name.endswith(suffix) and isinstance(value, str)}


# ---------------------------------------------------------------------- models
def models_section(config: CitadelConfig) -> dict[str, Any]:
    answer = config.answer
    models = {"embedder": embedder_identity(config.embedding), "reader": reader_identity(answer),
              "reranker": reranker_identity(answer), "generator": generator_identity(answer.generator, answer),
              "secondary_generator": (generator_identity(answer.secondary_generator, answer)
                                      if answer.secondary_generator else None)}
    if answer.gate == "calibrated":
        models["gate_model"] = gate_model_identity(answer)
    return models


def embedder_identity(embedding: EmbeddingConfig) -> dict[str, Any]:
    from citadel.embedding.factory import embedder_identity as model_and_dim

    model_id, dim = model_and_dim(embedding)
    identity: dict[str, Any] = {"backend": embedding.backend, "model_id": model_id, "dim": dim}
    if embedding.backend == "minilm":
        directory = _minilm_dir()
        # the weights' sha256 alone is what the reader's manifest names as its base (base_sha256)
        identity["weights_sha256"] = file_sha256(directory / "model.safetensors") if directory else MISSING
        identity["files_sha256"] = tree_sha256(directory) if directory else MISSING
    return identity


def _minilm_dir() -> Path | None:
    try:
        from citadel.embedding.minilm import model_path

        return model_path()
    except ImportError:  # the package is absent: the bundle says so (MISSING) instead of failing
        return None


def reader_identity(answer: AnswerConfig) -> dict[str, Any]:
    if answer.reader == "openai_compatible":
        return {"backend": answer.reader, "model": answer.openai_model}
    if answer.reader != "trained":
        return {"backend": answer.reader}
    from citadel.reader.network import ARTEFACT_DIR, MANIFEST_FILE, WEIGHTS_FILE

    directory = Path(answer.reader_artefact or ARTEFACT_DIR)
    manifest = _json_or_empty(directory / MANIFEST_FILE)
    return {"backend": answer.reader, "runtime": answer.reader_runtime, "version": manifest.get("version"),
            "base_sha256": manifest.get("base_sha256"), "manifest_sha256": file_sha256(directory / MANIFEST_FILE),
            "weights_sha256": file_sha256(directory / WEIGHTS_FILE)}


def _json_or_empty(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def reranker_identity(answer: AnswerConfig) -> dict[str, Any]:
    """The reranker; `reader` is the reader above, so only its name is repeated here."""
    identity: dict[str, Any] = {"backend": answer.reranker}
    if answer.reranker == "cross_encoder":
        identity["files_sha256"] = tree_sha256(answer.cross_encoder_dir) if answer.cross_encoder_dir else MISSING
    elif answer.reranker == "llm_judge":
        identity["gguf_sha256"] = _smollm2_sha256()
    return identity


def generator_identity(backend: str, answer: AnswerConfig) -> dict[str, Any]:
    if backend == "local_llm":
        return {"backend": backend, "gguf_sha256": _smollm2_sha256()}
    if backend == "openai_compatible":
        return {"backend": backend, "model": answer.openai_model}
    return {"backend": backend}


def _smollm2_sha256() -> str:
    from citadel.generation.backends import smollm2_gguf_path

    path = smollm2_gguf_path()
    return file_sha256(path) if path is not None else MISSING


def gate_model_identity(answer: AnswerConfig) -> dict[str, Any]:
    from citadel.answer.gate_model import PACKAGED_MODEL

    return {"sha256": file_sha256(answer.gate_model or PACKAGED_MODEL)}


# ---------------------------------------------------------------------- retrieval and tools
def retrieval_section(config: CitadelConfig) -> dict[str, Any]:
    return {**config.retrieval.model_dump(mode="json"), "index": _index_search(config.index)}


def _index_search(index: IndexConfig) -> dict[str, Any]:
    dumped = index.model_dump(mode="json")
    return {name: dumped[name] for name in INDEX_SEARCH_FIELDS}


def tools_section(config: CitadelConfig) -> dict[str, Any]:
    """The tool registry by content (None: only the built-in search tool)."""
    registry = config.tools.registry_file
    return {"registry_sha256": file_sha256(registry) if registry is not None else None}
