"""The ingestion stages as plain functions, shared by the in-process Ingestor and Ray Data.

parse+chunk one source → a PreparedDocument, a FileOutcome (unchanged / skipped) or a DeadLetter;
embed a batch of rows, isolating a failing document; plan which tenants build together; build a
tenant's new segment beside the published one; verify it; publish it with the catalog's pointer
switch. `citadel/ingest/local.py` runs them in one process, `indexing/` runs them on Ray Data: both call
this module, so the two paths produce the same chunk ids, vectors and published documents.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from citadel.catalog.base import Publisher, LatestVersion, StagedVersion, decide_next_version
from citadel.chunking import chunk_document
from citadel.config import CitadelConfig, GovernanceConfig, IndexConfig
from citadel.embedding.base import Embedder, TokenCounter
from citadel.embedding.factory import make_token_counter
from citadel.errors import CitadelError, PublishConflict, ReembedRequired
from citadel.ingest.sources import (
    TENANT_WIDE_GROUP,
    TRUSTED_FRONT_MATTER_KEYS,
    AclSpec,
    DocumentSource,
    FileOutcome,
    TrustedFields,
    is_published_status,
)
from citadel.locks import file_lock
from citadel.parsing import OcrSettings
from citadel.resilience.crash_points import BEFORE_PUBLISH, fault_point
from citadel.segments.build import SegmentSpec, build_delta_segment, build_segment, choose_tier, read_chunk_table
from citadel.segments.compaction import RebuildReason, live_mask, model_changed, plan_publish, read_stack
from citadel.segments.layout import CHUNKS, VECTORS, prune_segments, stack_of, tenant_root
from citadel.segments.manifest import SegmentKind
from citadel.segments.partition import Partition
from citadel.segments.tiering import TierStanding
from citadel.segments.verify import verify_segment
from citadel.types import Chunk, DocumentMeta, Governance, content_hash

PROBES_PER_SEGMENT = 3
LOCK_FILE = ".lock"


# ----------------------------------------------------------------------------------- parse + chunk
@dataclass
class PreparedDocument:
    """A parsed, chunked document version waiting for its vectors."""

    meta: DocumentMeta
    version: int
    doc_hash: str
    chunks: list[Chunk]
    source: str
    vectors: np.ndarray | None = None  # (len(chunks), dim) once embedded

    def outcome(self) -> FileOutcome:
        return FileOutcome(self.source, self.meta.document_id, "published", version=self.version,
                           chunks=len(self.chunks))

    def staged(self) -> StagedVersion:
        return StagedVersion(self.meta, self.version, self.doc_hash, tuple(c.chunk_id for c in self.chunks),
                             tuple(c.content_hash for c in self.chunks))


@dataclass(frozen=True)
class DeadLetter:
    """A document that failed, with what a replay needs: where it is, who may read it, the trusted
    fields its job stated and whether that job trusted front matter (a replay decides the same)."""

    source: str
    document_id: str
    groups: tuple[str, ...]
    code: str
    reason: str
    fields: TrustedFields = TrustedFields()
    trust_front_matter: bool = False

    def meta(self) -> dict[str, Any]:
        return replay_meta(self.document_id, self.groups, self.fields, self.trust_front_matter)


def replay_meta(document_id: str, groups: Sequence[str], fields: TrustedFields,
                trust_front_matter: bool) -> dict[str, Any]:
    """A dead letter's record: what a replay needs to ingest the document as its job would have."""
    meta: dict[str, Any] = {"document_id": document_id, "groups": list(groups)}
    if fields.to_dict():
        meta["fields"] = fields.to_dict()
    if trust_front_matter:
        meta["trust_front_matter"] = True
    return meta


def resolved_fields(meta: DocumentMeta) -> TrustedFields:
    """The trusted fields a prepared document ended with (its status was approved): a replay of it
    states them outright, whatever the original job trusted."""
    return TrustedFields(owner=meta.owner, effective_date=meta.effective_date, supersedes=meta.supersedes,
                         governance=meta.governance)


def replayed_fields(meta: Mapping[str, Any]) -> tuple[TrustedFields, bool]:
    """(trusted fields, trust front matter) of a dead letter's record (`replay_meta`)."""
    return TrustedFields.from_mapping(meta.get("fields") or {}), bool(meta.get("trust_front_matter"))


PrepareResult = PreparedDocument | FileOutcome | DeadLetter


class VersionOracle(Protocol):
    """Decides a document's next version: the catalog itself, or a snapshot of it."""

    def next_version(self, tenant_id: str, document_id: str, content_hash: str,
                     requested: int | None = None) -> tuple[int, bool]: ...


class VersionSnapshot:
    """The catalog's latest versions frozen at job start, so parse workers need no catalog connection.

    A concurrent job on the same tenant is caught at publish time (`publish_built` refuses when the
    published segment moved), so a stale snapshot can never publish.
    """

    def __init__(self, latest: Mapping[tuple[str, str], LatestVersion]):
        self._latest = dict(latest)

    @classmethod
    def from_catalog(cls, catalog: Publisher, tenant_ids: Sequence[str]) -> "VersionSnapshot":
        return cls(catalog.latest_versions(list(tenant_ids)))

    def next_version(self, tenant_id: str, document_id: str, content_hash: str,
                     requested: int | None = None) -> tuple[int, bool]:
        return decide_next_version(document_id, self._latest.get((tenant_id, document_id)), content_hash, requested)


def prepare_document(tenant_id: str, source_file: DocumentSource, acl: AclSpec, config: CitadelConfig,
                     versions: VersionOracle, requested_version: int | None = None) -> PrepareResult:
    """Parse and chunk one source. Never raises for a bad document: it becomes a DeadLetter.

    Identity and permissions come from the job (module docstring of citadel.ingest.sources): the source's
    id, the ACL spec's groups, the source's trusted fields, `requested_version` (a manifest's). The
    file's front matter gives its title only, unless the job trusts it (`source_file.trust_front_matter`,
    an operator's directory ingest); even then what the job states wins over what the file says.
    """
    groups = acl.groups_for(source_file.document_id, source_file.source)
    fields = source_file.fields
    trust_front_matter = source_file.trust_front_matter
    try:
        ocr = OcrSettings.from_config(config.ingest.ocr, replay=source_file.replay)
        parsed, raw_hash = source_file.load(config.ingest.max_file_bytes, ocr)
        front = trusted_front_matter(parsed.metadata) if trust_front_matter else {}
        fields = fields.over(TrustedFields.from_mapping(front))
        meta = document_meta(tenant_id, source_file, parsed.title, front, acl, fields)
        check_governance_names(meta.governance, config.governance)
        groups = meta.groups
        if not is_published_status(fields.status, config.ingest.published_statuses):
            return FileOutcome(source_file.source, meta.document_id, "skipped", code="not_approved",
                               reason=f"status is {fields.status!r}; published statuses are "
                                      f"{config.ingest.published_statuses}")
        # What a version publishes: the text, who may read it, and the catalog's facts about it. A
        # correction of those facts alone (an effective date set, an owner changed) is a new version,
        # not "unchanged": it is what a reviewer's fix of a conflict looks like (citadel/reviews/tasks.py).
        doc_hash = content_hash(raw_hash + repr(sorted(meta.groups)) + repr(
            (meta.title, meta.owner, meta.visibility, meta.effective_date, meta.supersedes))
            + governance_hash_part(meta.governance))
        requested = requested_version if requested_version is not None else _int_or_none(front.get("version"))
        version, unchanged = versions.next_version(tenant_id, meta.document_id, doc_hash, requested)
        if unchanged:
            return FileOutcome(source_file.source, meta.document_id, "unchanged", version=version)
        tokens = make_token_counter(config.embedding)
        chunks = chunk_document(parsed, tenant_id=tenant_id, document_id=meta.document_id, version=version,
                                max_tokens=chunk_token_limit(config, tokens),
                                overlap_tokens=config.chunking.overlap_tokens, title_override=meta.title,
                                count=tokens.count_tokens)
        chunks = [dataclasses.replace(c, governance=meta.governance) for c in chunks if c.has_location]
        if not chunks:
            raise CitadelError("the document produced no located chunks", code="no_chunks")
    except CitadelError as error:
        return DeadLetter(source_file.source, source_file.document_id, tuple(groups), error.code, str(error),
                          source_file.fields, trust_front_matter)
    except (OSError, ValueError) as error:  # unreadable file, bad metadata
        return DeadLetter(source_file.source, source_file.document_id, tuple(groups), "unreadable",
                          f"{type(error).__name__}: {error}", source_file.fields, trust_front_matter)
    return PreparedDocument(meta, version, doc_hash, chunks, source_file.source)


def chunk_token_limit(config: CitadelConfig, tokens: TokenCounter) -> int:
    """The most tokens one embedded chunk text may hold: the model's window, or the configured cap
    when it is smaller (a bigger one would only be truncated by the model)."""
    cap = config.chunking.max_tokens
    return tokens.max_tokens if cap is None else min(cap, tokens.max_tokens)


def governance_hash_part(governance: Governance) -> str:
    """What governance adds to a version's hash: nothing when unset (so versions hashed before it
    existed stay unchanged), else its fields (a new policy revision or class is a new version)."""
    stated = {k: v for k, v in governance.to_dict().items() if v}
    return repr(sorted(stated.items())) if stated else ""


def check_governance_names(governance: Governance, config: GovernanceConfig) -> None:
    """A sensitivity and a retention class must be ones the deployment defines (a typo would otherwise
    never be purged, or never be recognised as sensitive)."""
    if governance.sensitivity is not None and governance.sensitivity not in config.sensitivities:
        raise CitadelError(f"sensitivity {governance.sensitivity!r} is not one of {config.sensitivities}",
                           code="bad_metadata")
    if governance.retention_class is not None and governance.retention_class not in config.retention_classes:
        raise CitadelError(f"retention class {governance.retention_class!r} is not one of "
                           f"{sorted(config.retention_classes)}", code="bad_metadata")


def trusted_front_matter(front: dict[str, Any]) -> dict[str, Any]:
    """The front-matter keys a trusting job may take identity and permissions from."""
    return {key: front[key] for key in TRUSTED_FRONT_MATTER_KEYS if key in front}


def document_meta(tenant_id: str, source_file: DocumentSource, title: str | None, front: dict[str, Any],
                  acl: AclSpec, fields: TrustedFields | None = None) -> DocumentMeta:
    """The document's catalog record. `front` is trusted front matter ({} unless the job trusts
    it): its id wins over the source's, its groups over the ACL spec's. `fields` are the trusted
    owner, effective date and predecessor."""
    fields = fields or source_file.fields
    document_id = str(front.get("id") or source_file.document_id)
    # Governance is the catalog's alone: the job's stated fields, else the ACL spec's; never front matter.
    governance = fields.governance.over(acl.governance_for(document_id, source_file.source))
    if ":" in document_id:
        raise CitadelError(f"document id {document_id!r} may not contain ':'", code="bad_metadata")
    front_groups = front.get("groups")
    if front_groups:
        groups = tuple(str(g) for g in (front_groups if isinstance(front_groups, list) else [front_groups]))
    else:
        groups = acl.groups_for(document_id, source_file.source)
    if fields.supersedes == document_id:
        raise CitadelError(f"document {document_id!r} cannot supersede itself", code="bad_metadata")
    visibility = "tenant" if TENANT_WIDE_GROUP in groups else "groups"
    return DocumentMeta(
        tenant_id=tenant_id,
        document_id=document_id,
        title=str(title or document_id),
        source=source_file.source,
        owner=fields.owner,
        visibility=visibility,
        effective_date=fields.effective_date,
        supersedes=fields.supersedes,
        groups=tuple(sorted(g for g in groups if g != TENANT_WIDE_GROUP)),
        governance=governance,
    )


def meta_to_json(meta: DocumentMeta) -> str:
    """DocumentMeta as JSON, to travel between pipeline workers and the driver."""
    return json.dumps(dataclasses.asdict(meta), sort_keys=True)


def meta_from_json(text: str) -> DocumentMeta:
    data = json.loads(text)
    return DocumentMeta(**{**data, "groups": tuple(data.get("groups") or ()),
                           "governance": Governance.from_mapping(data.get("governance"))})


def _int_or_none(value: Any) -> int | None:
    """A front-matter `version` is honoured only when it is an integer: a document's own edition
    label ("1.1.4") is not Citadel's monotonic version, so it is ignored rather than refused."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


# ------------------------------------------------------------------------------------------ embed
@dataclass
class EmbedResult:
    """Vectors for every row (zeros where the owner failed) and the failed owners with reasons."""

    vectors: np.ndarray
    failures: dict[Hashable, str]


def embed_rows(embedder: Embedder, texts: Sequence[str], owners: Sequence[Hashable]) -> EmbedResult:
    """Embed a batch; if it fails, embed each owner's rows alone so one bad document loses only itself.

    `owners[i]` names the document row i belongs to. The happy path is one model call per batch.
    """
    texts = list(texts)
    try:
        return EmbedResult(embed_checked(embedder, texts), {})
    except Exception as error:  # a model failure must not lose the batch
        if len(set(owners)) <= 1:
            return EmbedResult(np.zeros((len(texts), embedder.dim), dtype=np.float32),
                               {owner: str(error) for owner in owners})
    vectors = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    failures: dict[Hashable, str] = {}
    for owner, rows in _rows_by_owner(owners).items():
        try:
            vectors[rows] = embed_checked(embedder, [texts[row] for row in rows])
        except Exception as error:
            failures[owner] = str(error)
    return EmbedResult(vectors, failures)


def embed_checked(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """One model call, with the shape checked (a wrong shape would corrupt a segment silently)."""
    vectors = embedder.embed_passages(texts)
    if vectors.shape != (len(texts), embedder.dim):
        raise CitadelError(f"embedder returned shape {vectors.shape}", code="embed_error")
    return np.asarray(vectors, dtype=np.float32)


def _rows_by_owner(owners: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    rows: dict[Hashable, list[int]] = {}
    for row, owner in enumerate(owners):
        rows.setdefault(owner, []).append(row)
    return rows


def cast_embeddings(vectors: np.ndarray, dtype: str) -> np.ndarray:
    """Embeddings in the configured landing dtype (float16 halves staged tables and object-store traffic)."""
    return np.ascontiguousarray(vectors, dtype=np.dtype(dtype))


# --------------------------------------------------------------------------- partition assignment
def estimated_tier(tenant_id: str, chunk_count: int, config: IndexConfig) -> str:
    """The tier a tenant of about this size lands in (the build decides from the exact count)."""
    return choose_tier(tenant_id, chunk_count, config)


def plan_build_groups(chunk_counts: Mapping[str, int], config: IndexConfig, pack_chunks: int) -> list[list[str]]:
    """Which tenants build in one task. A tenant with its own ANN index (hot or cold) builds alone:
    those builds take minutes and run in parallel. Tiny tenants (exact search, a BM25 index, seconds)
    share a task up to `pack_chunks` chunks, so a thousand of them do not cost a thousand tasks;
    each still gets its own segment (small tenants share a shard, never a graph)."""
    groups: list[list[str]] = []
    pack: list[str] = []
    packed = 0
    by_size = sorted(chunk_counts.items(), key=lambda item: (-item[1], item[0]))
    for tenant_id, count in by_size:
        if estimated_tier(tenant_id, count, config) != "tiny":
            groups.append([tenant_id])
            continue
        if pack and packed + count > pack_chunks:
            groups.append(pack)
            pack, packed = [], 0
        pack.append(tenant_id)
        packed += count
    if pack:
        groups.append(pack)
    return groups


# ------------------------------------------------------------------------------------------ build
@dataclass(frozen=True)
class BuiltSegment:
    """A complete, not yet published segment, and the published segment it was built on.

    `rows` and `first_new_row` count across the stack: a delta's rows follow its base's.
    """

    tenant_id: str
    path: Path
    tier: str
    rows: int
    first_new_row: int
    based_on: str | None
    seconds: float
    kind: SegmentKind = SegmentKind.BASE
    rebuild_reason: RebuildReason | None = None  # why a base was (re)built instead of a delta

    @property
    def segment_id(self) -> str:
        return self.path.name


def live_versions(catalog: Publisher, tenant_id: str, replaced: set[str]) -> dict[str, int]:
    """Published versions of the tenant's documents that this job does not replace (they are kept)."""
    return {d.document_id: d.published_version for d in catalog.list_documents(tenant_id)
            if d.status == "published" and d.document_id not in replaced and d.published_version is not None}


def kept_rows(root: Path, previous: str | None,
              live: Mapping[str, int]) -> tuple[pa.Table | None, np.ndarray | None]:
    """Rows of the published stack (base, then delta) that stay: the live versions of documents not
    being replaced. Building a base from them is the compaction: superseded and withdrawn rows go."""
    if previous is None:
        return None, None
    stack = stack_of(root, previous)
    table = pa.concat_tables([read_chunk_table(root / s / CHUNKS) for s in stack])
    vectors = np.concatenate([np.load(root / s / VECTORS) for s in stack])
    mask = live_mask(table.column("document_id").to_pylist(), table.column("version").to_pylist(), live)
    return table.filter(pa.array(mask)), vectors[mask]


def build_tenant_segment(partitions_dir: Path, tenant_id: str, new_table: pa.Table, new_vectors: np.ndarray,
                         previous: str | None, live: Mapping[str, int], index_config: IndexConfig,
                         model_id: str, dim: int, build_threads: int | None = None,
                         force_rebuild: bool = False, standing: TierStanding | None = None) -> BuiltSegment:
    """Write the tenant's next segment beside the published one: a delta over the published base when
    the compaction policy allows it (citadel.segments.compaction), else a new base of the kept and new rows.

    Kept rows keep their stored vectors, so they must come from this model: after a model change the
    tenant is re-embedded first (citadel.ingest.reembed), and a build that would mix models is refused.
    `standing`: the tenant's traffic and tier entry (citadel.segments.tiering), so this publish or
    compaction is where the tenant moves tier; None: traffic moves nothing."""
    started = time.perf_counter()
    root = tenant_root(partitions_dir, tenant_id)
    new_vectors = np.asarray(new_vectors, dtype=np.float32)
    stack = read_stack(root, previous)
    if model_changed(stack, model_id, dim) and live:
        raise ReembedRequired(f"tenant {tenant_id!r} is embedded with {stack.base_model} ({stack.base_dim}-d), "
                              f"not {model_id} ({dim}-d): run `citadel reembed --tenant {tenant_id}` first")
    plan = plan_publish(stack, live, new_table.num_rows, tenant_id, model_id, dim, index_config, force_rebuild,
                        standing)
    spec = SegmentSpec(tenant_id, plan.tier, model_id, dim)
    if plan.kind is SegmentKind.DELTA:
        table, vectors = _with_new_rows(plan.kept_delta_table, plan.kept_delta_vectors, new_table, new_vectors)
        path = build_delta_segment(root, spec, stack.base_id, stack.base_rows, plan.tombstones, table, vectors)
        rows = stack.base_rows + table.num_rows
        return BuiltSegment(tenant_id, path, plan.tier, rows, rows - new_table.num_rows, previous,
                            time.perf_counter() - started, SegmentKind.DELTA)
    kept_table, kept_vectors = kept_rows(root, previous, live)
    table, vectors = _with_new_rows(kept_table, kept_vectors, new_table, new_vectors)
    path = build_segment(root, spec, table, vectors, index_config, build_threads=build_threads)
    return BuiltSegment(tenant_id, path, plan.tier, table.num_rows, table.num_rows - new_table.num_rows, previous,
                        time.perf_counter() - started, SegmentKind.BASE, plan.rebuild_reason)


def _with_new_rows(kept_table: pa.Table | None, kept_vectors: np.ndarray | None, new_table: pa.Table,
                   new_vectors: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    if kept_table is None:
        return new_table, new_vectors
    return (pa.concat_tables([kept_table, new_table.cast(kept_table.schema)]),
            np.concatenate([np.asarray(kept_vectors, dtype=np.float32), new_vectors]))


def probe_rows(built: BuiltSegment) -> list[int]:
    """A few of the new rows, spread out: each must be found by its own vector before publishing.
    A compaction adds no rows, so it probes rows of the whole segment instead."""
    first = built.first_new_row if built.first_new_row < built.rows else 0
    step = max(1, (built.rows - first) // PROBES_PER_SEGMENT)
    return list(range(first, built.rows, step))[:PROBES_PER_SEGMENT]


def verify_built(built: BuiltSegment) -> Partition:
    """Counts, checksums and probe queries (DESIGN.md §3); raises VerificationFailed."""
    return verify_segment(built.path, built.rows, probe_rows(built))


def staged_from_partition(partition: Partition, first_new_row: int,
                          documents: Mapping[str, tuple[DocumentMeta, int, str]]) -> list[StagedVersion]:
    """StagedVersions for the new rows of a verified segment; `documents` maps id → (meta, version, hash).

    Taking chunk ids from the segment itself means the manifest records exactly what was built.
    """
    table = partition.table.slice(first_new_row)
    ids: dict[str, list[str]] = {}
    hashes: dict[str, list[str]] = {}
    for doc, chunk_id, chunk_hash in zip(table.column("document_id").to_pylist(),
                                         table.column("chunk_id").to_pylist(),
                                         table.column("content_hash").to_pylist()):
        ids.setdefault(doc, []).append(chunk_id)
        hashes.setdefault(doc, []).append(chunk_hash)
    missing = set(documents) - set(ids)
    if missing:
        raise CitadelError(f"segment lacks the chunks of {sorted(missing)[:5]}", code="verification_failed")
    return [StagedVersion(meta, version, doc_hash, tuple(ids[doc]), tuple(hashes[doc]))
            for doc, (meta, version, doc_hash) in documents.items()]


def publish_built(catalog: Publisher, partitions_dir: Path, built: BuiltSegment, staged: list[StagedVersion],
                  job_id: str) -> None:
    """The atomic pointer switch (one catalog transaction), then drop segments no pointer names.

    Call it holding the tenant lock. The previous segment is kept for readers still holding it.
    """
    current = catalog.published_segment(built.tenant_id)
    if current != built.based_on:
        raise PublishConflict(f"tenant {built.tenant_id!r} moved from segment {built.based_on} to {current} "
                              "during the build; re-run the job")
    fault_point(BEFORE_PUBLISH)
    catalog.publish(built.tenant_id, built.segment_id, built.tier, staged, job_id)
    prune_segments(partitions_dir, built.tenant_id, keep={built.segment_id, built.based_on} - {None})


@contextmanager
def tenant_lock(partitions_dir: Path, tenant_id: str) -> Iterator[None]:
    """One build-and-publish per tenant at a time, across processes."""
    lock_dir = tenant_root(partitions_dir, tenant_id)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(lock_dir / LOCK_FILE):
        yield
