"""Ray Data stages: plain callable classes over pyarrow batches, with no Ray import.

Each wraps a shared stage of `citadel.ingest.steps` (the in-process Ingestor calls the same functions):

    document records ──ParseChunkStage──▶ chunk rows ──EmbedStage──▶ + vector ──AssignPartitionStage──▶ outcomes
                                                                                 (chunk rows staged per tenant)

Rows carry their document's outcome (`status`, `code`, `reason`), so a document that produced no
chunks travels as one marker row and a document whose embedding fails is marked, never dropped
silently: the driver turns the outcome rows into the job report and the dead-letter table.
Models load in the constructor, once per actor; `__call__` is pure work on one batch.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from citadel.config import CitadelConfig, EmbeddingConfig, IndexConfig
from citadel.errors import CitadelError
from citadel.embedding.factory import make_embedder
from citadel.segments.build import CHUNK_SCHEMA, chunks_to_table
from citadel.segments.tiering import TierStanding
from citadel.ingest.objects import ObjectStore, make_object_store
from citadel.ingest.sources import AclSpec, DocumentSource, FileOutcome, SourceFile, TrustedFields
from citadel.ingest.steps import (
    BuiltSegment,
    DeadLetter,
    PreparedDocument,
    PrepareResult,
    VersionSnapshot,
    build_tenant_segment,
    cast_embeddings,
    embed_rows,
    meta_to_json,
    prepare_document,
    replay_meta,
    resolved_fields,
)
from citadel.ingest.uploads import StoredRawFile, stored_version
from citadel.types import embed_text_for

PUBLISHED = "published"
FAILED = "failed"
EMBED_ERROR = "embed_error"
NO_CHUNK = -1  # ordinal of the marker row of a document that produced no chunks
VECTOR = "vector"
STAGED_FILE_DIGEST_CHARS = 24

# Input: one row per document.
RECORD_SCHEMA = pa.schema([
    ("doc_order", pa.int64()),  # position in the job's input: new rows are built in this order
    ("tenant_id", pa.string()),
    ("document_id", pa.string()),
    ("source", pa.string()),  # the file to read; also the source recorded in the catalog
    ("groups", pa.list_(pa.string())),  # null: the job's ACL spec decides
    ("version", pa.int32()),  # null: the catalog decides (or trusted front matter)
    # Trusted fields (citadel.ingest.sources.TrustedFields); null: unset.
    ("owner", pa.string()),
    ("status", pa.string()),
    ("effective_date", pa.string()),
    ("supersedes", pa.string()),
    # Governance (citadel.types.Governance), as the job's requester or ACL spec states it; null: unset.
    ("policy_id", pa.string()),
    ("policy_revision", pa.string()),
    ("sensitivity", pa.string()),
    ("retention_class", pa.string()),
    ("trust_front_matter", pa.bool_()),  # the operator's --trust-front-matter (null: no)
    ("replay", pa.bool_()),  # a dead letter's replay: OCR gets the longer budget (null: no)
])

# Document-level columns repeated on each chunk row (and alone on a marker row).
_DOCUMENT_FIELDS = [
    ("doc_order", pa.int64()),
    ("tenant_id", pa.string()),
    ("status", pa.string()),
    ("code", pa.string()),
    ("reason", pa.string()),
    ("doc_hash", pa.string()),
    ("meta_json", pa.string()),
    ("doc_chunks", pa.int32()),
    ("replay_json", pa.string()),  # a dead letter's record: id, groups, trusted fields (stages.replay_meta)
]
ROW_SCHEMA = pa.schema(_DOCUMENT_FIELDS + list(CHUNK_SCHEMA) + [("parse_s", pa.float64())])

# What AssignPartitionStage stages per tenant: the chunk table plus build order and vectors.
STAGED_COLUMNS = ["doc_order"] + CHUNK_SCHEMA.names + [VECTOR]

# Output of the last stage: one row per document per batch.
OUTCOME_SCHEMA = pa.schema([
    ("doc_order", pa.int64()),
    ("tenant_id", pa.string()),
    ("document_id", pa.string()),
    ("source", pa.string()),
    ("status", pa.string()),
    ("code", pa.string()),
    ("reason", pa.string()),
    ("version", pa.int32()),
    ("doc_hash", pa.string()),
    ("meta_json", pa.string()),
    ("replay_json", pa.string()),
    ("doc_chunks", pa.int32()),
    ("chunks", pa.int32()),  # rows of this document in this batch
    ("file", pa.string()),  # staged Parquet file holding them
    ("parse_s", pa.float64()),
    ("embed_s", pa.float64()),
    ("load_s", pa.float64()),  # embed actors' model loading, reported with their first batch
    ("write_s", pa.float64()),
])


def vector_type(dtype: str, dim: int) -> pa.DataType:
    return pa.list_(pa.float16() if dtype == "float16" else pa.float32(), dim)


def vectors_to_arrow(vectors: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])


def arrow_to_vectors(column: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    """(n, dim) float32 from a fixed-size-list column of float16 or float32."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], type=column.type)
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float32).reshape(-1, dim)


def partition_dir_name(tenant_id: str) -> str:
    """A filesystem-safe staging directory per tenant (tenant ids are not path-safe by contract)."""
    return hashlib.sha256(tenant_id.encode()).hexdigest()[:16]


def _replay_json(meta: dict[str, Any]) -> str:
    return json.dumps(meta)


# ----------------------------------------------------------------------------------- parse+chunk
class ParseChunkStage:
    """Document records → chunk rows (or one marker row per document that produced none)."""

    def __init__(self, config: CitadelConfig, versions: VersionSnapshot, acl: AclSpec | None = None):
        self._config = config
        self._versions = versions
        self._acl = acl or AclSpec()
        self._objects: ObjectStore | None = None  # opened on the first upload's raw key

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        columns: dict[str, list] = {name: [] for name in ROW_SCHEMA.names}
        for record in batch.to_pylist():
            acl = self._acl if record["groups"] is None else AclSpec.from_groups(record["groups"])
            source = self._source(record)
            result = prepare_document(record["tenant_id"], source, acl, self._config, self._versions,
                                      record["version"])
            _append_result(columns, record, result)
        rows = len(columns["doc_order"])
        columns["parse_s"] = [(time.perf_counter() - started) / max(rows, 1)] * rows
        return pa.table(columns, schema=ROW_SCHEMA)

    def _source(self, record: dict[str, Any]) -> DocumentSource:
        """The record's document: a file by its path, or an upload's raw file by its key (read from
        the deployment's object store, which every worker reaches)."""
        fields = TrustedFields.from_mapping(record)
        trust, replay = bool(record["trust_front_matter"]), bool(record["replay"])
        if stored_version(record["tenant_id"], record["document_id"], record["source"]) is not None:
            if self._objects is None:
                self._objects = make_object_store(self._config)
            return StoredRawFile(self._objects, record["source"], record["document_id"], fields, trust, replay)
        return SourceFile(Path(record["source"]), record["document_id"], record["source"], fields, trust,
                          replay=replay)


def _append_result(columns: dict[str, list], record: dict[str, Any], result: PrepareResult) -> None:
    if isinstance(result, PreparedDocument):
        chunk_columns = chunks_to_table(result.chunks).to_pydict()
        document = {"status": PUBLISHED, "code": None, "reason": None, "doc_hash": result.doc_hash,
                    "meta_json": meta_to_json(result.meta), "doc_chunks": len(result.chunks),
                    "replay_json": _replay_json(replay_meta(result.meta.document_id, result.meta.groups,
                                                            resolved_fields(result.meta), False))}
        _extend(columns, record, document, chunk_columns, len(result.chunks))
        return
    if isinstance(result, DeadLetter):
        document = {"status": FAILED, "code": result.code, "reason": result.reason,
                    "replay_json": _replay_json(result.meta())}
        marker = _marker(result.document_id, result.source, None)
    else:  # FileOutcome: unchanged or skipped
        document = {"status": result.status, "code": result.code, "reason": result.reason}
        marker = _marker(result.document_id, result.source, result.version)
    document = {"doc_hash": None, "meta_json": None, "doc_chunks": 0, "replay_json": None, **document}
    _extend(columns, record, document, marker, 1)


def _marker(document_id: str, source: str, version: int | None) -> dict[str, list]:
    values = {name: [None] for name in CHUNK_SCHEMA.names}
    values.update(document_id=[document_id], source=[source], version=[version], ordinal=[NO_CHUNK])
    return values


def _extend(columns: dict[str, list], record: dict[str, Any], document: dict[str, Any],
            chunk_columns: dict[str, list], rows: int) -> None:
    columns["doc_order"].extend([record["doc_order"]] * rows)
    columns["tenant_id"].extend([record["tenant_id"]] * rows)
    for name, value in document.items():
        columns[name].extend([value] * rows)
    for name in CHUNK_SCHEMA.names:
        columns[name].extend(chunk_columns[name])


# ------------------------------------------------------------------------------------------ embed
class EmbedStage:
    """Adds the `vector` column; a document whose embedding fails is marked failed (embed_error).

    The model loads here, once per actor: on CPU with an explicit torch thread count (the actor's
    share of the machine), on a GPU (`device="cuda"`) in fp16.
    """

    def __init__(self, embedding: EmbeddingConfig, dtype: str, torch_threads: int, device: str = "cpu"):
        started = time.perf_counter()
        on_gpu = device.startswith("cuda")
        self._embedder = make_embedder(embedding, device=device, fp16=on_gpu, torch_threads=torch_threads)
        self._dtype = dtype
        # Reported once, with the actor's first batch: the job report separates model loading from work.
        self._unreported_load_s = time.perf_counter() - started

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        status = batch.column("status").to_pylist()
        rows = [row for row, value in enumerate(status) if value == PUBLISHED]
        vectors = np.zeros((batch.num_rows, self._embedder.dim), dtype=np.float32)
        if rows:
            picked = batch.take(pa.array(rows, type=pa.int64()))
            texts = [embed_text_for(header, text) for header, text in
                     zip(picked.column("context_header").to_pylist(), picked.column("text").to_pylist())]
            owners = list(zip(picked.column("tenant_id").to_pylist(), picked.column("doc_order").to_pylist()))
            result = embed_rows(self._embedder, texts, owners)
            vectors[rows] = result.vectors
            if result.failures:
                batch = _mark_embed_failures(batch, result.failures)
        batch = batch.append_column(pa.field(VECTOR, vector_type(self._dtype, self._embedder.dim)),
                                    vectors_to_arrow(cast_embeddings(vectors, self._dtype)))
        seconds = (time.perf_counter() - started) / max(batch.num_rows, 1)
        batch = batch.append_column("embed_s", pa.array([seconds] * batch.num_rows, type=pa.float64()))
        load = [0.0] * batch.num_rows
        if load:
            load[0], self._unreported_load_s = self._unreported_load_s, 0.0
        return batch.append_column("load_s", pa.array(load, type=pa.float64()))


def _mark_embed_failures(batch: pa.Table, failures: dict) -> pa.Table:
    owners = list(zip(batch.column("tenant_id").to_pylist(), batch.column("doc_order").to_pylist()))
    status = batch.column("status").to_pylist()
    code = batch.column("code").to_pylist()
    reason = batch.column("reason").to_pylist()
    for row, owner in enumerate(owners):
        if owner in failures:
            status[row], code[row], reason[row] = FAILED, EMBED_ERROR, failures[owner]
    for name, values in (("status", status), ("code", code), ("reason", reason)):
        batch = batch.set_column(batch.schema.get_field_index(name), name, pa.array(values, type=pa.string()))
    return batch


# ---------------------------------------------------------------------------------- assign partition
class AssignPartitionStage:
    """Routes each chunk row to its tenant's partition: writes the batch's rows, split by tenant, as
    Parquet under `staging_dir/<tenant dir>/` and returns one outcome row per document.

    File names are a digest of the chunk ids they hold, so a retried task rewrites the same file
    instead of adding a duplicate.
    """

    def __init__(self, staging_dir: str):
        self._staging = Path(staging_dir)

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        publishable = pc.equal(batch.column("status"), PUBLISHED)
        files = self._write_partitions(batch.filter(publishable))
        outcomes = _document_outcomes(batch, files)
        seconds = (time.perf_counter() - started) / max(len(outcomes["doc_order"]), 1)
        outcomes["write_s"] = [seconds] * len(outcomes["doc_order"])
        return pa.table(outcomes, schema=OUTCOME_SCHEMA)

    def _write_partitions(self, rows: pa.Table) -> dict[str, str]:
        """tenant → staged file written for it."""
        files: dict[str, str] = {}
        tenants = rows.column("tenant_id")
        for tenant_id in pc.unique(tenants).to_pylist():
            part = rows.filter(pc.equal(tenants, tenant_id)).select(STAGED_COLUMNS)
            digest = hashlib.sha256("\n".join(part.column("chunk_id").to_pylist()).encode()).hexdigest()
            directory = self._staging / partition_dir_name(tenant_id)
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{digest[:STAGED_FILE_DIGEST_CHARS]}.parquet"
            tmp = path.with_suffix(".tmp")
            pq.write_table(part, tmp)
            tmp.replace(path)  # a reader never sees half a file
            files[tenant_id] = str(path)
        return files


def _document_outcomes(batch: pa.Table, files: dict[str, str]) -> dict[str, list]:
    """One row per (tenant, document) in the batch, with how many of its rows it held."""
    outcomes: dict[str, list] = {name: [] for name in OUTCOME_SCHEMA.names if name != "write_s"}
    index: dict[tuple[str, int], int] = {}
    data = batch.select(["doc_order", "tenant_id", "document_id", "source", "status", "code", "reason",
                         "version", "doc_hash", "meta_json", "replay_json", "doc_chunks", "ordinal",
                         "parse_s", "embed_s", "load_s"]).to_pydict()
    for row in range(batch.num_rows):
        key = (data["tenant_id"][row], data["doc_order"][row])
        if key not in index:
            index[key] = len(outcomes["doc_order"])
            for name in ("doc_order", "tenant_id", "document_id", "source", "status", "code", "reason", "version",
                         "doc_hash", "meta_json", "replay_json", "doc_chunks"):
                outcomes[name].append(data[name][row])
            outcomes["chunks"].append(0)
            outcomes["parse_s"].append(0.0)
            outcomes["embed_s"].append(0.0)
            outcomes["load_s"].append(0.0)
            published = data["status"][row] == PUBLISHED
            outcomes["file"].append(files.get(key[0]) if published else None)
        position = index[key]
        if data["ordinal"][row] != NO_CHUNK:
            outcomes["chunks"][position] += 1
        outcomes["parse_s"][position] += data["parse_s"][row]
        outcomes["embed_s"][position] += data["embed_s"][row]
        outcomes["load_s"][position] += data["load_s"][row]
    return outcomes


def outcome_to_file_outcome(row: dict[str, Any]) -> FileOutcome:
    return FileOutcome(row["source"], row["document_id"], row["status"], version=row["version"],
                       chunks=row["doc_chunks"] or 0, code=row["code"], reason=row["reason"])


# ------------------------------------------------------------------------------------------ build
@dataclass(frozen=True)
class TenantBuild:
    """What one tenant's segment build needs: its staged files and the published segment's state."""

    tenant_id: str
    files: tuple[str, ...]
    doc_orders: frozenset[int]  # this job's publishable documents; rows of any other are dropped
    previous: str | None
    live: dict[str, int]  # kept documents of the previous segment → their published version
    standing: TierStanding | None = None  # traffic and tier entry: the publish may move its tier


@dataclass(frozen=True)
class BuildFailure:
    tenant_id: str
    code: str
    reason: str


def staged_tenant_rows(build: TenantBuild, dim: int) -> tuple[pa.Table, np.ndarray]:
    """The tenant's new chunk table and float32 vectors, in input order (document, then ordinal), so
    the segment's rows come out exactly as the in-process Ingestor lays them out."""
    table = pq.read_table(list(build.files))
    keep = pc.is_in(table.column("doc_order"), value_set=pa.array(sorted(build.doc_orders), type=pa.int64()))
    table = table.filter(keep).sort_by([("doc_order", "ascending"), ("ordinal", "ascending")])
    vectors = arrow_to_vectors(table.column(VECTOR), dim)
    return table.select(CHUNK_SCHEMA.names).cast(CHUNK_SCHEMA), vectors


def build_staged_tenant(build: TenantBuild, partitions_dir: str, index_config: IndexConfig, model_id: str,
                        dim: int, build_threads: int) -> BuiltSegment | BuildFailure:
    """Build one tenant's segment from its staged rows; a failure is returned, not raised, so the
    other tenants of the same task still build."""
    try:
        table, vectors = staged_tenant_rows(build, dim)
        return build_tenant_segment(Path(partitions_dir), build.tenant_id, table, vectors, build.previous,
                                    build.live, index_config, model_id, dim, build_threads=build_threads,
                                    standing=build.standing)
    except CitadelError as error:
        return BuildFailure(build.tenant_id, error.code, str(error))
    except (OSError, ValueError, RuntimeError) as error:  # disk full, a corrupt staged file, an index error
        return BuildFailure(build.tenant_id, "build_failed", f"{type(error).__name__}: {error}")


def build_tenant_group(builds: list[TenantBuild], partitions_dir: str, index_config: IndexConfig, model_id: str,
                       dim: int, build_threads: int) -> list[BuiltSegment | BuildFailure]:
    """Tenants sharing one build task (small tenants share a shard, each keeps its own index)."""
    return [build_staged_tenant(build, partitions_dir, index_config, model_id, dim, build_threads)
            for build in builds]
