"""Composes the serving services from config, with their stages in this process or behind other
deployments (DESIGN.md §5).

`citadel.wiring.Wiring` builds the components (catalog, stages, answer service, state, identity)
with this process's resilience guards; this module adds what only a serving process has — its
metrics, the answer-cache view and one service per endpoint family. Guards run on the caller's side
of each hop (a breaker times what the caller waits for); faults are injected where the stage runs
(here for local stages, in the stage's replica otherwise).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from citadel.config import CitadelConfig
from citadel.guardrails.log_masking import install_log_masking
from citadel.ingest.runner import JobRunner
from citadel.quality.candidates import CandidateQueue
from citadel.resilience.process import Resilience, fault_store, process_resilience
from citadel.reviews.tasks import ReviewPolicy
from citadel.types import Principal
from citadel.wiring import Stages, Wiring
from serving.services.access import Access
from serving.services.admin import AdminService
from serving.services.answer_cache import AnswerCacheView
from serving.services.documents import DocumentsService
from serving.services.drills import DrillService
from serving.services.metrics import ApiMetrics
from serving.services.query import QueryService
from serving.services.raw_files import RawFilesService
from serving.services.approvals import ApprovalsService
from serving.services.candidates import CandidatesService
from serving.services.webhooks import DecisionWebhook
from serving.services.runs import RunsService

log = logging.getLogger(__name__)

# Runs one serving process works on at once (each runs its own steps in parallel within it).
RUN_WORKERS = 8


@dataclass
class Services:
    """What the HTTP layer calls: one service per endpoint family, who is calling, and the process's
    metrics and resilience."""

    config: CitadelConfig
    access: Access
    query: QueryService
    admin: AdminService
    drills: DrillService
    runs: RunsService
    approvals: ApprovalsService
    metrics: ApiMetrics
    resilience: Resilience
    wiring: Wiring
    candidates: CandidatesService | None = None  # the candidate test items' admin routes
    documents: DocumentsService | None = None  # what citations open, policies by id
    raw_files: RawFilesService | None = None  # a document version's raw file


def build_services(config: CitadelConfig, stages: Stages | None = None, clock: Callable[[], float] | None = None,
                   resilience: Resilience | None = None, in_replica: bool = False) -> Services:
    metrics = ApiMetrics.from_config(config.serving)
    resilience = resilience or process_resilience(config)
    resilience.add_listener(metrics.breaker_transition)
    wiring = Wiring(config, resilience=resilience, stages=stages, clock=clock, in_replica=in_replica, stage="fused")
    install_log_masking(wiring.personal_data)  # this process's log lines: no personal data
    cache = AnswerCacheView(config.state, wiring.catalog, wiring.state, metrics, resilience.guard("cache"))
    query = QueryService(config.answer, config.state, wiring.catalog, wiring.state, wiring.answer_service,
                         wiring.retriever, cache, metrics, ReviewPolicy.from_config(config.tools),
                         wiring.approval_store, clock or time.time)
    runner = _embedded_job_runner(config, wiring, cache)
    admin = AdminService(config, wiring.catalog, wiring.state, cache, wiring.ingestor, wiring.pause_switch,
                         lambda: (s.name for s in (wiring.tool_policy.specs() if wiring.tool_policy else ())),
                         objects=wiring.objects, runner=runner)
    metrics.watch_dead_letters(wiring.catalog)
    if stages is not None and stages.retriever is not None:
        metrics.watch_retriever(stages.retriever)  # a remote retriever's hedge and retry counts
    if in_replica and config.answer.answer_log_purge_interval_s > 0:  # retention without traffic too
        from functools import partial

        from citadel.catalog.retention import AnswerLogPurger, purge_expired_sessions

        # Idle conversations and runs go by the same purge loop as the answer log.
        sessions = partial(purge_expired_sessions, wiring.run_store, wiring.conversation_store, config.agent)
        AnswerLogPurger(wiring.catalog, config.answer, config.answer.answer_log_purge_interval_s, sessions).start()
    wiring.user_spend.add_listener(metrics.charged)  # a run's steps count in the spend metric (and its alert)
    wiring.answer_signals.add_listener(metrics.answer_signals)  # rephrases, verdicts, best scores (DESIGN.md §11)
    # thumbs-down with a reason and reviewers' edits or rejections become candidate test items
    candidates = CandidateQueue(wiring.catalog, wiring.personal_data)
    runs = _runs_service(config, wiring, metrics, in_replica, query.charge, candidates)
    approvals = ApprovalsService(wiring.approval_store, wiring.run_store, wiring.tool_policy, runs.resume,
                                 metrics=metrics, candidates=candidates,
                                 webhook=DecisionWebhook(config.tools.decision_webhook)
                                 if config.tools.decision_webhook else None)
    if wiring.approval_store is not None:
        metrics.watch_pending_approvals(wiring.approval_store.pending_counts)  # read at scrape time
    if in_replica:
        _every(config.agent.lease_ttl_s, approvals.sweep)  # escalation and expiry need no traffic
    drills = DrillService(fault_store(config) if config.serving.fault_injection else None, config.answer,
                          wiring.catalog)
    return Services(config, Access(wiring.authenticator), query, admin, drills, runs, approvals, metrics, resilience,
                    wiring, CandidatesService(candidates), DocumentsService(wiring.catalog, wiring.partitions),
                    RawFilesService(wiring.catalog, wiring.objects))


def _runs_service(config: CitadelConfig, wiring: Wiring, metrics: ApiMetrics, in_replica: bool,
                  charge: Callable[[Principal, str], int], candidates: CandidateQueue | None = None) -> RunsService:
    """Runs on this process's worker pool; a serving replica also adopts, every lease period, the runs
    whose replica died (their lease expired), so each continues from its last recorded step."""
    pool = concurrent.futures.ThreadPoolExecutor(RUN_WORKERS, thread_name_prefix="run")
    delegator = wiring.run_delegator  # tools that act for the user: delegate at each run's start
    runs = RunsService(config.agent, wiring.run_store, wiring.conversation_memory, wiring.catalog,
                       wiring.orchestrator.drive, pool, metrics, charge=charge,
                       on_run_created=delegator.start_run if delegator is not None else None,
                       candidates=candidates, max_runs=config.serving.admission_max_runs,
                       retry_after_s=config.serving.admission_retry_after_s)
    if in_replica:
        _every(config.agent.lease_ttl_s, runs.adopt_orphans)
    return runs


def _embedded_job_runner(config: CitadelConfig, wiring: Wiring, cache: AnswerCacheView) -> JobRunner | None:
    """The job runner as a thread of this process (tests, a gateway replica: the leases let several
    share the queue, one job on one runner at a time); None when `jobs.embedded_runner` is off, where
    the deployment's runner actor (indexing/job_runner.py) works on the queue instead."""
    if not config.jobs.embedded_runner:
        return None
    runner = wiring.job_runner(on_published=cache.invalidate)
    runner.start()
    return runner


def _every(period_s: float, action: Callable[[], object]) -> None:
    """Call `action` every `period_s` on a daemon thread for the life of the process."""
    def loop() -> None:
        while True:
            time.sleep(period_s)
            try:
                action()
            except Exception:  # a store outage must not end the timer's thread
                log.exception("periodic %s failed", name)

    name = getattr(action, "__name__", "task")
    threading.Thread(target=loop, name=f"every-{name}", daemon=True).start()
