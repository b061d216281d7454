"""Prometheus metrics of the API (DESIGN.md §4 step 8), in a registry per serving process.

The query service times every stage itself (the stages it runs in-process and the calls it makes to
other deployments), so one replica's registry holds the whole request path; `GET /metrics`
(serving/http/metrics.py) serves it to a metrics credential only.
A registry per instance keeps test apps and benchmark runs from sharing counters.

Under Serve a gateway has several replica processes and a scrape reaches one of them, so there the
registry runs in prometheus_client's multiprocess mode (serving.metrics_multiprocess_dir: the Serve app
sets PROMETHEUS_MULTIPROC_DIR in the gateway replicas' environment, serving/ray/app.py): every process
writes its samples to files in one directory per node, and `/metrics` on any replica serves the node's
sum (MultiProcessCollector: counters and histograms added up; the one gauge written per process, the
breaker states, counted over live processes). The library does the cross-process part; what it cannot
read, live objects, stays with the process that answers: the gauges read from a shared store at scrape
time (the same in every replica) and, summed through counters instead, the retriever client's counts.
The `tenant` label is bounded (TenantLabels): callers choose tenant ids, the operator chooses how
many series exist.
"""

from __future__ import annotations

import glob
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import psutil
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from citadel.resilience.breaker import BreakerState

if TYPE_CHECKING:  # the quality package is heavy to import, and the answers' signals only pass through here
    from citadel.quality.signals import AnswerSignals

OTHER_TENANTS = "other"
DEFAULT_MAX_TENANTS = 50
# Distinct users named in the spend metric's `user` label before later ones count as "other".
DEFAULT_MAX_USERS = 1_000


class TenantLabels:
    """The value of the `tenant` label: a configured tenant's own name, the first `max_tenants`
    other tenants seen by name, and every later one "other". Thread-safe."""

    def __init__(self, configured: Iterable[str] = (), max_tenants: int = DEFAULT_MAX_TENANTS):
        self._configured = frozenset(configured)
        self._max_tenants = max_tenants
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, tenant: str) -> str:
        if tenant in self._configured or tenant in self._seen:
            return tenant
        with self._lock:
            if len(self._seen) < self._max_tenants:
                self._seen.add(tenant)
                return tenant
        return OTHER_TENANTS

# Stage latencies span a cache hit (~0.1 ms) to a CPU generation (~seconds).
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
MS_PER_S = 1000.0
# A person's approval decision takes seconds (a test, a quick reviewer) to days (expiry is at most 30 days).
DECISION_BUCKETS_S = (1, 10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800, 2592000)
HONEYPOT_OUTCOMES = ("caught", "missed", "expired")
PROMPT_TOKEN_KINDS = ("cached", "uncached")
# prometheus_client reads it once, when first imported: set in a process's environment before it starts.
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> Path | None:
    """The directory this process's metrics are written to, when prometheus_client runs in multiprocess
    mode here (MULTIPROCESS_ENV was set when the process started: a gateway replica under Serve);
    None: the metrics live in memory."""
    path = os.environ.get(MULTIPROCESS_ENV)
    return Path(path) if path and getattr(values.ValueClass, "_multiprocess", False) else None


class ApiMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, tenant_labels: TenantLabels | None = None, multiprocess_dir: Path | None = None) -> None:
        """`multiprocess_dir`: this process writes its metrics there (it must be the process's own
        MULTIPROCESS_ENV) and render() serves the sum over every process writing there."""
        self.tenant_label = tenant_labels or TenantLabels()
        self.registry = CollectorRegistry()
        self._multiprocess_dir = multiprocess_dir
        if multiprocess_dir is not None:
            multiprocess_dir.mkdir(parents=True, exist_ok=True)  # before the first metric opens its file
        # What a scrape reads: this registry, or the node's files plus the scrape-time collectors.
        self._exposed = self.registry if multiprocess_dir is None else _node_registry(multiprocess_dir)
        r = self.registry
        self.stage_latency = Histogram("citadel_stage_latency_seconds", "Latency of one stage of a request.",
                                       ["stage"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.requests = Counter("citadel_requests_total", "API requests by endpoint, tenant and status.",
                                ["endpoint", "tenant", "status"], registry=r)
        self.cache = Counter("citadel_answer_cache_total", "Answer-cache lookups by result.", ["result"], registry=r)
        self.refusals = Counter("citadel_refusals_total", "Refused answers by reason.", ["reason"], registry=r)
        self.degraded = Counter("citadel_degraded_total", "Responses with a visible downgrade, by what.",
                                ["what"], registry=r)
        self.prompt_tokens = Counter("citadel_prompt_tokens_total", "Prompt tokens of generated answers, by kind: "
                                     "cached (served from the model server's prefix cache) or uncached, where the "
                                     "generator's backend says them.", ["kind"], registry=r)
        self.budget_rejections = Counter("citadel_budget_rejections_total", "Requests refused by a user budget.",
                                         ["tenant"], registry=r)
        self.breaker_transitions = Counter("citadel_breaker_transitions_total", "Breaker state changes.",
                                           ["breaker", "to"], registry=r)
        # Per process; summed over a node's live replicas in multiprocess mode (replicas in that state).
        self.breaker_state = Gauge("citadel_breaker_state", "1 for each breaker's current state (closed, open, "
                                   "half_open, recovering); a breaker that never changed state is closed and absent. "
                                   "Summed over a node's live gateway replicas when they share a metrics directory.",
                                   ["breaker", "state"], registry=r, multiprocess_mode="livesum")
        self.answers = Counter("citadel_answers_total", "Single-shot answers by outcome: answered, not_confirmed, "
                               "refused, clarify (a clarifying question) or review_pending (held for a person).",
                               ["outcome"], registry=r)
        self.runs = Counter("citadel_runs_total", "Runs finished, by path and stop reason (none: answered in full).",
                            ["path", "status", "stop_reason"], registry=r)
        self.run_steps = Histogram("citadel_run_steps", "Steps one run executed.", registry=r,
                                   buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16, 32))
        self.run_latency = Histogram("citadel_run_seconds", "Wall time of a run on this replica, start to final.",
                                     registry=r, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        # Reviews. `team` is the approval's approver group and `tool` a registered
        # tool: both from the operator's registry, so bounded.
        self.honeypots = Counter("citadel_honeypots_total", "Honeypot approvals by approver group (team) and "
                                 "outcome: caught (rejected), missed (approved), expired.", ["team", "outcome"],
                                 registry=r)
        self.approval_decisions = Counter("citadel_approval_decisions_total", "Real approvals decided, by tool and "
                                          "decision (approved, rejected, expired).", ["tool", "decision"], registry=r)
        self.approval_decision_time = Histogram("citadel_approval_decision_seconds", "Seconds from an approval's "
                                                "request to a person's decision, by tool (real approvals).",
                                                ["tool"], buckets=DECISION_BUCKETS_S, registry=r)
        # What the alert rules in cluster/prometheus/ read: request latency per
        # endpoint (the latency SLO), estimated spend per tenant and user (bounded like tenants), and
        # the open dead letters per tenant, read from the catalog at scrape time.
        self.request_latency = Histogram("citadel_request_seconds", "Latency of an API request, by endpoint.",
                                         ["endpoint"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.user_label = TenantLabels(max_tenants=DEFAULT_MAX_USERS)
        self.spend = Counter("citadel_spend_usd_total", "Estimated spend charged to a user's budget.",
                             ["tenant", "user"], registry=r)
        self._add_quality_signals(r)
        self._retrievers: list = []
        self._retriever_counters: _RetrieverCounters | None = None
        if multiprocess_dir is None:
            r.register(_RetrieverCollector(self._retrievers))
        else:  # a scrape-time read would show only the answering process's counts
            self._retriever_counters = _RetrieverCounters(self._retrievers, r)
        self._catalogs: list = []
        self._exposed.register(_DeadLetterCollector(self._catalogs, self.tenant_label))
        self._exposed.register(_JobCollector(self._catalogs))
        self._pending_approvals: list = []
        self._exposed.register(_PendingApprovalsCollector(self._pending_approvals))

    @classmethod
    def from_config(cls, serving) -> "ApiMetrics":
        """Metrics with the `tenant` label bounded as `serving` (the config section) says, in this
        process's multiprocess directory when it has one."""
        return cls(TenantLabels(serving.metrics_tenant_labels, serving.metrics_max_tenants), multiprocess_dir())

    def _add_quality_signals(self, r: CollectorRegistry) -> None:
        """Signals without labels (DESIGN.md §11, citadel/quality/signals.py), read by the quality alerts
        in cluster/prometheus/alerts.yml. Every label is bounded: tenants by TenantLabels, votes, reasons
        and verdicts by their fixed sets."""
        self.questions = Counter("citadel_questions_total", "Questions about the documents answered (single-shot, "
                                 "cache hits and runs' answers), by tenant: the rephrase share's denominator.",
                                 ["tenant"], registry=r)
        self.rephrases = Counter("citadel_rephrase_total", "Questions that rephrase the same user's previous one "
                                 "within signals.rephrase_window_s (other words, close by embedding), by tenant.",
                                 ["tenant"], registry=r)
        self.verifier_claims = Counter("citadel_verifier_claims_total", "Claims the claim verifier checked, by verdict "
                                       "(kept, removed, corrected): its pass rate is the share kept.", ["verdict"],
                                       registry=r)
        self.scored_answers = Counter("citadel_scored_answers_total", "Answers whose best score (the question's cosine "
                                      "to its closest top passage) was measured, by tenant.", ["tenant"], registry=r)
        self.low_best_scores = Counter("citadel_low_best_score_total", "Scored answers whose best score is under "
                                       "signals.low_best_score, by tenant.", ["tenant"], registry=r)
        self.feedback = Counter("citadel_feedback_total", "Votes on answers, by tenant, vote (up, down) and reason "
                                "(none: no reason given).", ["tenant", "vote", "reason"], registry=r)

    def answer_signals(self, signals: AnswerSignals) -> None:
        """One answer's signals (a QualitySignals listener, serving/services/compose.py)."""
        tenant = self.tenant_label(signals.tenant)
        self.questions.labels(tenant).inc()
        if signals.rephrase_of is not None:
            self.rephrases.labels(tenant).inc()
        for verdict, count in signals.verdicts.items():
            if count:
                self.verifier_claims.labels(verdict).inc(count)
        if signals.best_score is not None:
            self.scored_answers.labels(tenant).inc()
            if signals.low_best_score:
                self.low_best_scores.labels(tenant).inc()

    def feedback_recorded(self, tenant: str, vote: str, reason: str | None) -> None:
        """A vote stored (its vote and reason already checked against their fixed sets)."""
        self.feedback.labels(self.tenant_label(tenant), vote, reason or "none").inc()

    def count_request(self, endpoint: str, tenant: str, status: int, seconds: float | None = None) -> None:
        self.requests.labels(endpoint, self.tenant_label(tenant), str(status)).inc()
        if seconds is not None:
            self.request_latency.labels(endpoint).observe(seconds)
        if self._retriever_counters is not None:
            self._retriever_counters.sync()  # the other replicas' scrapes see this one's counts by its files

    def charged(self, tenant: str, user: str, usd: float) -> None:
        if usd > 0:
            self.spend.labels(self.tenant_label(tenant), self.user_label(user)).inc(usd)

    def watch_dead_letters(self, catalog) -> None:
        """Report the catalog's open dead letters per tenant at scrape time."""
        self._catalogs.append(catalog)

    def budget_rejected(self, tenant: str) -> None:
        self.budget_rejections.labels(self.tenant_label(tenant)).inc()

    def breaker_transition(self, name: str, old, new, reason: str) -> None:
        state = getattr(new, "value", str(new))
        self.breaker_transitions.labels(name, state).inc()
        for each in BreakerState:
            self.breaker_state.labels(name, each.value).set(1 if each.value == state else 0)

    def count_answer(self, outcome: str) -> None:
        """One single-shot answer's outcome (serving/services/query.py answer_outcome)."""
        self.answers.labels(outcome).inc()

    def watch_pending_approvals(self, counts) -> None:
        """Report `counts()` ({(tool, kind): pending}, read from the approval store) at scrape time."""
        self._pending_approvals.append(counts)

    def watch_retriever(self, retriever) -> None:
        """Export a remote retriever's hedge and retry counts (its `stats()`)."""
        self._retrievers.append(retriever)

    def observe_run(self, path: str | None, status: str, stop_reason: str | None, steps: int, seconds: float) -> None:
        self.runs.labels(path or "none", status, stop_reason or "none").inc()
        self.run_steps.observe(steps)
        self.run_latency.observe(seconds)

    def honeypot_decided(self, team: str, outcome: str) -> None:
        """A honeypot caught (rejected), missed (approved) or expired."""
        if outcome not in HONEYPOT_OUTCOMES:
            raise ValueError(f"a honeypot outcome is one of {HONEYPOT_OUTCOMES}, got {outcome!r}")
        self.honeypots.labels(team, outcome).inc()

    def approval_decided(self, tool: str, decision: str, seconds: float | None) -> None:
        """A real approval approved, rejected or expired; `seconds` from request to decision (None: an
        expiry, which no person decided)."""
        self.approval_decisions.labels(tool, decision).inc()
        if seconds is not None:
            self.approval_decision_time.labels(tool).observe(max(0.0, seconds))

    def count_prompt_tokens(self, counts: dict[str, int] | None) -> None:
        """An answer's prompt tokens ({"cached", "uncached"}: AnswerResponse.prompt_tokens); None: not said."""
        for kind in PROMPT_TOKEN_KINDS:
            if counts and counts.get(kind):
                self.prompt_tokens.labels(kind).inc(counts[kind])

    def observe_stages(self, timings_ms: dict[str, float]) -> None:
        for stage, ms in timings_ms.items():
            self.stage_latency.labels(stage.removesuffix("_ms")).observe(ms / MS_PER_S)

    def render(self) -> bytes:
        if self._multiprocess_dir is not None:
            self._retriever_counters.sync()
            forget_dead_processes(self._multiprocess_dir)
        return generate_latest(self._exposed)

    def process_ended(self) -> None:
        """This process stops writing (a replica shutting down): its per-process gauges leave the sum
        (its counters stay in it, so the node's totals never go back)."""
        if self._multiprocess_dir is not None:
            mark_process_dead(os.getpid(), str(self._multiprocess_dir))


# prometheus_client's multiprocess files: <type>_<pid>.db, a gauge's type with its mode (gauge_livesum_<pid>.db).
METRIC_FILE_PREFIXES = ("counter_", "histogram_", "summary_", "gauge_")


def clear_metric_files(directory: Path | None) -> None:
    """`directory` (serving.metrics_multiprocess_dir; None: off) without metric files, before the
    gateway replicas of a new app start: counts of an earlier app (another run, another topology) must
    not add to theirs. Only prometheus_client's files (<type>_<pid>.db) go: the directory is the
    operator's to name."""
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.glob("*.db"):
        if path.name.startswith(METRIC_FILE_PREFIXES):
            path.unlink(missing_ok=True)


def _node_registry(directory: Path) -> CollectorRegistry:
    """A registry reading the metrics every process wrote to `directory`, summed."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return registry


def forget_dead_processes(directory: Path) -> None:
    """Drop the per-process gauges of processes on this node that ended without saying so (a replica
    killed or crashed), as `process_ended` would have."""
    for path in glob.glob(os.path.join(directory, "gauge_live*_*.db")):
        pid = Path(path).stem.rsplit("_", 1)[-1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            mark_process_dead(int(pid), str(directory))


class _RetrieverCollector:
    """Hedged reads, hedges sent and won, and retries, read from the retriever client at scrape time."""

    NAMES = {"requests": "citadel_retriever_reads", "hedges": "citadel_retriever_hedges",
             "hedge_wins": "citadel_retriever_hedge_wins", "retries": "citadel_retriever_retries"}

    def __init__(self, retrievers: list):
        self._retrievers = retrievers

    @classmethod
    def name_of(cls, key: str) -> str:
        return cls.NAMES.get(key, f"citadel_retriever_{key}")

    def collect(self):
        totals: dict[str, int] = {}
        for retriever in self._retrievers:
            for key, value in retriever.stats().items():
                totals[key] = totals.get(key, 0) + int(value)
        for key, value in totals.items():
            family = CounterMetricFamily(self.name_of(key), f"Retriever client {key}.")
            family.add_metric([], value)
            yield family


class _RetrieverCounters:
    """Multiprocess mode: the same counts as _RetrieverCollector, added to counters as the retriever
    clients' cumulative `stats()` grow (on each request and each scrape), so they reach the node's files."""

    def __init__(self, retrievers: list, registry: CollectorRegistry):
        self._retrievers = retrievers
        self._registry = registry
        self._counters: dict[str, Counter] = {}
        self._counted: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def sync(self) -> None:
        with self._lock:
            for index, retriever in enumerate(self._retrievers):
                for key, value in retriever.stats().items():
                    grown = int(value) - self._counted.get((index, key), 0)
                    if grown > 0:
                        self._counter(key).inc(grown)
                        self._counted[(index, key)] = int(value)

    def _counter(self, key: str) -> Counter:
        if key not in self._counters:
            self._counters[key] = Counter(_RetrieverCollector.name_of(key), f"Retriever client {key}.",
                                          registry=self._registry)
        return self._counters[key]


class _DeadLetterCollector:
    """Open (not retried) dead letters per tenant, read from the catalog at scrape time; a catalog
    that cannot be read reports nothing rather than failing the scrape."""

    def __init__(self, catalogs: list, tenant_label: TenantLabels):
        self._catalogs = catalogs
        self._tenant_label = tenant_label

    def collect(self):
        counts: dict[str, int] = {}
        for catalog in self._catalogs:
            try:
                letters = catalog.dead_letters()
            except Exception:  # noqa: BLE001 — a scrape never fails for a catalog read
                continue
            for letter in letters:
                tenant = self._tenant_label(str(letter.get("tenant_id", "")))
                counts[tenant] = counts.get(tenant, 0) + 1
        family = GaugeMetricFamily("citadel_dead_letters", "Open dead letters (failed ingestion inputs) per tenant.",
                                   labels=["tenant"])
        for tenant, count in sorted(counts.items()):
            family.add_metric([tenant], count)
        yield family


class _JobCollector:
    """Ingestion jobs by status (queued, running, succeeded, failed, ...), read from the catalog at
    scrape time (its job_counts); a catalog that cannot be read reports nothing."""

    def __init__(self, catalogs: list):
        self._catalogs = catalogs

    def collect(self):
        counts: dict[str, int] = {}
        for catalog in self._catalogs:
            try:
                found = catalog.job_counts()
            except Exception:  # noqa: BLE001 — a scrape never fails for a catalog read
                continue
            for status, count in found.items():
                counts[status] = counts.get(status, 0) + int(count)
        family = GaugeMetricFamily("citadel_ingest_jobs", "Ingestion jobs in the catalog, by status.", labels=["status"])
        for status, count in sorted(counts.items()):
            family.add_metric([status], count)
        yield family


class _PendingApprovalsCollector:
    """Approvals and review tasks waiting for a person, by tool and kind, read from the approval store
    at scrape time; a store that cannot be read reports nothing."""

    def __init__(self, sources: list):
        self._sources = sources

    def collect(self):
        counts: dict[tuple[str, str], int] = {}
        for source in self._sources:
            try:
                found = source()
            except Exception:  # noqa: BLE001 — a scrape never fails for a store read
                continue
            for key, count in found.items():
                counts[key] = counts.get(key, 0) + int(count)
        family = GaugeMetricFamily("citadel_approvals_pending", "Approvals (kind approval) and review tasks "
                                   "(kind review) waiting for a person, by tool.", labels=["tool", "kind"])
        for (tool, kind), count in sorted(counts.items()):
            family.add_metric([tool, kind], count)
        yield family
