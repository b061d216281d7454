"""One typed configuration root, loaded from YAML plus `CITADEL_*` environment variables.

Precedence (lowest first): field defaults, the YAML file (`CITADEL_CONFIG` or an explicit path),
then environment variables. `CITADEL_HOME` sets the data directory; any other field is reached with
`CITADEL_<SECTION>__<FIELD>` (double underscore between levels), e.g.
`CITADEL_RETRIEVAL__TOP_K=5` or `CITADEL_EMBEDDING__BACKEND=hash`. `CITADEL_REDIS_URL` sets
`state.redis_url`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
    torch_threads: int = Field(
        0, ge=0, description="torch CPU threads for the embedder; 0 = torch's default (all cores). "
        "1 keeps single-query latency steady on a small box shared with other work."
    )


class ChunkingConfig(_Section):
    max_tokens: Optional[int] = Field(
        None, ge=16, description="Cap on a chunk's embedded text (context header included) in the embedding "
        "model's own tokens. None: the model's window (MiniLM: 256 wordpieces less [CLS]/[SEP]); a larger value "
        "is capped at the window, since the model never reads past it.")
    overlap_tokens: int = Field(50, ge=0, description="Overlap between consecutive chunks of one section, in "
                                                      "the model's tokens.")


class IndexConfig(_Section):
    tiny_max_chunks: int = Field(20_000, description="Below this a tenant is 'tiny': exact search.")
    # Tiers by size and traffic (citadel/segments/tiering.py): a tenant moves only at a publish or a
    # compaction, past a threshold by `tier_margin`, and not before `tier_min_stay_days` in its tier.
    hot_min_queries_per_day: float = Field(
        100.0, ge=0, description="A tenant above tiny is 'hot' (HNSW in RAM) when its partition served at least "
        "this many queries a day over the traffic window, else 'cold' (DiskANN on SSD): rarely used tenants go cold."
    )
    hot_min_chunks: int = Field(
        20_000, ge=0, description="Tenants below this many chunks are 'small' and stay 'cold' (DiskANN) whatever "
        "their traffic. The default, tiny's bound, makes every busy tenant above tiny hot: measured "
        "(benchmarks/tier_moves.py), keeping busy small tenants cold saved 8% of the index RAM and sent half the "
        "queries to DiskANN, five times slower than HNSW at the median."
    )
    hot_max_chunks: Optional[int] = Field(
        None, ge=1, description="Tenants above this many chunks are 'cold' whatever their traffic (a cap on one "
        "tenant's RAM); none: no cap (big busy tenants stay hot, on a retriever deployment of their own: "
        "serving.dedicated_tenant_chunks)."
    )
    tier_margin: float = Field(
        0.2, ge=0, lt=1, description="Hysteresis: a tenant crosses a tier threshold (queries a day, chunks) only "
        "when past it by this share (above t*(1+margin) to go up, below t*(1-margin) to come down)."
    )
    tier_min_stay_days: float = Field(
        1.0, ge=0, description="A tenant stays in a tier at least this long before traffic or size moves it "
        "(a tiny tenant grown past its margin leaves at once: exact search must stay small)."
    )
    tier_window_days: int = Field(
        7, ge=1, le=90, description="Queries a day are the mean over this many UTC days (today included): a tenant "
        "that stops being queried goes cold within the window."
    )
    tier_day_s: float = Field(
        86_400.0, ge=1, le=86_400, description="The tier policy's day in seconds: queries a day, the traffic "
        "window and the minimum stay are counted in days of this length. A UTC day; tests shorten it to run "
        "tier moves in seconds."
    )
    tier_check_interval_s: float = Field(
        3_600.0, ge=0, description="How often each job runner (citadel/ingest/runner.py, between its jobs) "
        "compacts the tenants whose tier the policy changes, as `citadel tiers --apply` does, so a tenant "
        "that stops being queried moves cold without a publish. 0 turns the schedule off."
    )
    traffic_flush_s: float = Field(
        30.0, gt=0, description="How often a serving process adds its per-tenant query counts to the catalog "
        "(one write per interval, off the query's path)."
    )
    traffic_max_tenants: int = Field(
        100_000, ge=1, description="Most tenants one process counts between flushes (a bound on its memory)."
    )
    tier_overrides: dict[str, Literal["tiny", "hot", "cold"]] = Field(
        default_factory=dict, description="Per-tenant tier, overriding the size and traffic rule."
    )
    hnsw_m: int = Field(32, description="HNSW graph degree M.")
    hnsw_ef_construction: int = Field(200, description="HNSW efConstruction.")
    hnsw_ef_search: int = Field(64, description="HNSW efSearch for unfiltered queries.")
    hnsw_storage: Literal["fp32", "fp16"] = Field("fp32", description="Vector storage in HNSW.")
    hnsw_max_ef_search: int = Field(2048, description="Cap on efSearch raised for selective filters.")
    delta_min_base_rows: int = Field(
        20_000, ge=0,
        description="Tenants whose base segment has fewer rows are rebuilt whole on every publish (seconds "
        "for exact-search tenants); larger ones take incremental publishes into a delta segment.",
    )
    delta_max_fraction: float = Field(
        0.10, ge=0, description="Compact when the delta would hold more than this share of the base's live rows."
    )
    delta_max_rows: int = Field(
        50_000, ge=0, description="... or more than this many rows (the delta is scanned exactly on every query)."
    )
    tombstone_max_fraction: float = Field(
        0.20, ge=0, description="Compact when more than this share of the base's rows are superseded or withdrawn."
    )


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
    rrf_vector_weight: float = Field(
        1.0, description="Weight of the vector leg in fusion (the BM25 leg has weight 1); tune on train data."
    )
    max_chunks_per_document: int = Field(2, description="Cap of chunks per document after fusion.")
    focus_window: int = Field(
        10, ge=1, description="The top of the fused ranking that decides whether one document is the focus."
    )
    focus_share: float = Field(
        0.6, gt=0, le=1.0,
        description="A document holding at least this share of the fused score in the focus window is the "
        "question's focus and is exempt from the per-document cap (e.g. a statement table deep in a 10-K); "
        "1.0 turns the exemption off unless one document fills the window.",
    )


class OcrConfig(_Section):
    """OCR of PDF pages with no text layer (citadel/parsing/ocr.py): pdfium renders the page, Tesseract reads
    it in its own process, killed when its time is up. A timeout or failure dead-letters the document
    (ocr_timeout / ocr_failed); `citadel ingest --retry-dead-letters` replays it with longer budgets."""

    enabled: bool = Field(
        True, description="Read PDF pages that show an image but have no text layer with Tesseract; off: such a "
        "document publishes its text pages only, or is refused as no_text_layer when it has none."
    )
    page_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="Seconds Tesseract may spend on one page before it is killed (ocr_timeout)."
    )
    document_timeout_s: float = Field(
        600.0, gt=0, le=86_400, description="Seconds all OCR of one document may take, rendering included; when "
        "they run out the document is dead-lettered (ocr_timeout)."
    )
    retry_multiplier: float = Field(
        4.0, ge=1, le=1000, description="A dead-letter replay multiplies both budgets by this (an OCR timeout is "
        "most often a dense or large page that needs more time, not a broken file)."
    )
    dpi: int = Field(
        200, ge=50, le=600, description="Rendering resolution for OCR: 200-300 reads body text well; below ~150 "
        "small print is lost."
    )
    max_page_pixels: int = Field(
        40_000_000, ge=100_000, le=400_000_000, description="Upper bound on a rendered page's pixels: a page "
        "declaring a huge size is rendered at a lower resolution instead of exhausting memory."
    )
    language: str = Field(
        "eng", min_length=1, max_length=64, description="Tesseract language(s), e.g. 'eng' or 'eng+deu'; each "
        "needs its traineddata installed (Debian: tesseract-ocr-<lang>)."
    )

    @field_validator("language")
    @classmethod
    def _language_is_a_name(cls, value: str) -> str:
        if not all(c.isascii() and (c.isalnum() or c in "_+") for c in value):
            raise ValueError("language is Tesseract language names joined by '+', e.g. 'eng+deu'")
        return value


class IngestConfig(_Section):
    max_file_bytes: int = Field(20 * 1024 * 1024, description="Larger files are refused (dead letter).")
    ocr: OcrConfig = Field(default_factory=OcrConfig, description="OCR of scanned PDF pages.")
    published_statuses: list[str] = Field(
        default_factory=lambda: ["published"], min_length=1, max_length=64,
        description="Document statuses approved for readers (an allowlist; case and surrounding space "
        "ignored). A document whose trusted status is anything else ('Draft v2', 'archived') is skipped as "
        "not_approved; one with no stated status publishes.")


class AnswerConfig(_Section):
    """Grounded answers (DESIGN.md §4 steps 4-7, §6): rerank, confidence gate, sources, generation."""

    reranker: Literal["none", "reader", "cross_encoder", "llm_judge"] = Field(
        "none", description="none: keep the fused order; reader: the project's trained reader (answer.reader) "
        "blended with the fused score; cross_encoder: a local CrossEncoder directory; "
        "llm_judge: the packaged SmolLM2 scoring yes/no per pair (~2 pairs/s on CPU, for GPUs).",
    )
    reader: Literal["trained", "openai_compatible", "fake"] = Field(
        "trained", description="The reader (DESIGN.md §6) that reranks, chooses the quoted sentences and confirms "
        "the asked fact: trained: the project's artefact over the packaged MiniLM; openai_compatible: one yes/no "
        "question per pair to the model server of openai_base_url; fake: deterministic word overlap (tests).",
    )
    reader_artefact: Optional[Path] = Field(
        None, description="Trained reader artefact directory (`citadel train reader`); None: the packaged one."
    )
    reader_runtime: Literal["torch", "onnx"] = Field(
        "onnx", description="torch: fp32; onnx: exported once and quantised to int8 (onnxruntime), cached by checksum."
    )
    reader_threads: Optional[int] = Field(None, ge=1, description="Threads per reader forward pass (None: the runtime's).")
    reader_candidates: int = Field(30, ge=1, le=200, description="Fused candidates the reader rescores (reranker: reader).")
    reader_fusion_weight: float = Field(
        0.9, ge=0.0, le=1.0, description="Share of the fused score in the reader reranker's blend (SciFact train "
        "queries: nDCG@10 rises with it, 0.41 at 0 to 0.725 at 1; docs/benchmarks.md)."
    )
    confirm: bool = Field(
        True, description="Assert an answer only when a top sentence holds the asked slot about its subject "
        "(citadel/answer/confirm.py); otherwise reply not_confirmed with the closest evidence. Needs the reader."
    )
    reader_quotes: bool = Field(
        True, description="With confirm: the extractive generator quotes the sentences the reader scores highest "
        "(else the best cover of the question's words)."
    )
    confirm_min_probability: float = Field(
        0.5, ge=0.0, le=1.0, description="Confirm: the reader's probability the slot-holding sentence must reach."
    )
    confirm_min_probability_gated: float = Field(
        0.0, ge=0.0, le=1.0, description="Confirm: the reader's probability needed when the coverage gate passed too "
        "(chosen on the paraphrase dev split and the regression set, docs/benchmarks.md)."
    )
    confirm_min_subject_share_gated: float = Field(
        0.0, ge=0.0, le=1.0, description="Confirm: the subject share needed when the coverage gate passed too (0: a "
        "slot-holding sentence suffices; higher keeps more near-topic questions unasserted but fails the regression "
        "set's refusal precision, docs/benchmarks.md)."
    )
    confirm_min_subject_share: float = Field(
        0.5, ge=0.0, le=1.0, description="Confirm: share of the question's subject terms in that sentence, its "
        "heading and its document's title."
    )
    topic_coverage: float = Field(
        0.3, ge=0.0, le=1.0, description="Confirm: a top passage covering this share of the question (lexically or "
        "by meaning) means the topic was found, so the reply is not_confirmed rather than a bare refusal."
    )
    topic_vector: float = Field(
        0.3, ge=0.0, le=1.0, description="Confirm: ... or the question is at least this close to one in embedding."
    )
    verifier: bool = Field(
        True, description="The claim verifier (citadel/quality/verifier.py, DESIGN.md §11): each claim of a generated "
        "answer checked against the source it cites; durations, totals and comparisons recomputed by code (wrong "
        "ones corrected from the source), the rest judged by the reader when `confirm` is on (without the reader: "
        "the code checks only). Uncited or unsupported claims are removed."
    )
    verifier_min_probability: float = Field(
        0.45, ge=0.0, le=1.0, description="Verifier: the judge's probability a claim needs against its cited "
        "sentences, chosen on the judge set's dev half (`citadel eval judge --figures`: kappa 0.72 against two "
        "people's consensus on the test half; 0.1 gives 0.60). Verbatim quotes skip the judge."
    )
    verifier_max_claims: int = Field(
        40, ge=1, le=1_000, description="Verifier: claims checked per answer; later claims are cut and the answer "
        "says it was shortened."
    )
    verifier_timeout_s: float = Field(
        5.0, gt=0.0, description="Verifier: the judge's time per answer; a slower or failing judge is skipped "
        "(degraded: verifier) and the claims it did not judge stay as validated."
    )
    cross_encoder_dir: Optional[Path] = Field(
        None, description="Local directory of a sentence-transformers CrossEncoder (no hub access)."
    )
    rerank_candidates: int = Field(50, description="Fused candidates retrieved for reranking.")
    rerank_top_n: int = Field(8, description="Passages kept after reranking.")
    rerank_batch_size: int = Field(16, description="Pairs per reranker forward pass.")
    rerank_timeout_s: float = Field(
        10.0, description="A rerank slower than this is skipped (degraded: rerank_skipped)."
    )
    generator: Literal["extractive", "local_llm", "openai_compatible"] = Field(
        "extractive", description="extractive: deterministic quotes (CPU/test default); local_llm: the packaged "
        "SmolLM2-135M; openai_compatible: HTTP /v1/chat/completions (vLLM, Ray Serve LLM).",
    )
    secondary_generator: Optional[Literal["extractive", "local_llm", "openai_compatible"]] = Field(
        None, description="Backend used while the primary generator's breaker is open (None: the extractive fallback)."
    )
    openai_base_url: str = Field("http://127.0.0.1:8000", description="Base URL of the OpenAI-compatible server.")
    openai_model: str = Field("", description="Model name sent to the OpenAI-compatible server.")
    openai_api_key_env: str = Field(
        "OPENAI_API_KEY", description="Environment variable holding its API key (unset: no Authorization header)."
    )
    openai_timeout_s: float = Field(30.0, description="HTTP timeout of one generation request.")
    max_new_tokens: int = Field(256, description="Generation length cap (local_llm and openai_compatible).")
    task_instruction: str = Field(
        "Answer in a few sentences, citing sources with [n] markers.", min_length=1, max_length=1_000,
        description="The instruction that ends every answer prompt, single-shot and runs (after the question, "
        "the last part of the budgeted prompt: citadel/prompting/prompt.py).",
    )
    max_sources: int = Field(8, description="Numbered sources handed to the generator (6-8 recommended).")
    source_token_budget: int = Field(600, description="Approximate tokens of one expanded section.")
    total_token_budget: int = Field(3000, description="Approximate tokens of all sources together.")
    gate: Literal["calibrated", "thresholds"] = Field(
        "thresholds", description="thresholds: the hand-set coverage and cosine thresholds below (the default: "
        "the fitted model did not beat them, see docs/benchmarks.md); calibrated: answer / clarify / "
        "refuse from a fitted model of several signals (citadel/answer/gate_model.py, `citadel train gate`).",
    )
    expand_acronyms: bool = Field(
        True, description="Append the long form of each acronym the tenant's documents define (and back) to the "
        "search query, and count either spelling for coverage.",
    )
    gate_model: Optional[Path] = Field(
        None, description="Fitted gate model JSON (`citadel train gate`); None: the packaged one."
    )
    min_coverage: float = Field(
        0.6, description="Gate: IDF-weighted share of the question's distinctive terms one top passage must cover."
    )
    min_vector_score: float = Field(
        0.25, description="Gate: below this cosine between question and best top passage, refuse."
    )
    strong_vector_score: float = Field(
        0.55, description="Gate: at or above this cosine a paraphrase passes with the lower coverage below."
    )
    min_coverage_strong_vector: float = Field(
        0.35, description="Gate: coverage needed when the vector score is strong."
    )
    min_rerank_score: Optional[float] = Field(
        None, description="Gate: refuse when the best rerank score is below this (only when a reranker ran)."
    )
    gate_passages: int = Field(3, description="Gate: how many top passages are examined.")
    min_support: float = Field(
        0.5, description="Validator: share of a sentence's content terms its cited sources must contain."
    )
    extractive_max_sentences: int = Field(3, description="Sentences the extractive generator quotes.")
    answer_log_retention_days: float = Field(
        30.0, gt=0, description="Answer-log entries older than this are purged: by `citadel purge-logs`, by "
        "each serving process every answer_log_purge_interval_s, and on the request path at most hourly."
    )
    answer_log_purge_interval_s: float = Field(
        3_600.0, ge=0, description="How often each serving process purges expired answer-log entries in the "
        "background (0: only `citadel purge-logs` and the request path do)."
    )
    prompt_retention_days: int = Field(
        30, ge=0, description="Prompts and replies the generator was sent and returned are kept encrypted "
        "(AES-GCM) this long for investigation, purged with the answer log; 0 keeps none. Read by platform "
        "admins only, each read audited (`citadel logs show`, GET /v1/admin/prompts/{request_id})."
    )
    prompt_key_env: str = Field(
        "CITADEL_PROMPT_KEYS", description="Environment variable holding the prompt keys as `kid:base64key` pairs, "
        "newest last (a KMS or secret store sets it); unset: <home>/secrets/prompt_keys.json, made on first use."
    )
    mask_known_users: bool = Field(
        True, description="Mask the user ids the catalog knows (as `[name]`) in spans, log lines and the answer "
        "log, besides e-mail addresses, phone numbers, bank details, national ids and IP addresses."
    )
    screen_cache_chunks: int = Field(
        100_000, ge=0,
        description="Chunks whose planted-instruction verdict is remembered (a chunk's text never changes, "
        "and screening one costs ~1.5 ms of regex); 0 screens every time.",
    )
    allowed_link_domains: list[str] = Field(
        default_factory=list, max_length=1_000,
        description="Domains (and their subdomains) an answer may link to, for every tenant; links elsewhere "
        "lose their target, and images, HTML and data URIs never leave (citadel/answer/links.py).",
    )
    tenant_link_domains: dict[str, list[str]] = Field(
        default_factory=dict, description="Further link domains per tenant id, added to allowed_link_domains.",
    )


class IngestPipelineConfig(_Section):
    """The Ray Data ingestion pipeline (indexing/pipeline.py) and the local Ray instance it starts."""

    engine: Literal["auto", "ray", "local"] = Field(
        "auto", description="`citadel ingest` engine. auto: Ray Data when ray is importable, else in-process."
    )
    parse_actors: int = Field(1, ge=1, description="Parse+chunk actors (cheap next to embedding).")
    parse_cpus: float = Field(0.25, gt=0, description="Logical CPUs each parse actor reserves.")
    parse_batch_documents: int = Field(8, ge=1, description="Documents per parse+chunk call.")
    embed_actors: int = Field(1, ge=1, description="Size of the embedding actor pool.")
    embed_batch_size: int = Field(64, ge=1, description="Chunks per embed call (one model forward batch).")
    embed_dtype: Literal["float32", "float16"] = Field(
        "float32", description="Dtype the embeddings land in (staged chunk tables, object store)."
    )
    embed_torch_threads: int = Field(
        0, ge=0, description="torch CPU threads per embed actor; 0 = the instance's CPUs split among the actors."
    )
    embed_num_gpus: float = Field(
        0.0, ge=0, description="GPU share per embed actor; above 0 the actor runs the model on CUDA in fp16."
    )
    write_cpus: float = Field(0.25, gt=0, description="Logical CPUs of the actor writing staged partition tables.")
    blocks_per_actor: int = Field(4, ge=1, description="Input blocks per actor, so every actor gets work.")
    build_cpus: int = Field(1, ge=1, description="CPUs (and index build threads) of each segment build task.")
    tiny_pack_chunks: int = Field(
        50_000, ge=1, description="Tiny tenants share one build task up to this many chunks (each keeps its own index)."
    )
    ray_num_cpus: int = Field(0, ge=0, description="Logical CPUs of the local Ray instance; 0 = os.cpu_count().")
    ray_object_store_mb: int = Field(1024, ge=80, description="Object store memory of the local Ray instance (MB).")
    ray_auth_mode: Literal["token", "disabled"] = Field(
        "token", description="RAY_AUTH_MODE for the local instance (Ray 2.60 defaults to token auth)."
    )
    worker_niceness: int = Field(15, ge=0, le=19, description="Nice value of Ray worker processes.")
    ray_address: Optional[str] = Field(
        None, pattern=r"^[A-Za-z0-9.:\[\]_-]{1,200}$",
        description="An existing Ray cluster to run on (host:port of its GCS; a KubeRay head, or `citadel "
                    "cluster up`'s); None: start a local instance. RAY_AUTH_TOKEN carries its token.")


class StateConfig(_Section):
    """Answer cache, per-user budgets and idempotency keys (DESIGN.md §7)."""

    redis_url: str = Field(
        "", description="Redis URL (`CITADEL_REDIS_URL` also sets it). Empty: in-process state (one machine)."
    )
    key_prefix: str = Field("citadel:", description="Prefix of every Redis key, so deployments can share a server.")
    answer_cache_enabled: bool = Field(True, description="Serve repeated questions from the answer cache.")
    answer_cache_ttl_s: float = Field(3600.0, gt=0, description="How long a cached answer is served.")
    answer_cache_max_entries: int = Field(10_000, ge=1, description="In-process cache capacity (LRU beyond it).")
    budget_requests_per_day: int = Field(2_000, ge=1, description="Requests one user may make per UTC day.")
    budget_cost_per_day: float = Field(
        20.0, gt=0, description="Estimated cost (in `cost_unit`) one user may spend per UTC day."
    )
    cost_per_1k_tokens: float = Field(0.002, ge=0, description="Estimated cost of 1,000 prompt+answer tokens.")
    cost_unit: str = Field("USD", description="Unit of the cost budget, shown in 429 reasons.")
    idempotency_ttl_s: float = Field(86_400.0, gt=0, description="How long an admin write's idempotency key is kept.")


class ServiceCredential(_Section):
    """A calling service: its bearer token is stored only as a SHA-256 hex digest, with the tenants
    it may act for (`["*"]`: every tenant, only when given explicitly), an optional expiry and a
    revocation mark (revoked entries stay in the file as a record; they never authenticate)."""

    id: str = Field(..., min_length=1, max_length=256,
                    description="Service id; user contexts must name it as their `svc`.")
    token_sha256: str = Field(..., min_length=64, max_length=64, description="SHA-256 hex of the bearer token.")
    tenants: list[str] = Field(
        default_factory=list, max_length=10_000,
        description='Tenants this service may act for; ["*"] = every tenant (explicit only). '
        "Empty: none (a credential from before tenant scopes existed acts for nobody until re-issued).")
    admin: bool = Field(False, description="May call the admin endpoints, for its `tenants` only; "
                                           'with tenants ["*"] it is a platform admin (fault injection too).')
    expires_at: Optional[float] = Field(None, description="Unix time after which the token is refused.")
    revoked_at: Optional[float] = Field(None, description="Unix time it was revoked (`citadel credentials revoke`).")

    @field_validator("tenants")
    @classmethod
    def _explicit_wildcard(cls, tenants: list[str]) -> list[str]:
        if "*" in tenants and tenants != ["*"]:
            raise ValueError('"*" (every tenant) stands alone; list tenants or give ["*"], not both')
        if any(not t or len(t) > 256 for t in tenants):
            raise ValueError("tenant ids are 1-256 characters")
        return tenants


class IdentityProviderConfig(_Section):
    """An identity provider whose public keys (a JWKS file) sign user contexts that no service can
    forge: contexts from it must carry its `iss`, and only the listed services may present them."""

    issuer: str = Field(..., min_length=1, description="`iss` every context from this provider carries.")
    jwks_file: Path = Field(..., description="JWKS JSON of the provider's public keys (EdDSA, ES256 or RS256).")
    services: list[str] = Field(..., min_length=1, description="Service ids that may present its contexts.")


class IdentityConfig(_Section):
    """Who may call the API: service credentials plus short-lived signed user contexts (JWTs), keys
    chosen by `kid` (DESIGN.md §4.1)."""

    services: list[ServiceCredential] = Field(
        default_factory=list, description="Service credentials (hashed). Merged with `credentials_file`."
    )
    credentials_file: Optional[Path] = Field(
        None, description="JSON file of further hashed credentials (default: <home>/secrets/credentials.json)."
    )
    service_keys_file: Optional[Path] = Field(
        None, description="Per-service HS256 secrets by kid for user contexts (default: "
        "<home>/secrets/service_keys.json; `citadel token` creates a service's first key)."
    )
    providers: list[IdentityProviderConfig] = Field(
        default_factory=list, description="Identity providers whose JWKS public keys sign user contexts."
    )
    audience: str = Field("citadel", description="`aud` a user context must carry.")
    max_ttl_s: int = Field(900, ge=1, description="Longest accepted user-context lifetime (exp - iat).")
    leeway_s: int = Field(30, ge=0, description="Clock skew tolerated on exp and iat.")


class DeploymentSettings(_Section):
    """One Serve deployment's replicas, concurrency limits and resources."""

    min_replicas: int = Field(1, ge=0, description="Autoscaling floor.")
    max_replicas: int = Field(1, ge=1, description="Autoscaling ceiling (equal to min: fixed replicas).")
    target_ongoing_requests: float = Field(2.0, gt=0, description="Autoscaling target per replica.")
    max_ongoing_requests: int = Field(8, ge=1, description="Requests a replica works on at once.")
    max_queued_requests: int = Field(64, ge=-1, description="Requests waiting per caller handle (-1: unbounded).")
    num_cpus: float = Field(0.25, ge=0, description="Logical CPUs reserved per replica.")
    num_gpus: float = Field(0.0, ge=0, description="GPU share per replica.")
    upscale_delay_s: float = Field(2.0, ge=0, description="Load must persist this long before scaling up.")
    downscale_delay_s: float = Field(15.0, ge=0, description="Idle must persist this long before scaling down.")
    # Multi-node placement (cluster/multinode.yaml): two replicas of a stage on two nodes survive a node's loss.
    max_replicas_per_node: Optional[int] = Field(
        None, ge=1, description="Most replicas of this deployment on one node (1: spread over nodes; none: no limit)."
    )
    resources: dict[str, float] = Field(
        default_factory=dict, description="Custom Ray resources per replica (e.g. a node's own resource, to pin it)."
    )
    health_check_period_s: Optional[float] = Field(
        None, gt=0, description="How often Serve checks a replica (none: Serve's default, 10 s); a dead node's "
        "replicas are replaced sooner with a shorter period."
    )

    @field_validator("resources")
    @classmethod
    def _positive_resources(cls, value: dict[str, float]) -> dict[str, float]:
        if any(amount <= 0 for amount in value.values()):
            raise ValueError("each custom resource of a replica is a positive amount")
        return value


def _over_defaults(defaults: dict[str, BaseModel], given: Any) -> Any:
    """A per-name settings map given in YAML or the environment changes only the fields it names;
    the other names and fields keep their defaults."""
    if not isinstance(given, dict):
        return given
    merged: dict[str, Any] = {name: model.model_dump() for name, model in defaults.items()}
    for name, fields in given.items():
        if isinstance(fields, BaseModel):
            fields = fields.model_dump()
        merged[name] = {**merged.get(name, {}), **fields} if isinstance(fields, dict) else fields
    return merged


INGRESS_DEPLOYMENTS = ("gateway", "fused")  # the deployments Serve's proxy sends HTTP requests to


def _deployments() -> dict[str, DeploymentSettings]:
    # Chosen for a 2-core machine with 32 concurrent clients (DESIGN.md §5): the ingress and the
    # fused replica take many requests at once (they mostly wait on downstreams or run short CPU
    # work), the model stages batch, and the retriever scales out under load.
    return {
        # The ingress replicas' Serve limit sits far above the shedder's bound (serving.admission_*): every
        # request reaches the shedder, which refuses the excess at once with Retry-After. At Serve's own
        # limit the proxy would hold them instead, backing off while it probes the full replica, and
        # the whole application idles (measured: the 160-user step fell to half its peak that way).
        "gateway": DeploymentSettings(max_ongoing_requests=1024, max_queued_requests=256, num_cpus=0.25),
        # Two fused replicas, one torch thread each: on 2 cores this matched the in-process throughput
        # (56.7 vs 56.6 answers/s at 8 clients), where one replica with 2 threads reached 0.6x of it.
        "fused": DeploymentSettings(min_replicas=2, max_replicas=2, max_ongoing_requests=1024,
                                    max_queued_requests=256, num_cpus=0.5),
        "embedder": DeploymentSettings(max_ongoing_requests=32, max_queued_requests=256, target_ongoing_requests=16),
        "retriever": DeploymentSettings(max_replicas=3, max_ongoing_requests=16, max_queued_requests=256,
                                        target_ongoing_requests=4),
        # Split only: the settings of each big tenant's own retriever deployment (serving/ray/dedicated.py).
        "retriever_dedicated": DeploymentSettings(max_replicas=3, max_ongoing_requests=16, max_queued_requests=256,
                                                  target_ongoing_requests=4),
        "reranker": DeploymentSettings(max_ongoing_requests=32, max_queued_requests=256, target_ongoing_requests=16),
        "generator": DeploymentSettings(max_ongoing_requests=16, max_queued_requests=256, target_ongoing_requests=8),
        # Split only: agentic runs. A run holds one request (and one thread) of its replica for its
        # whole life, mostly waiting on the stage deployments; a second replica lets a run whose
        # replica died continue at once on a live one (the gateway adopts it when its lease expires).
        "orchestrator": DeploymentSettings(min_replicas=1, max_replicas=2, max_ongoing_requests=16,
                                           max_queued_requests=256, target_ongoing_requests=8),
    }


class ServingConfig(_Section):
    """The Ray Serve application (serving/ray/app.py) and the HTTP API (DESIGN.md §5, §9)."""

    topology: Literal["fused", "split"] = Field(
        "fused", description="fused: all stages in one replica; split: one autoscaled deployment per stage."
    )
    host: str = Field("127.0.0.1", description="HTTP bind address (loopback only here, DESIGN.md §8).")
    port: int = Field(8000, ge=1, le=65535, description="HTTP port of the Serve proxy.")
    request_timeout_s: float = Field(30.0, gt=0, description="Deadline of one API request, end to end.")
    gateway_threads: int = Field(
        32, ge=1, description="Worker threads of a gateway replica (stages run on them; split mostly waits)."
    )
    admission_max_in_flight: int = Field(
        16, ge=1, description="Load shedding: user requests that do work (POSTs under /v1/, admin routes aside) a "
        "gateway replica runs at once; more wait for a slot. Past its peak a replica serves fewer answers per "
        "second, not more, so the excess waits or is refused instead of joining.")
    admission_max_waiting: int = Field(
        32, ge=0, description="Load shedding: requests that may wait for a slot; beyond them a request is refused "
        "at once with 503 `overloaded` and Retry-After.")
    admission_max_wait_s: float = Field(
        2.0, gt=0, description="Load shedding: the longest a request waits for a slot before its 503.")
    admission_max_runs: int = Field(
        16, ge=1, description="Load shedding of agentic runs: runs a gateway replica holds started and unfinished "
        "(working, or waiting for one of its run workers); a message that would start one more is refused with 503 "
        "`overloaded` and Retry-After, before anything is charged or recorded.")
    admission_retry_after_s: int = Field(
        1, ge=1, description="Load shedding: the Retry-After (seconds) a refused request carries.")
    embed_max_batch_size: int = Field(32, ge=1, description="@serve.batch size of the embedder.")
    embed_batch_wait_s: float = Field(0.004, ge=0, description="@serve.batch wait of the embedder.")
    rerank_max_batch_size: int = Field(8, ge=1, description="@serve.batch size of the reranker (requests).")
    rerank_batch_wait_s: float = Field(0.004, ge=0, description="@serve.batch wait of the reranker.")
    tenants_per_replica: int = Field(16, ge=1, description="Tenant partitions a retriever replica keeps (multiplex LRU).")
    dedicated_tenant_chunks: int = Field(
        1_000_000, ge=0, description="Split topology: a tenant whose published partition holds more chunks than this "
        "(read from the catalog when the app is built: `citadel up`, a Serve deploy) gets a retriever deployment of "
        "its own, `retriever-<tenant>` with the `retriever_dedicated` settings and autoscaling; the rest share the "
        "multiplexed `retriever`. 0: by size never."
    )
    dedicated_tenants: list[str] = Field(
        default_factory=list, description="Tenants that get a retriever deployment of their own whatever their size."
    )
    max_dedicated_tenants: int = Field(
        8, ge=0, description="Most dedicated retriever deployments one app makes (the biggest tenants first)."
    )
    max_upload_bytes: int = Field(20 * 1024 * 1024, ge=1, description="Largest document an admin may upload.")
    max_body_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest request body of every route but uploads, counted while it is read "
        "(413 payload_too_large). An upload's limit is 4/3 of max_upload_bytes (base64) plus this."
    )
    max_groups: int = Field(256, ge=1, description="Most groups one upload or ACL change may name.")
    max_name_chars: int = Field(128, ge=1, description="Longest group name an upload or ACL change may name.")
    metrics_tokens_sha256: list[str] = Field(
        default_factory=list,
        description="SHA-256 hex digests of the bearer tokens that may read GET /metrics (a metrics credential, "
        "apart from every service credential; make one with `openssl rand -hex 32` and store "
        "`printf %s TOKEN | sha256sum`). Empty: /metrics answers 401 to everyone. The scraper sends "
        "`Authorization: Bearer TOKEN` (Prometheus: `authorization: {credentials: TOKEN}`).",
    )
    metrics_tenant_labels: list[str] = Field(
        default_factory=list, description="Tenants that always get their own `tenant` label in /metrics."
    )
    metrics_max_tenants: int = Field(
        50, ge=0, description="Further tenants labelled by name, first seen first; the rest share tenant=\"other\" "
        "(bounds the label's cardinality whatever tenants callers name)."
    )
    metrics_multiprocess_dir: Optional[Path] = Field(
        Path("run/metrics"), description="Serve: where every gateway replica process on a node writes its metrics "
        "(prometheus_client's multiprocess mode, PROMETHEUS_MULTIPROC_DIR in the replicas' runtime_env), so "
        "GET /metrics on any replica serves the sum over the node's replicas; relative to home. It must be a "
        "directory local to the node (not the shared home of a multi-node cluster: cluster/gpu.yaml puts it under "
        "/tmp); `citadel up` empties it when it deploys. None: each replica serves only its own registry. The "
        "in-process app (no Serve) keeps its own registry either way.")
    haproxy_ingress: bool = Field(
        False, description="Serve's HAProxy ingress (RAY_SERVE_ENABLE_HA_PROXY) instead of its Python HTTP proxy."
    )
    throughput_optimized: bool = Field(
        False, description="Serve's gRPC data plane between replicas (RAY_SERVE_THROUGHPUT_OPTIMIZED)."
    )
    direct_ingress: bool = Field(
        False, description="Serve's direct ingress (RAY_SERVE_ENABLE_DIRECT_INGRESS): every ingress replica (fused, "
        "or split's gateway) also answers HTTP itself on a port of its own on serving.host (30000 up), skipping the "
        "hop through Serve's proxy (about 6 ms a request on 2 cores); the proxy keeps answering serving.port. "
        "`citadel up` prints the replicas' URLs; a client spreads its connections over them or sits behind a load "
        "balancer that does (on a cluster network: serving.haproxy_ingress). Set before Ray starts.")
    direct_ingress_drain_s: float = Field(
        2.0, ge=0, description="With direct_ingress: how long a stopping ingress replica keeps its own port open "
        "for its clients to move away (Serve's default, 30 s, is for a cloud load balancer to deregister it; every "
        "replace and shutdown waits it out). RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S.")
    lean_request_path: bool = Field(
        True, description="Serve's request path without its extra threads: user code and the handle router on each "
        "replica's own event loop, request-path logs flushed in batches (RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD=0, "
        "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0, RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE=1000; set before Ray starts, "
        "an explicit environment wins). Safe because every handler is async and hands blocking work to threads.")
    access_log: bool = Field(
        False, description="Serve's per-request access log lines in every replica (the gateway's metrics, spans "
        "and answer log already record each request).")
    fault_injection: bool = Field(False, description="Allow admin fault injection (drills only).")
    deployments: dict[str, DeploymentSettings] = Field(
        default_factory=_deployments, description="Per-deployment settings, by stage name."
    )

    @field_validator("deployments", mode="before")
    @classmethod
    def _over_default_deployments(cls, value: Any) -> Any:
        return _over_defaults(_deployments(), value)

    @model_validator(mode="after")
    def _ingress_above_the_shedder(self) -> "ServingConfig":
        bound = self.admission_max_in_flight + self.admission_max_waiting
        for name in INGRESS_DEPLOYMENTS:
            settings = self.deployments.get(name)
            if settings is not None and settings.max_ongoing_requests <= bound:
                raise ValueError(
                    f"serving.deployments.{name}.max_ongoing_requests ({settings.max_ongoing_requests}) must exceed "
                    f"admission_max_in_flight + admission_max_waiting ({bound}): the shedder refuses the excess with "
                    "Retry-After, where Serve's proxy would hold it and idle")
        return self

    @field_validator("metrics_tokens_sha256")
    @classmethod
    def _sha256_hex(cls, digests: list[str]) -> list[str]:
        if any(len(d) != 64 or any(c not in "0123456789abcdefABCDEF" for c in d) for d in digests):
            raise ValueError("metrics_tokens_sha256 holds SHA-256 hex digests (64 hex digits), never tokens")
        return [d.lower() for d in digests]


class BreakerSettings(_Section):
    """A latency circuit breaker on one downstream (DESIGN.md §5)."""

    p95_threshold_ms: float = Field(2_000.0, gt=0, description="Trip when the windowed p95 exceeds this.")
    max_error_rate: float = Field(0.5, gt=0, le=1, description="Trip when this share of calls in the window fail.")
    window_s: float = Field(10.0, gt=0, description="Length of the measurement window.")
    min_samples: int = Field(10, ge=1, description="Calls needed in the window before it may trip.")
    cooldown_s: float = Field(10.0, gt=0, description="Open this long before the first half-open probe.")
    probe_interval_s: float = Field(2.0, gt=0, description="At most one half-open probe this often.")
    close_after_probes: int = Field(3, ge=1, description="Fast probes in a row that close the breaker.")
    stages: list[float] = Field(default_factory=lambda: [0.1, 0.5, 1.0], description="Traffic shares on return.")
    stage_duration_s: float = Field(5.0, gt=0, description="Time at each staged share before the next.")


def _breakers() -> dict[str, BreakerSettings]:
    return {
        # The extractive default answers in milliseconds; an LLM backend needs a higher threshold.
        "generator": BreakerSettings(p95_threshold_ms=2_000.0, min_samples=5),
        "reranker": BreakerSettings(p95_threshold_ms=1_500.0),
        "embedder": BreakerSettings(p95_threshold_ms=1_000.0),
        "catalog": BreakerSettings(p95_threshold_ms=1_000.0),
        "cache": BreakerSettings(p95_threshold_ms=200.0),
    }


class ResilienceConfig(_Section):
    """Hedging, breakers and the one retry layer (DESIGN.md §5)."""

    hedge_enabled: bool = Field(True, description="Hedge retriever reads after the observed p95.")
    hedge_quantile: float = Field(0.95, gt=0, lt=1, description="Quantile of observed latency that triggers a hedge.")
    hedge_min_delay_ms: float = Field(5.0, ge=0, description="Floor of the hedge delay.")
    hedge_budget: float = Field(0.10, ge=0, le=1, description="Most hedges as a share of requests.")
    outlier_routing: bool = Field(
        True, description="Route retriever reads away from a replica much slower than its peers (serving/ray/routing.py)."
    )
    retry_budget: float = Field(0.10, ge=0, le=1, description="Most retries as a share of requests.")
    retry_max_attempts: int = Field(2, ge=1, description="Attempts per call, first included.")
    breakers: dict[str, BreakerSettings] = Field(default_factory=_breakers, description="Breakers by downstream.")

    @field_validator("breakers", mode="before")
    @classmethod
    def _over_default_breakers(cls, value: Any) -> Any:
        return _over_defaults(_breakers(), value)


def _prompt_allowances() -> dict[str, int]:
    return {"system": 1_000, "tools": 2_000, "conversation": 4_000, "notes": 1_000, "sources": 20_000,
            "task": 2_000}


class AgentConfig(_Section):
    """Runs on the agentic path (DESIGN.md §10): the loop's limits, the planner, memory and prompts."""

    planner: Literal["rules", "openai_compatible"] = Field(
        "rules", description="Plan and reflection backend: rules (deterministic, the CPU default) or an "
        "OpenAI-compatible server in JSON mode (vLLM, Ray Serve LLM).")
    openai_base_url: str = Field("http://127.0.0.1:8000", description="Base URL of the planner's server.")
    openai_model: str = Field("", description="Model name sent to the planner's server.")
    openai_api_key_env: str = Field("CITADEL_PLANNER_API_KEY", description="Env var holding its API key, if any.")
    openai_timeout_s: float = Field(30.0, gt=0, description="HTTP timeout of one planner or reflection call.")
    step_cap: int = Field(8, ge=1, le=64, description="Stopping rule: most steps one run executes.")
    max_parallel_steps: int = Field(4, ge=1, le=32, description="Independent steps run at once.")
    token_budget: int = Field(24_000, ge=1, description="Stopping rule: most prompt+output tokens one run spends.")
    cost_budget: float = Field(0.10, gt=0, description="Stopping rule: most estimated cost (state.cost_unit) per run.")
    deadline_s: float = Field(120.0, gt=0, description="Stopping rule: a run's wall-clock deadline.")
    no_new_evidence_rounds: int = Field(2, ge=1, description="Stopping rule: rounds in a row that add no passage.")
    lease_ttl_s: float = Field(30.0, gt=0, description="A run's lease; another replica adopts it once expired.")
    max_message_chars: int = Field(4_000, ge=1, le=100_000, description="Longest message a user may send (413).")
    summarize_after_turns: int = Field(6, ge=2, description="Older turns than this many become the summary.")
    prompt_max_tokens: int = Field(32_000, ge=1_000, description="Whole-prompt cap, counted with the "
                                   "generator's tokenizer; single-shot answers and runs alike.")
    prompt_allowances: dict[str, int] = Field(default_factory=_prompt_allowances,
                                              description="Tokens per prompt part: system, tools, conversation, "
                                              "notes, sources, task (stable parts first, the task last); "
                                              "single-shot answers and runs alike.")
    retention_days: float = Field(30.0, gt=0, description="Conversations (messages, summaries, memories) and runs "
                                  "(event logs, steps) idle this long are purged, by the answer log's purge "
                                  "(`citadel purge-logs`, each serving process's purge thread).")


class ToolsConfig(_Section):
    """Tools beyond `search` (DESIGN.md §10): a registry of specs and where their systems answer."""

    registry_file: Optional[Path] = Field(None, description="YAML registry of tool specs (citadel/tools/spec.py); "
                                          "None: the agentic path has only `search`.")
    endpoints: dict[str, str] = Field(default_factory=dict, description="Base URL of each system a tool's `http` "
                                      "binding names (e.g. crm: http://127.0.0.1:8300).")
    example_crm: bool = Field(False, description="`citadel up` starts the example token service (examples/idp) and "
                              "CRM (examples/crm) on loopback, points `token_service_url` and `endpoints.crm` "
                              "at them; `citadel down` stops both.")
    service_id: str = Field("citadel-tools", description="The credential tools call as: the OAuth client "
                            "Citadel authenticates as at the token service (it confers no rights of its own).")
    delegation: Literal["token_exchange", "local_test_hs256"] = Field(
        "token_exchange", description="How a tool call acts for the run's user. token_exchange: with an access "
        "token the users' token service issued (OAuth 2.0 Token Exchange, RFC 8693) from the user's own context "
        "when the run started (citadel/tools/delegation.py). local_test_hs256: TEST ONLY, a context signed with "
        "`service_id`'s own HS256 key for whatever user the run names; never for a deployment.")
    token_service_url: Optional[str] = Field(None, pattern=r"^https?://[^\s]{1,500}$",
                                             description="Base URL of the token service (its POST /token); "
                                             "`citadel up` sets it when it starts the example one (examples/idp).")
    delegation_margin_s: float = Field(3600.0, ge=0, le=86_400.0, description="A run's delegation lives for the "
                                       "longest approval expiry of its tools plus this (a run parks, then resumes).")
    user_context_ttl_s: int = Field(120, ge=10, le=900, description="local_test_hs256 only: lifetime of the "
                                    "context minted per call.")
    timeout_s: float = Field(10.0, gt=0, description="HTTP timeout of one tool call (never past the run's deadline).")
    audit_seed: Optional[int] = Field(None, description="Seed of the T1 audit sampler (None: random).")
    max_response_bytes: int = Field(256 * 1024, ge=1_024, description="Largest tool response read.")
    honeypot_rate: float = Field(0.01, ge=0.0, le=1.0, description="Share of approval tasks that get a "
                                 "deliberately wrong twin request, to measure whether reviews are real "
                                 "(citadel/tools/honeypots.py); 0: none.")
    honeypot_seed: Optional[int] = Field(None, description="Seed of the honeypot planter (None: random per "
                                         "process); with a seed the same approvals get the same honeypots.")
    honeypot_decoy_accounts: list[str] = Field(default_factory=list, description="Account ids a honeypot may "
                                               "name instead of the real one: customers who fail a policy rule "
                                               "(e.g. the 2-year tenure of the multi-year discount).")
    eval_dir: Optional[Path] = Field(
        None, deprecated="tools.eval_dir is ignored: edits and rejections are candidate test items in the catalog",
        description="Deprecated, ignored: reviewers' edits and rejections are no longer appended to "
                    "<eval_dir>/<tool>.jsonl (nothing read it); they are queued in the catalog as candidate test "
                    "items per tenant and tool (`citadel eval candidates`, citadel/quality/candidates.py). Kept so "
                    "existing configs still load.")
    decision_webhook: Optional[str] = Field(None, pattern=r"^https?://[^\s]{1,500}$",
                                            description="URL that gets a POST (ids and outcome only) when an "
                                                        "approval or review task is decided or expires; None: none.")
    review_group: str = Field("knowledge-owners", min_length=1, max_length=256,
                              description="Who reviews a failed check when no document owner or tool approver "
                                          "group is named (citadel/reviews/tasks.py).")
    review_expire_after_s: float = Field(7 * 86_400.0, gt=0, description="A review task not decided in this "
                                         "time expires: the held answer or action is not given.")


class TracingConfig(_Section):
    """Where the spans of each request's stages go (citadel/tracing.py)."""

    exporter: Literal["log", "console", "file", "otlp"] = Field(
        "log", description="log: JSON lines on the citadel.trace logger; console; file: JSON lines in `file`; "
                           "otlp: OTLP/HTTP to `otlp_endpoint` (package opentelemetry-exporter-otlp-proto-http).")
    file: Optional[Path] = Field(None, description="The spans file for exporter 'file' (default <home>/traces.jsonl).")
    otlp_endpoint: Optional[str] = Field(None, pattern=r"^https?://[^\s]{1,500}$",
                                         description="OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces.")


class CatalogConfig(_Section):
    """Which catalog backend holds documents, versions, ACLs and partitions (DESIGN.md §7): SQLite
    under `home` on one machine; Postgres when several nodes share it."""

    backend: Literal["sqlite", "postgres"] = Field(
        "sqlite", description="sqlite: <home>/catalog.sqlite (one machine); postgres: the server at `dsn`.")
    dsn: Optional[str] = Field(
        None, pattern=r"^postgres(ql)?://[^\s]{1,1000}$",
        description="Postgres URL for backend 'postgres', e.g. postgresql://citadel@127.0.0.1:5432/citadel "
                    "(`CITADEL_CATALOG__DSN`).")
    pool_min_size: int = Field(1, ge=0, le=100, description="Pooled connections kept open per process.")
    pool_max_size: int = Field(10, ge=1, le=1_000, description="Most pooled connections per process.")
    pool_timeout_s: float = Field(5.0, gt=0, description="How long a call waits for a pooled connection "
                                                         "before it fails closed (CatalogUnavailable).")

    @model_validator(mode="after")
    def _postgres_needs_a_dsn(self) -> "CatalogConfig":
        if self.backend == "postgres" and not self.dsn:
            raise ValueError("catalog.backend 'postgres' needs catalog.dsn (a postgresql:// URL)")
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("catalog.pool_min_size is larger than catalog.pool_max_size")
        return self


class ObjectStoreConfig(_Section):
    """Where raw uploads are kept, under immutable keys raw/<tenant>/<document>/v<N>/<sha256>.<ext>
    (citadel/ingest/objects.py, citadel/ingest/uploads.py): a directory under `home`, or an
    S3-compatible bucket."""

    backend: Literal["local", "s3"] = Field(
        "local", description="local: files under `root`; s3: the bucket `bucket` through boto3 (pip extra `s3`).")
    root: Optional[Path] = Field(None, description="The local backend's directory (default <home>/objects).")
    bucket: Optional[str] = Field(
        None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", description="The s3 backend's bucket.")
    prefix: str = Field(
        "", pattern=r"^([A-Za-z0-9._=-]{1,200}/){0,8}$",
        description="Key prefix inside the bucket, ending in '/' (empty: the bucket's root).")
    endpoint_url: Optional[str] = Field(
        None, pattern=r"^https?://[^\s/]{1,253}(/[^\s]{0,200})?$",
        description="An S3-compatible server's URL (MinIO, Ceph, a cloud's S3 API); None: AWS S3. Credentials "
                    "come from the standard AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, a role).")
    region: Optional[str] = Field(None, max_length=64, description="The bucket's region (None: the AWS default).")

    @model_validator(mode="after")
    def _s3_needs_a_bucket(self) -> "ObjectStoreConfig":
        if self.backend == "s3" and not self.bucket:
            raise ValueError("objects.backend 's3' needs objects.bucket")
        return self


class JobsConfig(_Section):
    """Durable ingestion jobs (citadel/ingest/runner.py): an upload is queued in the catalog and a job
    runner works on it under a lease it renews; a runner that stops renewing loses the job to another."""

    lease_s: float = Field(
        60.0, gt=0, le=3_600, description="How long a runner's claim on a job lasts unless renewed (it renews every "
        "third of it while it works); a job whose runner died is taken over this long after its last renewal.")
    poll_s: float = Field(
        1.0, gt=0, le=60, description="How soon an idle runner looks for queued jobs again; twice as long each time "
        "it finds none, up to a third of the lease (an upload to the same process wakes it at once).")
    max_attempts: int = Field(
        3, ge=1, le=100, description="Runs a job gets (each takeover or retry is one); past them it fails with the "
        "reason of its last attempt.")
    ray_min_bytes: int = Field(
        16 * 1024 * 1024, ge=0, description="Uploads of at least this many bytes run through the Ray Data pipeline "
        "(indexing/pipeline.py) where the runner has Ray; smaller ones run in the runner's process.")
    embedded_runner: bool = Field(
        True, description="Run a job runner thread in each serving process (tests; gateway replicas, which share "
        "the queue through the leases); off where the deployment's runner actor (indexing/job_runner.py, which also "
        "sends large uploads through Ray Data) works on the queue instead.")


class SignalsConfig(_Section):
    """Signals without labels (DESIGN.md §11, citadel/quality/signals.py): the metrics that show bad
    answers nobody labelled, and `citadel quality report`."""

    rephrase_window_s: float = Field(
        120.0, ge=0.0, le=3_600.0, description="A question asked within this many seconds of the same user's "
        "previous one, in other words but close to it by embedding, is a rephrase (the first answer did not "
        "help): citadel_rephrase_total. 0 turns the check off.")
    rephrase_min_similarity: float = Field(
        0.55, ge=-1.0, le=1.0, description="The cosine between the two questions' embeddings a rephrase reaches. "
        "0.55 on the handbook questions with MiniLM (benchmarks/signal_thresholds.py): 54% of pairs asking the "
        "same fact in far-apart words count, 7% of pairs on another section of the same document and 1% on "
        "another document.")
    rephrase_max_users: int = Field(
        10_000, ge=1, le=10_000_000, description="Users whose last question (its vector and time) one process "
        "remembers for the rephrase check; the least recently asking are forgotten first.")
    low_best_score: float = Field(
        0.35, ge=-1.0, le=1.0, description="An answer whose best score (the question's cosine to its closest top "
        "passage, the gate's vector score) is under this counts as low: citadel_low_best_score_total. 0.35 with "
        "MiniLM: 3% of the handbook sets' answerable questions fall under it, 15% of the unanswerable ones.")


class GovernanceConfig(_Section):
    """Governance the catalog states of documents (citadel.types.Governance): which sensitivities and
    retention classes exist. A document names them only through the ACL file or the admin API."""

    sensitivities: list[str] = Field(
        default_factory=lambda: ["public", "internal", "confidential", "restricted"], min_length=1, max_length=64,
        description="The sensitivity levels a document may carry; a document stating another is a dead letter "
                    "(bad_metadata).")
    retention_classes: dict[str, float] = Field(
        default_factory=lambda: {"standard": 2_555.0, "short": 365.0},
        description="Retention class → days a document of it is kept, counted from its effective date (else "
                    "from when its version was published); past them `citadel purge-logs` withdraws it, "
                    "deleting every copy (citadel/catalog/retention.py). A document without a class is kept.")
    purge_batch: int = Field(100, ge=1, le=10_000, description="Most documents one retention purge withdraws (the "
                                                               "rest go at the next run).")

    @field_validator("retention_classes")
    @classmethod
    def _positive_days(cls, value: dict[str, float]) -> dict[str, float]:
        if any(days <= 0 for days in value.values()):
            raise ValueError("governance.retention_classes: every class keeps documents for more than 0 days")
        return value


class CitadelConfig(_Section):
    """The root. Every component receives the section it needs."""

    home: Path = Field(Path("./var"), description="Data directory (catalog, partitions).")
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    index: IndexConfig = Field(default_factory=IndexConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    answer: AnswerConfig = Field(default_factory=AnswerConfig)
    ingest_pipeline: IngestPipelineConfig = Field(default_factory=IngestPipelineConfig)
    objects: ObjectStoreConfig = Field(default_factory=ObjectStoreConfig)
    jobs: JobsConfig = Field(default_factory=JobsConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    identity: IdentityConfig = Field(default_factory=IdentityConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)
    resilience: ResilienceConfig = Field(default_factory=ResilienceConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    signals: SignalsConfig = Field(default_factory=SignalsConfig)
    governance: GovernanceConfig = Field(default_factory=GovernanceConfig)

    @property
    def runs_path(self) -> Path:
        """The SQLite file of runs and conversations when Redis is not configured."""
        return self.home / "runs.sqlite"

    @property
    def catalog_path(self) -> Path:
        return self.home / "catalog.sqlite"

    @property
    def partitions_dir(self) -> Path:
        return self.home / "partitions"

    @property
    def pauses_path(self) -> Path:
        """The SQLite file of the pause switch (tools and the model, per tenant or everywhere)."""
        return self.home / "pauses.sqlite"

    @property
    def secrets_dir(self) -> Path:
        return self.home / "secrets"

    @property
    def metrics_multiprocess_path(self) -> Path | None:
        """serving.metrics_multiprocess_dir, a relative one under the home (None: off)."""
        chosen = self.serving.metrics_multiprocess_dir
        return None if chosen is None else self.home / chosen

    @property
    def service_keys_path(self) -> Path:
        return self.identity.service_keys_file or self.secrets_dir / "service_keys.json"

    @property
    def credentials_path(self) -> Path:
        return self.identity.credentials_file or self.secrets_dir / "credentials.json"


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
        elif rest == "redis_url":  # the conventional name (DESIGN.md §7) for state.redis_url
            tree.setdefault("state", {})["redis_url"] = value
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
