"""The RunDriver suite (citadel/agent/orchestrator.py): what the runs service relies on from whatever
drives a run (the Orchestrator here, the proxy to the orchestrator deployment).

Over a small home (hash embedder, the Acme example) and its run store: driving a queued run works it
to its end and returns it finished, with one terminal event and it the last, a question of one part
on the single-shot path and one of two parts on the agentic one; driving a finished run again returns it as it is and appends nothing; an
unknown run is NotFound.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from citadel.agent.orchestrator import RunDriver
from citadel.errors import NotFound
from citadel.state.runs import FINISHED, TERMINAL_EVENTS, Run

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SIMPLE = "What is the hotel limit per night in London?"
TWO_PARTS = "What is the hotel limit per night in London? Which laptops need full-disk encryption?"


def build_wiring(root: Path):
    from citadel.config import load_config
    from citadel.ingest.sources import AclSpec, discover
    from citadel.wiring import Wiring

    config = load_config(environ={"CITADEL_ANSWER__CONFIRM": "false", "CITADEL_HOME": str(root),
                                  "CITADEL_EMBEDDING__BACKEND": "hash", "CITADEL_TOOLS__HONEYPOT_RATE": "0"})
    wiring = Wiring(config=config)
    sources = discover([EXAMPLES / "acme"], trust_front_matter=True)
    wiring.ingestor().ingest("acme", sources, AclSpec.from_file(EXAMPLES / "acme" / "acl.yaml"))
    return wiring


class RunDriverConformance:
    """Override `backend` (class-scoped) with the driver under test over `wiring` (its run store is
    the one the suite creates runs in and reads events from)."""

    @pytest.fixture(scope="class")
    @classmethod
    def wiring(cls, tmp_path_factory):
        wiring = build_wiring(tmp_path_factory.mktemp("run-driver") / "home")
        yield wiring
        wiring.catalog.close()

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, wiring) -> RunDriver:
        raise NotImplementedError("a conformance subclass provides the run driver under test")

    @staticmethod
    def start(wiring, question: str) -> str:
        run_id = uuid.uuid4().hex
        wiring.run_store.create(Run(run_id, "acme", "alice", "c1", question, groups=("staff",)))
        return run_id

    def test_implements_protocol(self, backend):
        assert isinstance(backend, RunDriver)

    @pytest.mark.parametrize(("question", "path"), [(SIMPLE, "single_shot"), (TWO_PARTS, "agentic")],
                             ids=["one part", "two parts"])
    def test_a_queued_run_is_driven_to_its_end(self, backend, wiring, question, path):
        run_id = self.start(wiring, question)
        run = backend.drive(run_id, "conformance")
        assert isinstance(run, Run) and run.run_id == run_id and run.status in FINISHED and run.path == path
        assert wiring.run_store.get(run_id).status == run.status
        events = wiring.run_store.events(run_id)
        terminal = [e for e in events if e.type in TERMINAL_EVENTS]
        assert len(terminal) == 1 and terminal[0] == events[-1]

    def test_a_finished_run_is_returned_as_it_is(self, backend, wiring):
        run_id = self.start(wiring, SIMPLE)
        first = backend.drive(run_id, "conformance")
        before = wiring.run_store.events(run_id)
        again = backend.drive(run_id, "another-driver")
        assert again.status == first.status and wiring.run_store.events(run_id) == before

    def test_an_unknown_run_is_not_found(self, backend):
        with pytest.raises(NotFound):
            backend.drive("no-such-run", "conformance")
