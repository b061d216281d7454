"""The one place that composes Citadel's components from config (DESIGN.md §2).

The CLI, serving and the benchmark scripts all ask a `Wiring` for what they need — the catalog, the
embedder, the partition cache, the retriever, the answer service, an ingestor, the state stores, the
authenticator — so each is built one way, once per process, whoever asks.

A serving process passes its `Resilience` (breakers and drill faults): the query path's stages then
sit behind their guards. A stage served by another deployment arrives in `Stages` as a proxy that
implements the same Protocol, and is used instead of the local one (the split topology).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable

from citadel.config import CitadelConfig, load_config
from citadel.guardrails.log_masking import install_log_masking
from citadel.guardrails.personal import PATTERNS_ONLY
from citadel.tracing import configure_from_config

if TYPE_CHECKING:  # the role protocols; each is imported where its implementation is built
    from citadel.agent.budget import UserSpend
    from citadel.agent.orchestrator import RunDriver
    from citadel.agent.planner import Planner
    from citadel.answer.service import QueryVectorMemo
    from citadel.catalog.base import Catalog
    from citadel.embedding.base import Embedder, TextEmbedder
    from citadel.generation.base import Generator
    from citadel.guardrails.base import QuestionRouter
    from citadel.ingest.engine import IngestEngine
    from citadel.ingest.objects import ObjectStore
    from citadel.ingest.runner import JobRunner, Progress
    from citadel.reader.base import Reader
    from citadel.rerank.base import Reranker
    from citadel.resilience.guards import ResilientGenerator
    from citadel.retrieval.retriever import PassageRetriever
    from citadel.state.conversations import ConversationStore
    from citadel.state.runs import RunStore
    from citadel.tools.approvals import ApprovalStore
    from citadel.tools.pause import PauseSwitch


@dataclass
class Stages:
    """Stages served elsewhere (proxies to other deployments). Any field left None is built here."""

    embedder: TextEmbedder | None = None  # queries for retrieval and the gate
    retriever: PassageRetriever | None = None
    reranker: Reranker | None = None
    generator: Generator | None = None
    router: QuestionRouter | None = None
    memo: QueryVectorMemo | None = None  # the memo the (remote) retriever fills, for the gate
    # The run loop served elsewhere (the split topology's orchestrator deployment). Set, the runs
    # this process starts are driven there, not here.
    orchestrator: RunDriver | None = None


class Wiring:
    def __init__(self, config: CitadelConfig | None = None, *, config_path=None, resilience=None,
                 stages: Stages | None = None, clock: Callable[[], float] | None = None, in_replica: bool = False,
                 stage: str | None = None):
        """`resilience`: guard the query path (serving); `in_replica`/`stage`: size the embedder's
        threads for the Serve deployment it runs in; `clock`: identity and budgets on a fake clock."""
        self.config = config or load_config(config_path)
        configure_from_config(self.config)  # this process's spans go where the config says
        install_log_masking(PATTERNS_ONLY)  # its log lines without personal data (known names: `personal_data`)
        self.resilience = resilience
        self.stages = stages or Stages()
        self.clock = clock
        self.in_replica = in_replica
        self.stage = stage

    # ------------------------------------------------------------------ stores
    @cached_property
    def raw_catalog(self) -> Catalog:
        settings = self.config.catalog
        if settings.backend == "postgres":
            from citadel.catalog.postgres import PostgresCatalog

            return PostgresCatalog(settings.dsn, min_size=settings.pool_min_size, max_size=settings.pool_max_size,
                                   timeout_s=settings.pool_timeout_s)
        from citadel.catalog.sqlite import SQLiteCatalog

        return SQLiteCatalog(self.config.catalog_path)

    @cached_property
    def catalog(self) -> Catalog:
        """The catalog; in a serving process its query-path reads sit behind the catalog breaker and
        fail closed."""
        if self.resilience is None:
            return self.raw_catalog
        from citadel.resilience.guards import GuardedCatalog

        return GuardedCatalog(self.raw_catalog, self.resilience.guard("catalog"))

    def close(self) -> None:
        """Close the catalog if this runtime opened it (it opens on first use, so a runtime that never
        read it holds no connection): runtimes that share one home in turn close theirs."""
        if "catalog" in self.__dict__:
            self.catalog.close()

    @cached_property
    def state(self):
        from citadel.state.factory import make_state

        return make_state(self.config.state) if self.clock is None else make_state(self.config.state, self.clock)

    @cached_property
    def authenticator(self):
        from citadel.identity.authenticator import Authenticator

        if self.clock is None:
            return Authenticator.from_config(self.config)
        return Authenticator.from_config(self.config, self.clock)

    @cached_property
    def partitions(self):
        from citadel.retrieval.partitions import PartitionCache

        if self.resilience is None:
            return PartitionCache(self.catalog, self.config.partitions_dir)
        return PartitionCache(self.catalog, self.config.partitions_dir,
                              capacity=self.config.serving.tenants_per_replica)

    # ------------------------------------------------------------------ stages
    @cached_property
    def local_embedder(self) -> Embedder:
        """This process's embedding model. torch threads: the configured count, else the machine's
        cores shared among the stage's replicas (Ray would leave a fractional-CPU replica on one
        thread; replicas each taking every core oversubscribe the machine). A stage with a GPU share
        runs on CUDA in fp16."""
        from citadel.embedding.factory import make_embedder

        if self.resilience is None and not self.in_replica:
            return make_embedder(self.config.embedding)
        serving = self.config.serving
        settings = serving.deployments.get(self.stage or serving.topology)
        on_gpu = settings is not None and settings.num_gpus > 0
        replicas = settings.max_replicas if (self.in_replica and settings is not None) else 1
        threads = self.config.embedding.torch_threads or max(1, (os.cpu_count() or 1) // replicas)
        return make_embedder(self.config.embedding, device="cuda" if on_gpu else "cpu", fp16=on_gpu,
                             torch_threads=threads)

    @cached_property
    def embedder(self) -> TextEmbedder:
        """The query path's embedder: the local model or the embedder deployment, guarded in serving."""
        local = self.stages.embedder is None
        embedder = self.local_embedder if local else self.stages.embedder
        if self.resilience is None:
            return embedder
        from citadel.resilience.guards import GuardedEmbedder

        return GuardedEmbedder(embedder, self.resilience.guard("embedder", inject=local))

    @cached_property
    def memo(self) -> QueryVectorMemo:
        from citadel.answer.service import QueryVectorMemo

        return self.stages.memo or QueryVectorMemo(self.embedder)

    @cached_property
    def retriever(self) -> PassageRetriever:
        """ACL-scoped hybrid retrieval over the query-vector memo (so the answer gate reuses the
        query's vector); in serving, the drill's fault injector stands in front."""
        if self.stages.retriever is not None:
            return self.stages.retriever
        from citadel.retrieval.retriever import Retriever

        retriever = Retriever(self.catalog, self.partitions, self.memo, self.config.retrieval, self.config.index)
        if self.resilience is None:
            return retriever
        from citadel.resilience.guards import GuardedRetriever
        from citadel.retrieval.traffic import CountingRetriever

        # Where partitions are searched in serving, each search counts for its tenant's tier (traffic.py).
        return CountingRetriever(GuardedRetriever(retriever, self.resilience.guard("retriever")), self.traffic)

    @cached_property
    def traffic(self):
        """This process's per-tenant query counts, flushed to the catalog (citadel/retrieval/traffic.py)."""
        from citadel.retrieval.traffic import TrafficCounter

        return TrafficCounter(self.raw_catalog, self.config.index, self.clock or time.time)

    @cached_property
    def reader(self) -> Reader | None:
        """The one reader of this process (reranking, quoting, confirming the asked fact), loaded once
        and shared through a memo of recent scores; None when nothing configured reads it."""
        answer = self.config.answer
        if answer.reranker != "reader" and not answer.confirm:
            return None
        from citadel.reader.factory import make_reader
        from citadel.reader.memo import MemoReader

        return MemoReader(make_reader(answer))

    @cached_property
    def reranker(self) -> Reranker:
        from citadel.rerank.backends import make_reranker

        if self.stages.reranker is not None:
            return self._guarded_reranker(self.stages.reranker, inject=False)
        reader = self.reader if self.config.answer.reranker == "reader" else None
        return self._guarded_reranker(make_reranker(self.config.answer, reader), inject=True)

    def _guarded_reranker(self, reranker: Reranker, inject: bool) -> Reranker:
        if self.resilience is None or not reranker.enabled:  # "none" is reported as skipped, never called
            return reranker
        from citadel.resilience.guards import GuardedReranker

        return GuardedReranker(reranker, self.resilience.guard("reranker", inject=inject))

    @cached_property
    def generators(self) -> tuple[Generator, Generator | None]:
        """(primary, secondary or None) generators from config."""
        from citadel.answer.generators import make_generator

        answer = self.config.answer
        secondary = None
        if answer.secondary_generator is not None:
            secondary = make_generator(answer.model_copy(update={"generator": answer.secondary_generator}))
        primary = (self.stages.generator if self.stages.generator is not None
                   else make_generator(answer, self.reader if answer.confirm and answer.reader_quotes else None))
        return primary, secondary

    @cached_property
    def generator(self) -> ResilientGenerator:
        """The primary generator, then the secondary; in serving each behind its breaker."""
        from citadel.resilience.guards import Guard, ResilientGenerator

        primary, secondary = self.generators
        if self.resilience is None:
            return ResilientGenerator(primary, Guard(), secondary, Guard())
        local = self.stages.generator is None
        secondary_guard = self.resilience.guard("generator", breaker="generator_secondary", inject=False)
        return ResilientGenerator(primary, self.resilience.guard("generator", inject=local), secondary,
                                  secondary_guard)

    @cached_property
    def router(self) -> QuestionRouter:
        from citadel.guardrails.router import Router

        return self.stages.router or Router()

    @cached_property
    def answer_service(self):
        """The single-shot answer service over this wiring's retriever (whose query-vector memo the
        gate reads, so its vector score costs no second embedding), reranker, gate and generator."""
        from citadel.answer.confirm import ConfirmSettings
        from citadel.answer.expand import ExpansionBudget, SectionExpander
        from citadel.answer.gate_model import make_gate
        from citadel.answer.semantic import WORD_MEMO_CAPACITY
        from citadel.answer.service import AnswerService, AnswerSettings, QueryVectorMemo
        from citadel.answer.validator import AnswerValidator
        from citadel.prompting.prompt import PromptAssembler

        answer = self.config.answer
        expander = SectionExpander(ExpansionBudget(answer.max_sources, answer.source_token_budget,
                                                   answer.total_token_budget))
        return AnswerService(self.retriever, self.partitions, self.reranker, make_gate(answer), self.generator,
                             self.catalog, AnswerSettings.from_config(answer), expander,
                             AnswerValidator(answer.min_support), self.router,
                             self.planted_screen, self.memo,
                             QueryVectorMemo(self.embedder, WORD_MEMO_CAPACITY),
                             PromptAssembler.for_generator(self.generator, self.config.agent, answer.task_instruction),
                             self.pause_switch.is_paused, self.reader if answer.confirm else None,
                             ConfirmSettings.from_config(answer), self.link_policy,
                             self.suspicious_content, bundle_id=self.bundle.id, verifier=self.claim_verifier,
                             personal_data=self.personal_data, prompt_vault=self.prompt_vault,
                             signals=self.answer_signals)

    @cached_property
    def answer_signals(self):
        """The signals without labels (DESIGN.md §11) every answer of this process is observed for; a
        serving process's metrics listen (serving/services/compose.py). A rephrase is compared on the
        retrieval's own query vector (the memo); a question that did not search here (a cache hit, a
        run's synthesis) is embedded once, and only when the same user asked within the window."""
        from citadel.quality.signals import QualitySignals, RephraseDetector

        signals = self.config.signals
        rephrases = RephraseDetector(lambda text: self.memo.vectors([text])[text], signals.rephrase_window_s,
                                     signals.rephrase_min_similarity, signals.rephrase_max_users,
                                     clock=self.clock or time.time)
        return QualitySignals(rephrases, signals.low_best_score)

    @cached_property
    def link_policy(self):
        """What an answer may link to (answer.allowed_link_domains), for the single-shot path and runs."""
        from citadel.answer.links import LinkPolicy

        return LinkPolicy.from_config(self.config.answer)

    @cached_property
    def bundle(self):
        """The config bundle of this process (DESIGN.md §11): every answer, run and trace names its id.
        Kept under <home>/bundles so `citadel bundle show/diff` can read it after this config is gone."""
        from citadel.quality.bundle import effective_bundle
        from citadel.quality.bundle_store import BundleStore

        bundle = effective_bundle(self.config)
        BundleStore.for_home(self.config.home).keep(bundle)
        return bundle

    @cached_property
    def claim_verifier(self):
        """The claim verifier (answer.verifier; None when off). Its judge is the reader where the reader
        is configured (answer.confirm); without it only the code checks run (durations, totals,
        comparisons), so test homes without the trained reader keep the validator's behaviour."""
        from citadel.quality.verifier import ClaimVerifier, VerifierSettings

        answer = self.config.answer
        if not answer.verifier:
            return None
        return ClaimVerifier(self.reader if answer.confirm else None, VerifierSettings.from_config(answer))

    @cached_property
    def personal_data(self):
        """The masker of personal data in spans, log lines and the answer log: the patterns, and the
        user ids the catalog knows (read once, at the first use in this process). Spans use it too."""
        from citadel.guardrails.personal import PersonalDataMasker
        from citadel.tracing import set_span_masker

        known = getattr(self.raw_catalog, "known_users", None)
        masker = PersonalDataMasker(known() if known is not None and self.config.answer.mask_known_users else ())
        set_span_masker(masker)
        return masker

    @cached_property
    def prompt_vault(self):
        """Where prompts and replies are kept encrypted (the catalog), or None when none are kept."""
        from citadel.guardrails.prompt_keys import keyring_for
        from citadel.guardrails.prompt_vault import PromptVault

        answer = self.config.answer
        if answer.prompt_retention_days <= 0:
            return None
        return PromptVault(self.raw_catalog, keyring_for(self.config.secrets_dir, answer.prompt_key_env))

    @cached_property
    def user_spend(self) -> UserSpend:
        """Charges what runs spend to their users' daily budgets (the state's budget store)."""
        from citadel.agent.budget import BudgetStoreSpend

        return BudgetStoreSpend(self.state.budgets, self.config.state.cost_per_1k_tokens)

    @cached_property
    def planted_screen(self):
        """The one planted-instruction screen of this process (verdicts remembered per chunk): every
        retrieved passage and expanded section on every path passes it before a prompt."""
        from citadel.guardrails.planted import PlantedScreen

        return PlantedScreen(self.config.answer.screen_cache_chunks)

    @cached_property
    def suspicious_content(self):
        """Tells a document's owner, once per version, that the screen dropped one of its passages."""
        from citadel.reviews.tasks import ReviewPolicy, SuspiciousContentReporter

        return SuspiciousContentReporter(self.approval_store, self.catalog, ReviewPolicy.from_config(self.config.tools),
                                         self.clock or time.time)

    # ------------------------------------------------------------------ the agentic path
    @cached_property
    def run_store(self) -> RunStore:
        """Runs and their events (SQLite, or Redis Streams when Redis is configured)."""
        from citadel.state.factory import make_run_store

        return make_run_store(self.config, self.clock)

    @cached_property
    def conversation_store(self) -> ConversationStore:
        """Conversations, their summaries and what users asked to be remembered (SQLite)."""
        from citadel.state.factory import make_conversation_store

        return make_conversation_store(self.config, self.clock)

    @cached_property
    def conversation_memory(self):
        """Turns, their live-checked summary and the users' notes, over the conversation store."""
        from citadel.agent.memory import ConversationMemory

        return ConversationMemory(self.conversation_store, self.catalog, self.config.agent)

    @cached_property
    def planner(self) -> Planner:
        """Plan and reflection backend (`agent.planner`: rules, or an OpenAI-compatible server)."""
        from citadel.agent.planner import make_planner

        return make_planner(self.config.agent)

    @cached_property
    def agent_tools(self):
        """The tools a run's steps may call: `search`, through this wiring's retriever, and the tools of
        `tools.registry_file`, each called over its HTTP binding as the run's user, under the policy
        engine (pauses from `pause_switch`, a seeded T1 audit sample). With `answer.reranker: reader`,
        a search reranks with this wiring's reranker, as the single-shot path does."""
        from citadel.agent.executor import SearchTool
        from citadel.tools.registry import ToolRegistry

        answer = self.config.answer
        reranker = self.reranker if answer.reranker == "reader" else None
        search = SearchTool(self.retriever, answer.rerank_top_n, reranker, answer.reader_candidates,
                            self.planted_screen)
        tools = self.config.tools
        if tools.registry_file is None:
            return ToolRegistry([search])
        from citadel.identity.credentials import ALL_TENANTS
        from citadel.tools.caller import tool_caller
        from citadel.tools.http import HttpTool
        from citadel.tools.policy import AuditSampler, PolicyEngine
        from citadel.tools.spec import load_tool_specs

        specs = load_tool_specs(tools.registry_file)
        caller = tool_caller(self.config, [ALL_TENANTS])
        bound = [HttpTool(spec, tools.endpoints[spec.http.endpoint], caller, tools.timeout_s, tools.max_response_bytes)
                 for spec in specs.values() if spec.http is not None and spec.http.endpoint in tools.endpoints]
        policy = PolicyEngine(specs, self.pause_switch.is_paused, AuditSampler(tools.audit_seed))
        return ToolRegistry([search, *bound], policy)

    @cached_property
    def run_delegator(self):
        """Exchanges each new run's user context for its tools' delegations (citadel/tools/delegation.py);
        None without a registry or in the test-only `local_test_hs256` mode."""
        tools = self.config.tools
        if tools.registry_file is None or tools.delegation != "token_exchange":
            return None
        from citadel.identity.credentials import ALL_TENANTS
        from citadel.tools.caller import token_exchange_client
        from citadel.tools.delegation import (DelegationStore, RunDelegator, delegation_lifetime_s,
                                              delegations_path, grants_of)
        from citadel.tools.spec import load_tool_specs

        client = token_exchange_client(self.config, [ALL_TENANTS])
        if client is None:  # no token service: tool calls are refused with `token_service_not_configured`
            return None
        specs = load_tool_specs(tools.registry_file).values()
        return RunDelegator(client, DelegationStore(delegations_path(self.config)), grants_of(specs),
                            delegation_lifetime_s(self.config, specs))

    @cached_property
    def tool_policy(self):
        """The policy engine over the registry's tools (None without a registry file)."""
        return self.agent_tools.policy

    @cached_property
    def approval_store(self) -> ApprovalStore:
        """Approvals waiting for a person, durable across processes (SQLite in the home)."""
        from citadel.tools.factory import make_approval_store

        return make_approval_store(self.config, self.clock or time.time)

    @cached_property
    def pause_switch(self) -> PauseSwitch:
        """Pauses of tools and the model, per tenant or everywhere, seen by every process (SQLite)."""
        from citadel.tools.pause import SQLitePauseSwitch

        return SQLitePauseSwitch(self.config.pauses_path)

    @cached_property
    def orchestrator(self) -> RunDriver:
        """The run loop (`drive(run_id, owner)`): the one in `Stages` when another deployment serves it,
        else one here over this wiring's run store, answer service, planner and tools."""
        if self.stages.orchestrator is not None:
            return self.stages.orchestrator
        return self.make_orchestrator(self.run_store)

    def make_orchestrator(self, run_store, planner=None, **options):
        """An orchestrator over the given run store (and planner, else this wiring's); `options` go to
        `build_orchestrator` (clock, executor, after_step, today, memory: this wiring's conversation memory
        unless given). Unless `after_step` is given, the hook is
        the `AFTER_STEP` crash point (citadel/resilience/crash_points.py): a drill arms it through the
        environment; unarmed it costs one environment lookup per step."""
        from citadel.agent.orchestrator import build_orchestrator
        from citadel.resilience.crash_points import after_step
        from citadel.reviews.tasks import ReviewPolicy
        from citadel.tools.honeypots import HoneypotPlanter

        options.setdefault("after_step", after_step)
        options.setdefault("memory", self.conversation_memory)
        options.setdefault("approvals", self.approval_store)
        options.setdefault("wall_clock", self.clock or time.time)
        options.setdefault("honeypots", HoneypotPlanter.from_config(self.config.tools))
        options.setdefault("reviews", ReviewPolicy.from_config(self.config.tools))
        options.setdefault("links", self.link_policy)
        options.setdefault("flagged", self.suspicious_content)
        options.setdefault("spend", self.user_spend)
        options.setdefault("bundle_id", self.bundle.id)
        return build_orchestrator(run_store, self.answer_service, planner or self.planner, self.agent_tools,
                                  self.config.agent, router=self.router, catalog=self.catalog,
                                  partitions=self.partitions, cost_per_1k_tokens=self.config.state.cost_per_1k_tokens,
                                  **options)

    @cached_property
    def objects(self) -> ObjectStore:
        """Where raw uploads are kept, under immutable keys (citadel/ingest/objects.py, uploads.py)."""
        from citadel.ingest.objects import make_object_store

        return make_object_store(self.config)

    def job_runner(self, large: Callable[[Progress], IngestEngine] | None = None,
                   on_published: Callable[[str], None] | None = None, idle_backoff: bool = True) -> JobRunner:
        """A runner of queued ingestion jobs over this wiring's catalog, object store and in-process
        engine (`large`: the Ray Data engine, where the caller has Ray; `idle_backoff`: JobRunner's).
        Uploads of the older layout are moved under their raw keys first (citadel/ingest/uploads.py)."""
        from citadel.ingest.runner import Engines, JobRunner
        from citadel.ingest.uploads import migrate_legacy_uploads

        migrate_legacy_uploads(self.config.home, self.catalog, self.objects)
        return JobRunner(self.catalog, self.objects, Engines(lambda progress: self.ingestor(progress), large),
                         self.config.jobs, self.config.home / "jobs", on_published=on_published,
                         idle_backoff=idle_backoff, tier_moves=self.move_tiers,
                         tier_check_interval_s=self.config.index.tier_check_interval_s)

    def move_tiers(self, now: float) -> list:
        """Compact the tenants whose tier the policy changes at `now` (citadel.segments.tiering
        apply_tier_moves): `citadel tiers --apply` and every job runner's periodic check. Their reports."""
        from citadel.segments.tiering import apply_tier_moves

        ingestor = self.ingestor()
        return apply_tier_moves(self.catalog, self.config.index, now,
                                lambda tenant_id: ingestor.compact(tenant_id, only_if_tier_moves=True))

    def ingestor(self, progress=None) -> IngestEngine:
        """An in-process ingestion engine writing through this wiring's catalog and embedder."""
        from citadel.ingest.local import Ingestor

        return Ingestor(self.catalog, self.embedder, self.config, progress=progress)
