"""The ApprovalStore suite (DESIGN.md §10; citadel/tools/approvals.py): in process and SQLite behave
the same.

`peer` is a second store on the same data (another connection to the SQLite file; the same object in
process), which is what a second process sees. Time is a fake clock, so escalation and expiry happen
without sleeping.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from citadel.config import CitadelConfig
from citadel.errors import Conflict, InvalidRequest, InvalidTenant, NotFound
from citadel.state.base import StateUnavailable
from citadel.tools.approvals import (MAX_ARGS_CHARS, MAX_COMMENT_CHARS, Approval, ApprovalStatus, ApprovalStore,
                                     TaskKind)
from citadel.tools.factory import make_approval_store
from tests.conformance.suites.store_pair import StorePairFixtures
from tests.settable_clock import SettableClock

REPO = Path(__file__).resolve().parents[3]
START = 1_800_000_000.0
ESCALATE_AFTER_S, EXPIRE_AFTER_S = 3_600.0, 86_400.0
TOOL = "crm.create_discount_approval"
DEAL_DESK, LEADS, SALES = "deal-desk", "deal-desk-leads", "sales"
ARGS = {"account_id": "acme", "discount_pct": 12, "term_months": 24, "note": "renewal — Q3", "tags": ["a", "b"]}
HEX_ID = re.compile(r"[0-9a-f]{32}")
RACE_APPROVALS, RACE_THREADS = 30, 4


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(START)


class Backend:
    """Opens stores of one backend on one shared place (a file, or one in-process store)."""

    def __init__(self, kind: str, clock: SettableClock, tmp_path: Path):
        self.kind, self.clock, self.home = kind, clock, tmp_path
        self.path = tmp_path / "approvals.sqlite"
        self.opened: list = []
        self.first = None

    def open(self) -> ApprovalStore:
        if self.kind == "memory" and self.first is not None:
            return self.first  # one process: the peer is the same store
        store = make_approval_store(CitadelConfig(home=self.home), self.clock,
                                    backend="memory" if self.kind == "memory" else None)
        self.opened.append(store)
        self.first = self.first or store
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


def new_approval(step_id: str = "s1", *, run_id: str = "r1", clock: SettableClock | None = None,
                 **fields) -> Approval:
    """A request as a run makes it: deadlines from now (the clock's, or START)."""
    now = clock.now if clock is not None else START
    values = dict(tenant_id="northwind", tool=TOOL, requester="sam", proposed_args=dict(ARGS),
                  approver_group=DEAL_DESK, lead_group=LEADS, escalate_at=now + ESCALATE_AFTER_S,
                  expire_at=now + EXPIRE_AFTER_S)
    values.update(fields)
    return Approval(values.pop("approval_id", ""), run_id=run_id, step_id=step_id, **values)


def ids(approvals) -> list[str]:
    return [a.approval_id for a in approvals]


_DECIDE_CHILD = """
import sys
from citadel.errors import Conflict
from citadel.tools.approvals import ApprovalStatus
from citadel.tools.approvals_sqlite import SQLiteApprovalStore
store = SQLiteApprovalStore(sys.argv[1], lambda: 1_800_000_100.0)
won = []
for approval_id in sys.argv[3].split(","):
    try:
        store.decide(approval_id, ApprovalStatus(sys.argv[2]), "proc-" + sys.argv[2], None)
        won.append(approval_id)
    except Conflict:
        pass
print(",".join(won))
store.close()
"""


class ApprovalStoreConformance(StorePairFixtures):
    """The ApprovalStore contract; the fixtures (`backend`, `store`, `peer`): StorePairFixtures."""

    def test_factory_picks_the_backend_and_satisfies_the_protocol(self, backend, store):
        expected = {"memory": "MemoryApprovalStore", "sqlite": "SQLiteApprovalStore"}[backend.kind]
        assert type(store).__name__ == expected
        assert isinstance(store, ApprovalStore)
        assert backend.path.exists() == (backend.kind == "sqlite")  # at config.home / "approvals.sqlite"

    def test_request_assigns_an_id_and_stores_a_pending_approval_both_stores_read(self, store, peer, clock):
        clock.now = START + 7
        asked = new_approval(status=ApprovalStatus.APPROVED, escalated=True, final_args={"x": 1}, decided_by="mallory",
                             decided_at=1.0, comment="pre-approved", created_at=2.0, honeypot=True)
        stored = store.request(asked)
        assert HEX_ID.fullmatch(stored.approval_id)
        # The lifecycle is the store's: whatever the caller passed, it starts pending and undecided, now.
        assert stored.status is ApprovalStatus.PENDING and not stored.escalated
        assert (stored.final_args, stored.decided_by, stored.decided_at, stored.comment) == (None, None, None, "")
        assert stored.created_at == START + 7
        assert stored.honeypot is True  # …while what describes the request is kept
        assert (stored.tenant_id, stored.run_id, stored.step_id, stored.tool, stored.requester) == \
               ("northwind", "r1", "s1", TOOL, "sam")
        assert (stored.approver_group, stored.lead_group) == (DEAL_DESK, LEADS)
        assert (stored.escalate_at, stored.expire_at) == (START + ESCALATE_AFTER_S, START + EXPIRE_AFTER_S)
        assert stored.proposed_args == ARGS
        for reader in (store, peer):
            assert reader.get(stored.approval_id) == stored
            assert reader.for_step("r1", "s1") == stored
            assert type(reader.get(stored.approval_id).status) is ApprovalStatus
        assert store.get("nope") is None and store.for_step("r1", "s2") is None and store.for_step("r2", "s1") is None
        other = store.request(new_approval("s2"))
        assert HEX_ID.fullmatch(other.approval_id) and other.approval_id != stored.approval_id

    def test_request_is_idempotent_per_step(self, store, peer, clock):
        first = store.request(new_approval(proposed_args={"discount_pct": 12}))
        clock.now += 600  # a resumed run asks again after a crash, later, maybe with other arguments
        again = peer.request(new_approval(proposed_args={"discount_pct": 40}, clock=clock, honeypot=True))
        assert again == first
        assert store.request(new_approval(approval_id="explicit-id")) == first
        assert peer.get("explicit-id") is None
        assert ids(store.list("northwind", [DEAL_DESK])) == [first.approval_id]
        # …also once decided: the step's approval is the one that was decided.
        decided = store.decide(first.approval_id, ApprovalStatus.REJECTED, "dana", None, "no")
        assert peer.request(new_approval()) == decided
        # The same step id in another run is another approval.
        assert store.request(new_approval(run_id="r2")).approval_id != first.approval_id

    def test_an_explicit_id_is_kept_and_one_taken_by_another_step_is_a_conflict(self, store, peer):
        kept = store.request(new_approval(approval_id="appr-1"))
        assert kept.approval_id == "appr-1" and peer.get("appr-1") == kept
        with pytest.raises(Conflict):
            peer.request(new_approval("s2", approval_id="appr-1"))
        assert store.for_step("r1", "s2") is None
        assert store.get("appr-1") == kept

    @pytest.mark.parametrize("fields, error", [
        ({"tenant_id": "North Wind"}, InvalidTenant),
        ({"tenant_id": ""}, InvalidTenant),
        ({"proposed_args": ["not", "an", "object"]}, InvalidRequest),
        ({"proposed_args": {"pct": float("nan")}}, InvalidRequest),
        ({"proposed_args": {"when": object()}}, InvalidRequest),
        ({"proposed_args": {"blob": "x" * MAX_ARGS_CHARS}}, InvalidRequest),
        ({"approver_group": ""}, InvalidRequest),
        ({"lead_group": ""}, InvalidRequest),
        ({"requester": None}, InvalidRequest),
        ({"tool": "x" * 300}, InvalidRequest),
        ({"expire_at": float("nan")}, InvalidRequest),
        ({"escalate_at": float("inf")}, InvalidRequest),
        ({"escalate_at": "soon"}, InvalidRequest),
        ({"approval_id": "bad\nid"}, InvalidRequest),
    ])
    def test_invalid_requests_are_refused_and_store_nothing(self, store, fields, error):
        with pytest.raises(error):
            store.request(new_approval(**fields))
        assert store.for_step("r1", "s1") is None
        assert store.list("northwind", [DEAL_DESK, LEADS, ""], status=None) == []

    def test_invalid_step_ids_are_refused(self, store):
        for bad in ("", None):
            with pytest.raises(InvalidRequest):
                store.request(new_approval(bad))
        with pytest.raises(InvalidRequest):
            store.request(new_approval(run_id=""))

    def test_arguments_round_trip_as_json_and_reads_are_copies(self, store, peer):
        stored = store.request(new_approval(proposed_args={"pct": 12.5, "ok": True, "none": None, "pair": (1, 2),
                                                           "nested": {"deep": ["x", {"y": 1}]}}))
        expected = {"pct": 12.5, "ok": True, "none": None, "pair": [1, 2], "nested": {"deep": ["x", {"y": 1}]}}
        assert stored.proposed_args == expected  # a tuple reads back as a list, in process too
        got = peer.get(stored.approval_id)
        assert got.proposed_args == expected
        got.proposed_args["pct"] = 99
        got.proposed_args["nested"]["deep"].append("mutated")
        stored.proposed_args["ok"] = False
        assert store.get(stored.approval_id).proposed_args == expected  # the store's copy did not change
        decided = store.decide(stored.approval_id, ApprovalStatus.APPROVED, "dana", None)
        decided.final_args["pct"] = 1
        assert peer.get(stored.approval_id).final_args == expected
        assert json.loads(json.dumps(peer.get(stored.approval_id).to_dict()))["status"] == "approved"

    def test_list_filters_by_tenant_group_and_status_oldest_first(self, store, peer, clock):
        made = {}
        for n, (step, tenant, group) in enumerate([("a", "northwind", DEAL_DESK), ("b", "globex", DEAL_DESK),
                                                   ("c", "northwind", "legal"), ("d", "northwind", DEAL_DESK),
                                                   ("e", "northwind", DEAL_DESK)]):
            clock.now = START + 10 * n
            made[step] = (store if n % 2 else peer).request(new_approval(step, tenant_id=tenant, approver_group=group,
                                                                         clock=clock))
        assert ids(store.list("northwind", [DEAL_DESK])) == ids([made["a"], made["d"], made["e"]])
        assert ids(peer.list("globex", [DEAL_DESK])) == ids([made["b"]])
        assert ids(store.list("northwind", ["legal"])) == ids([made["c"]])
        assert ids(store.list("northwind", ["legal", DEAL_DESK, "other"])) == ids([made[s] for s in "acde"])
        assert ids(store.list("northwind", (g for g in ["legal"]))) == ids([made["c"]])  # any iterable
        assert ids(store.list("northwind", "legal")) == ids([made["c"]])  # a bare group is one group, not letters
        assert store.list("northwind", []) == [] and store.list("northwind", [SALES]) == []
        assert store.list("initech", [DEAL_DESK]) == []
        # Status: pending by default, any one status, or every status with None.
        store.decide(made["d"].approval_id, ApprovalStatus.APPROVED, "dana", None)
        peer.decide(made["a"].approval_id, ApprovalStatus.REJECTED, "dana", None)
        assert ids(store.list("northwind", [DEAL_DESK])) == ids([made["e"]])
        assert ids(store.list("northwind", [DEAL_DESK], ApprovalStatus.APPROVED)) == ids([made["d"]])
        assert ids(store.list("northwind", [DEAL_DESK], status=ApprovalStatus.REJECTED)) == ids([made["a"]])
        assert store.list("northwind", [DEAL_DESK], status=ApprovalStatus.EXPIRED) == []
        assert ids(store.list("northwind", [DEAL_DESK], status=None)) == ids([made["a"], made["d"], made["e"]])
        assert [a.status for a in store.list("northwind", [DEAL_DESK], status=None)] == \
               [ApprovalStatus.REJECTED, ApprovalStatus.APPROVED, ApprovalStatus.PENDING]

    def test_pending_counts_cover_every_tenant_by_tool_and_kind(self, store, peer, clock):
        assert store.pending_counts() == {}
        made = [store.request(new_approval("a", clock=clock)), peer.request(new_approval("b", tenant_id="globex")),
                store.request(new_approval("c", tool="crm.refund")),
                store.request(new_approval("d", kind=TaskKind.REVIEW, reason="conflict_undated"))]
        store.request(new_approval("a", clock=clock))  # asked again after a crash: still one
        assert peer.pending_counts() == {(TOOL, "approval"): 2, ("crm.refund", "approval"): 1, (TOOL, "review"): 1}
        store.decide(made[0].approval_id, ApprovalStatus.APPROVED, "dana", None)
        assert store.pending_counts()[(TOOL, "approval")] == 1

    def test_list_is_oldest_first_by_creation_time_not_by_insertion(self, store, clock):
        clock.now = START + 100
        late = store.request(new_approval("late"))
        clock.now = START + 50  # another process's clock, slightly behind
        early = store.request(new_approval("early"))
        clock.now = START + 100
        tie = store.request(new_approval("tie"))
        assert ids(store.list("northwind", [DEAL_DESK])) == ids([early, late, tie])  # ties: in request order

    def test_list_is_bounded_by_its_limit(self, store, clock):
        made = []
        for n in range(5):
            clock.now = START + n
            made.append(store.request(new_approval(f"s{n}", clock=clock)))
        assert ids(store.list("northwind", [DEAL_DESK], limit=2)) == ids(made[:2])
        assert ids(store.list("northwind", [DEAL_DESK], limit=10**9)) == ids(made)
        assert store.list("northwind", [DEAL_DESK], limit=0) == []
        assert store.list("northwind", [DEAL_DESK], limit=-1) == []

    def test_the_lead_group_lists_an_approval_only_once_it_is_escalated(self, store, peer, clock):
        approval = store.request(new_approval())
        no_lead = store.request(new_approval("s2", lead_group=None))
        assert store.list("northwind", [LEADS]) == []
        clock.now = START + ESCALATE_AFTER_S - 1
        assert store.sweep() == ([], [])
        assert peer.list("northwind", [LEADS]) == []
        clock.now = START + ESCALATE_AFTER_S
        escalated, expired = peer.sweep()
        assert sorted(ids(escalated)) == sorted(ids([approval, no_lead])) and expired == []
        assert ids(store.list("northwind", [LEADS])) == [approval.approval_id]
        assert store.get(approval.approval_id).deciders() == (DEAL_DESK, LEADS)
        assert ids(store.list("northwind", [DEAL_DESK])) == ids([approval, no_lead])  # the approvers still see it
        assert store.list("globex", [LEADS]) == []

    def test_decide_records_who_when_and_what(self, store, peer, clock):
        approved = store.request(new_approval("s1"))
        edited = store.request(new_approval("s2"))
        rejected = store.request(new_approval("s3"))
        clock.now = START + 120
        got = peer.decide(approved.approval_id, ApprovalStatus.APPROVED, "dana", None, "fine")
        assert got.status is ApprovalStatus.APPROVED and got.final_args == ARGS  # the proposed arguments
        assert (got.decided_by, got.decided_at, got.comment) == ("dana", START + 120, "fine")
        assert got.proposed_args == ARGS and got.created_at == START
        assert store.get(approved.approval_id) == got
        clock.now = START + 130
        change = {**ARGS, "term_months": 12}
        got = store.decide(edited.approval_id, "approved", "dana", change)  # a plain string of a member, no comment
        assert got.status is ApprovalStatus.APPROVED and type(got.status) is ApprovalStatus
        assert (got.proposed_args, got.final_args, got.comment, got.decided_at) == (ARGS, change, "", START + 130)
        assert peer.get(edited.approval_id) == got
        got = store.decide(rejected.approval_id, ApprovalStatus.REJECTED, "lee", None, "too much")
        assert (got.status, got.final_args, got.decided_by) == (ApprovalStatus.REJECTED, None, "lee")
        assert peer.for_step("r1", "s3") == got

    def test_a_second_decision_is_a_conflict_and_changes_nothing(self, store, peer, clock):
        approval = store.request(new_approval())
        first = store.decide(approval.approval_id, ApprovalStatus.REJECTED, "dana", None, "no")
        clock.now += 5
        for decider, status in ((peer, ApprovalStatus.APPROVED), (store, ApprovalStatus.REJECTED)):
            with pytest.raises(Conflict) as raised:
                decider.decide(approval.approval_id, status, "lee", {"discount_pct": 1}, "overrule")
            assert raised.value.http_status == 409 and raised.value.code == "approval_decided"
        assert store.get(approval.approval_id) == peer.get(approval.approval_id) == first

    def test_an_unknown_approval_is_not_found(self, store):
        with pytest.raises(NotFound) as raised:
            store.decide("ghost", ApprovalStatus.APPROVED, "dana", None)
        assert raised.value.http_status == 404
        assert store.get("ghost") is None

    @pytest.mark.parametrize("status, decided_by, final_args, comment", [
        (ApprovalStatus.PENDING, "dana", None, ""),
        (ApprovalStatus.EXPIRED, "dana", None, ""),
        ("maybe", "dana", None, ""),
        (ApprovalStatus.APPROVED, "", None, ""),
        (ApprovalStatus.APPROVED, "dana", ["not", "an", "object"], ""),
        (ApprovalStatus.APPROVED, "dana", {"pct": float("inf")}, ""),
        (ApprovalStatus.APPROVED, "dana", {"blob": "x" * MAX_ARGS_CHARS}, ""),
        (ApprovalStatus.REJECTED, "dana", None, "x" * (MAX_COMMENT_CHARS + 1)),
    ])
    def test_invalid_decisions_are_refused_and_leave_it_pending(self, store, status, decided_by, final_args, comment):
        approval = store.request(new_approval())
        with pytest.raises(InvalidRequest):
            store.decide(approval.approval_id, status, decided_by, final_args, comment)
        assert store.get(approval.approval_id) == approval
        assert store.decide(approval.approval_id, ApprovalStatus.APPROVED, "dana", None).status is ApprovalStatus.APPROVED

    def test_concurrent_decisions_from_two_stores_have_exactly_one_winner(self, store, peer):
        approvals = [store.request(new_approval(f"s{n}")).approval_id for n in range(RACE_APPROVALS)]
        barrier = threading.Barrier(RACE_THREADS)
        won: dict[str, list[str]] = {}
        statuses: dict[str, ApprovalStatus] = {}
        conflicts: dict[str, int] = {}
        errors: list[BaseException] = []

        def decide_all(worker: int) -> None:
            target, name = (store if worker % 2 else peer), f"reviewer-{worker}"
            order = list(approvals)
            random.Random(worker).shuffle(order)
            status = ApprovalStatus.APPROVED if worker % 2 else ApprovalStatus.REJECTED
            won[name], conflicts[name], statuses[name] = [], 0, status
            try:
                barrier.wait()
                for approval_id in order:
                    try:
                        target.decide(approval_id, status, name, None, f"by {name}")
                        won[name].append(approval_id)
                    except Conflict:
                        conflicts[name] += 1
            except BaseException as error:  # noqa: BLE001 (reported below, in the test's thread)
                errors.append(error)

        threads = [threading.Thread(target=decide_all, args=(w,)) for w in range(RACE_THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        winners = sorted(approval_id for ids_ in won.values() for approval_id in ids_)
        assert winners == sorted(approvals)  # each decided exactly once…
        assert sum(conflicts.values()) == RACE_APPROVALS * (RACE_THREADS - 1)  # …and every loser was told
        for name, ids_ in won.items():
            for approval_id in ids_:
                stored = store.get(approval_id)
                assert stored.decided_by == name and stored.comment == f"by {name}"
                assert stored.status is statuses[name]

    def test_sweep_escalates_then_expires_at_the_right_times_reporting_each_once(self, store, peer, clock):
        approval = store.request(new_approval())
        escalate_at, expire_at = START + ESCALATE_AFTER_S, START + EXPIRE_AFTER_S
        clock.now = escalate_at - 0.001
        assert store.sweep() == ([], [])
        assert store.get(approval.approval_id) == approval
        clock.now = escalate_at
        escalated, expired = peer.sweep()
        assert ids(escalated) == [approval.approval_id] and expired == []
        assert escalated[0].escalated and escalated[0].status is ApprovalStatus.PENDING
        assert escalated[0].deciders() == (DEAL_DESK, LEADS)
        assert store.get(approval.approval_id) == escalated[0]
        clock.now = escalate_at + 1
        assert store.sweep() == ([], []) and peer.sweep() == ([], [])  # reported once
        clock.now = expire_at - 0.001
        assert store.sweep() == ([], [])
        clock.now = expire_at
        escalated, expired = store.sweep()
        assert escalated == [] and ids(expired) == [approval.approval_id]
        gone = expired[0]
        assert gone.status is ApprovalStatus.EXPIRED and gone.decided_at == expire_at
        assert (gone.decided_by, gone.final_args) == (None, None)
        assert peer.get(approval.approval_id) == gone
        clock.now = expire_at + 10
        assert store.sweep() == ([], []) and peer.sweep() == ([], [])  # reported once
        assert store.list("northwind", [DEAL_DESK, LEADS]) == []
        assert ids(store.list("northwind", [DEAL_DESK], ApprovalStatus.EXPIRED)) == [approval.approval_id]

    def test_sweep_takes_an_explicit_time(self, store, clock):
        approval = store.request(new_approval())
        assert store.sweep(now=START + ESCALATE_AFTER_S - 1) == ([], [])
        escalated, expired = store.sweep(now=START + EXPIRE_AFTER_S)  # the clock still says START
        assert ids(expired) == [approval.approval_id] and expired[0].decided_at == START + EXPIRE_AFTER_S
        assert escalated == []  # past both deadlines at once: expired, not escalated on its way out
        assert store.get(approval.approval_id).status is ApprovalStatus.EXPIRED

    def test_an_expired_approval_is_never_approved(self, store, peer, clock):
        approval = store.request(new_approval())
        clock.now = START + EXPIRE_AFTER_S  # due, but no sweep has run yet
        for decider in (store, peer):
            with pytest.raises(Conflict) as raised:
                decider.decide(approval.approval_id, ApprovalStatus.APPROVED, "dana", None)
            assert raised.value.code == "approval_expired"
        assert store.get(approval.approval_id).status is ApprovalStatus.PENDING  # refused, not decided
        assert store.get(approval.approval_id).final_args is None
        escalated, expired = peer.sweep()
        assert ids(expired) == [approval.approval_id]  # the refusal did not hide it from the sweep
        with pytest.raises(Conflict) as raised:
            store.decide(approval.approval_id, ApprovalStatus.APPROVED, "dana", None)
        assert raised.value.code == "approval_expired"
        with pytest.raises(Conflict):
            store.decide(approval.approval_id, ApprovalStatus.REJECTED, "dana", None)
        final = store.get(approval.approval_id)
        assert final.status is ApprovalStatus.EXPIRED and final.decided_by is None and final.final_args is None
        assert store.list("northwind", [DEAL_DESK], ApprovalStatus.APPROVED) == []

    def test_a_decision_just_before_expiry_stands_and_the_sweep_leaves_it(self, store, clock):
        approval = store.request(new_approval())
        clock.now = START + EXPIRE_AFTER_S - 0.001
        store.decide(approval.approval_id, ApprovalStatus.APPROVED, "dana", None)
        clock.now = START + EXPIRE_AFTER_S * 10
        assert store.sweep() == ([], [])
        assert store.get(approval.approval_id).status is ApprovalStatus.APPROVED

    def test_silence_without_deadlines_never_expires_or_escalates(self, store, clock):
        forever = store.request(new_approval("forever", escalate_at=None, expire_at=None))
        late = store.request(new_approval("no-escalation", escalate_at=None))
        clock.now = START + 10 * EXPIRE_AFTER_S
        escalated, expired = store.sweep()
        assert escalated == [] and ids(expired) == [late.approval_id]
        assert store.get(forever.approval_id) == forever  # pending, not approved, not escalated

    def test_sweep_leaves_decided_approvals_alone(self, store, clock):
        approved = store.request(new_approval("s1"))
        rejected = store.request(new_approval("s2"))
        store.decide(approved.approval_id, ApprovalStatus.APPROVED, "dana", None)
        store.decide(rejected.approval_id, ApprovalStatus.REJECTED, "dana", None)
        before = [store.get(approved.approval_id), store.get(rejected.approval_id)]
        clock.now = START + 2 * EXPIRE_AFTER_S
        assert store.sweep() == ([], [])
        assert [store.get(approved.approval_id), store.get(rejected.approval_id)] == before

    def test_sweep_reports_several_in_deadline_order(self, store, clock):
        made = []
        for n, offset in enumerate([30.0, 10.0, 20.0]):
            made.append(store.request(new_approval(f"s{n}", escalate_at=START + offset, expire_at=START + 100 + offset)))
        clock.now = START + 25
        escalated, _ = store.sweep()
        assert ids(escalated) == ids([made[1], made[2]])
        clock.now = START + 1_000
        escalated, expired = store.sweep()
        assert escalated == []  # made[0] passed both deadlines: expired, never escalated
        assert ids(expired) == ids([made[1], made[2], made[0]])

    def test_concurrent_sweeps_from_two_stores_report_each_approval_once(self, store, peer, clock):
        made = sorted(store.request(new_approval(f"s{n}")).approval_id for n in range(RACE_APPROVALS))
        reports: list[tuple[list, list]] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(RACE_THREADS)

        def sweep(worker: int, at: float) -> None:
            try:
                barrier.wait()
                reports.append((store if worker % 2 else peer).sweep(now=at))
            except BaseException as error:  # noqa: BLE001
                errors.append(error)

        for at in (START + ESCALATE_AFTER_S, START + EXPIRE_AFTER_S):
            reports.clear()
            threads = [threading.Thread(target=sweep, args=(w, at)) for w in range(RACE_THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            assert not errors, errors
            kind = 0 if at == START + ESCALATE_AFTER_S else 1
            assert sorted(ids(a for report in reports for a in report[kind])) == made
            assert [a for report in reports for a in report[1 - kind]] == []

    def test_sqlite_decisions_from_two_processes_have_exactly_one_winner(self, backend, store):
        if backend.kind != "sqlite":
            pytest.skip("two processes share a SQLite file")
        made = [store.request(new_approval(f"s{n}")).approval_id for n in range(RACE_APPROVALS)]
        children = [subprocess.Popen([sys.executable, "-c", _DECIDE_CHILD, str(backend.path), status, ",".join(order)],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for status, order in (("approved", made), ("rejected", made[::-1]))]
        outputs = [child.communicate(timeout=120) for child in children]
        assert all(child.returncode == 0 for child in children), [err for _, err in outputs]
        approved, rejected = ([i for i in out.strip().split(",") if i] for out, _ in outputs)
        assert sorted(approved + rejected) == sorted(made)  # disjoint and complete: one winner each
        for approval_id in made:
            stored = store.get(approval_id)
            expected = "approved" if approval_id in approved else "rejected"
            assert (stored.status, stored.decided_by) == (expected, f"proc-{expected}")

    def test_sqlite_survives_reopening(self, backend, store, clock):
        if backend.kind != "sqlite":
            pytest.skip("only a file outlives its store object")
        approval = store.request(new_approval())
        store.close()
        backend.opened.remove(store)
        reopened = backend.open()
        assert reopened.get(approval.approval_id) == approval
        assert reopened.request(new_approval()) == approval

    def test_an_unusable_sqlite_file_raises_state_unavailable_without_the_driver_message(self, backend, tmp_path, clock):
        if backend.kind != "sqlite":
            pytest.skip("the in-process store has no file")
        blocked = tmp_path / "blocked"
        (blocked / "approvals.sqlite").mkdir(parents=True)  # a directory where the file should be
        with pytest.raises(StateUnavailable) as raised:
            make_approval_store(CitadelConfig(home=blocked), clock)
        assert "unable to open" not in str(raised.value)
