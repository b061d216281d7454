"""What the agentic path's guards cost per run: the planted-instruction screen on a run's
passages and sections, the links policy on its answer, and the personal-data mask on its spans, each
timed inside real runs, beside the run's total (goal: < 5% of a run, on 2 cores).

Drives two-part questions of the paraphrase set's test split (citadel/eval/runs_parts.py `pairs`) as
runs, through the same orchestrator the runs API drives, over an in-memory run store, on an existing
home (the four handbook tenants `citadel eval rag` builds; real MiniLM unless the environment says
otherwise). The screen's per-chunk memory starts empty for every run, so nothing a run reads was
screened by an earlier one (the worst case for a served replica, which remembers verdicts across
requests); within a run a chunk read twice (by its step, then by the synthesis) is screened once, as
served. Spans go to an in-memory exporter, so the mask's cost is not hidden behind a slow one.

    python benchmarks/run_guards.py --home HOME [--pairs 12]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citadel.eval.runs_parts import joined, pairs  # noqa: E402
from citadel.answer.links import LinkPolicy  # noqa: E402
from citadel.config import load_config  # noqa: E402
from citadel.guardrails.planted import PlantedScreen  # noqa: E402
from citadel.state.runs import MemoryRunStore, Run  # noqa: E402
from citadel.tracing import set_span_masker  # noqa: E402
from citadel.wiring import Wiring  # noqa: E402

GOAL_SHARE = 0.05


class Stopwatch:
    """Seconds spent inside the wrapped calls, from any thread (a run's steps run in parallel)."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def timed(self, call):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - started
                    self.calls += 1
        return wrapper

    def take(self) -> tuple[float, int]:
        with self._lock:
            taken = (self.seconds, self.calls)
            self.seconds, self.calls = 0.0, 0
            return taken


class TimedMasker:
    def __init__(self, masker, watch: Stopwatch):
        self._masker = masker
        self.mask = watch.timed(masker.mask)

    def __getattr__(self, name):
        return getattr(self._masker, name)


class FreshScreen:
    """The served screen (verdicts remembered per chunk), forgetting everything between runs."""

    def __init__(self):
        self.forget()

    def forget(self) -> None:
        self._screen = PlantedScreen(100_000)

    def __call__(self, passage) -> bool:
        return self._screen(passage)


class TimedLinks:
    def __init__(self, policy: LinkPolicy, watch: Stopwatch):
        self.clean = watch.timed(policy.clean)


def in_memory_spans() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from citadel.tracing import configure_tracing

    configure_tracing(exporter=InMemorySpanExporter())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=12)
    args = parser.parse_args()
    environ = {**os.environ, "CITADEL_HOME": str(args.home)}
    environ.setdefault("CITADEL_EMBEDDING__BACKEND", "minilm")
    wiring = Wiring(load_config(environ=environ))
    screen_watch, links_watch, mask_watch = Stopwatch(), Stopwatch(), Stopwatch()
    screen = FreshScreen()
    wiring.__dict__["planted_screen"] = screen_watch.timed(screen)
    service = wiring.answer_service
    answer = wiring.config.answer
    policy = LinkPolicy.from_config(answer)
    timed_policy = TimedLinks(policy, links_watch)
    service.links = timed_policy
    in_memory_spans()
    set_span_masker(TimedMasker(wiring.personal_data, mask_watch))
    store = MemoryRunStore(time.time)
    orchestrator = wiring.make_orchestrator(store, memory=None, approvals=None, links=timed_policy, spend=None,
                                            flagged=None)
    rows = []
    for first, second in pairs(args.pairs):
        run_id = uuid.uuid4().hex
        store.create(Run(run_id, first.tenant, first.user, "bench", joined(first, second), groups=first.groups))
        for watch in (screen_watch, links_watch, mask_watch):
            watch.take()
        screen.forget()
        started = time.perf_counter()
        orchestrator.drive(run_id, "bench")
        total = time.perf_counter() - started
        (screen_s, screened), (links_s, _), (mask_s, masked) = (w.take() for w in (screen_watch, links_watch,
                                                                                     mask_watch))
        rows.append({"run_ms": total * 1000, "screen_ms": screen_s * 1000, "passages_screened": screened,
                     "links_ms": links_s * 1000, "mask_ms": mask_s * 1000, "fields_masked": masked,
                     "share": (screen_s + links_s + mask_s) / total if total else 0.0})

    def p50(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    print(json.dumps({
        "runs": len(rows), "goal_share": GOAL_SHARE,
        "p50": {key: p50(key) for key in ("run_ms", "screen_ms", "links_ms", "mask_ms", "passages_screened",
                                          "fields_masked", "share")},
        "max_share": round(max(r["share"] for r in rows), 4),
        "met": p50("share") < GOAL_SHARE,
        "config": {"embedding": wiring.config.embedding.backend, "reranker": answer.reranker,
                   "confirm": answer.confirm, "screen_memory": "per run"},
        "rows": [{k: round(v, 3) for k, v in r.items()} for r in rows]}, indent=1))


if __name__ == "__main__":
    main()
