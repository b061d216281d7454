"""Approvals over HTTP, against the example CRM on loopback: a sales user's run
proposes a 12% 24-month discount approval for Acme and parks; a deal-desk reviewer sees it, is refused
at 20% by the limit, edits the term and approves; the run resumes, the CRM holds one approval, and the
run answers with its id. Bad input: unknown approval 404, a non-member 403, a second decision 409,
edits that fail the schema 422 — never a 500."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from examples.crm.__main__ import db_path
from examples.crm.store import CrmStore
from tests.integration.conftest import make_home
from tests.integration.test_api import client_for
from tests.integration.test_tool_calls import ScriptedPlanner
from tests.integration.tool_servers import tool_servers
from tests.settable_clock import SettableClock

REPO = Path(__file__).resolve().parents[2]
SAM = {"tenant": "northwind", "user": "sam", "groups": ("sales",)}
DANA = {"tenant": "northwind", "user": "dana", "groups": ("deal-desk",)}
PROPOSAL = {"id": "s1", "ask": "propose the multi-year discount", "tool": "crm.create_discount_approval",
            "args": {"account_id": "acme", "discount_pct": 12, "term_months": 24}}


@pytest.fixture
def clock():
    return SettableClock(time.time())


@pytest.fixture
def deployment(tmp_path, clock):
    home = make_home(tmp_path / "home", CITADEL_TOOLS__REGISTRY_FILE=str(REPO / "examples" / "crm" / "tools.yaml"))
    with tool_servers(home.config):  # the token service and the CRM on loopback
        with client_for(home, clock=clock) as client:
            client.app.state.services.wiring.orchestrator.planner = ScriptedPlanner([PROPOSAL])
            yield home, client, CrmStore(db_path(Path(home.config.home).resolve()))
            client.app.state.services.runs.wait_for_runs(60)


def events_of(client, home, run_id: str, now: float | None = None) -> list[dict]:
    return client.get(f"/v1/runs/{run_id}/events",
                      headers={**home.headers(**SAM, now=now), "accept": "application/json"}).json()


def start_run(client, home) -> str:
    conversation = client.post("/v1/conversations", headers=home.headers(**SAM)).json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", headers=home.headers(**SAM),
                         json={"content": "Acme renews next month. Are they eligible for the multi-year discount? "
                                          "Propose 12% for 24 months."})
    assert posted.status_code == 202, posted.text
    client.app.state.services.runs.wait_for_runs(60)
    return posted.json()["run_id"]


def test_the_proposal_parks_the_run_until_a_reviewer_edits_and_approves_it(deployment):
    home, client, crm = deployment
    run_id = start_run(client, home)
    run = client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()
    assert run["status"] == "waiting"
    [required] = [e["data"] for e in events_of(client, home, run_id) if e["type"] == "approval_required"]
    assert required["tool"] == "crm.create_discount_approval" and required["approver_group"] == "deal-desk"
    assert crm.count_approvals("northwind") == 0  # nothing happens before a person decides

    assert client.get("/v1/approvals", headers=home.headers(**SAM)).json()["approvals"] == []  # not a reviewer
    [pending] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    assert pending["approval_id"] == required["approval_id"] and pending["proposed_args"]["discount_pct"] == 12
    decide = f"/v1/approvals/{pending['approval_id']}:decide"

    too_much = client.post(decide, headers=home.headers(**DANA),
                           json={"decision": "edit_and_approve", "edits": {"discount_pct": 20}})
    assert too_much.status_code == 403 and too_much.json()["error"]["code"] == "outside_limits"
    approved = client.post(decide, headers=home.headers(**DANA),
                           json={"decision": "edit_and_approve", "edits": {"term_months": 36}, "comment": "3 years"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["final_args"] == {"account_id": "acme", "discount_pct": 12, "term_months": 36}
    assert approved.json()["decided_by"] == "dana"
    assert client.post(decide, headers=home.headers(**DANA), json={"decision": "reject"}).status_code == 409

    client.app.state.services.runs.wait_for_runs(60)
    deadline = time.monotonic() + 30
    while client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()["status"] != "succeeded":
        assert time.monotonic() < deadline, "the approved run never finished"
        time.sleep(0.1)
    assert crm.count_approvals("northwind") == 1
    [record] = crm.list_approvals("northwind", "acme")
    assert record.term_months == 36 and record.discount_pct == 12 and record.requested_by == "sam"
    final = [e["data"] for e in events_of(client, home, run_id) if e["type"] == "final"][-1]
    assert record.approval_id in final["answer"]
    assert [a["status"] for a in final["actions"]] == ["ok"]


def test_bad_decisions_get_clear_errors(deployment):
    home, client, crm = deployment
    start_run(client, home)
    [pending] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    decide = f"/v1/approvals/{pending['approval_id']}:decide"
    assert client.post("/v1/approvals/nope:decide", headers=home.headers(**DANA),
                       json={"decision": "approve"}).status_code == 404
    other_tenant = {**DANA, "tenant": "acme"}
    assert client.post(decide, headers=home.headers(**other_tenant), json={"decision": "approve"}).status_code == 404
    assert client.post(decide, headers=home.headers(**SAM), json={"decision": "approve"}).status_code == 403
    bad = client.post(decide, headers=home.headers(**DANA),
                      json={"decision": "edit_and_approve", "edits": {"term_months": "forever"}})
    assert bad.status_code == 422
    assert client.post(decide, headers=home.headers(**DANA), json={"decision": "maybe"}).status_code == 422
    rejected = client.post(decide, headers=home.headers(**DANA), json={"decision": "reject", "comment": "no"})
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert crm.count_approvals("northwind") == 0


def test_escalation_reaches_the_lead_group_and_expiry_rejects_without_running_the_tool(deployment, clock):
    home, client, crm = deployment
    run_id = start_run(client, home)
    lead = {"tenant": "northwind", "user": "lee", "groups": ("sales-directors",)}
    approvals = client.app.state.services.approvals
    assert client.get("/v1/approvals", headers=home.headers(**lead)).json()["approvals"] == []
    clock.now += 3_601  # past escalate_after_s (1 h): the lead group may decide it too
    assert approvals.sweep() == (1, 0)
    [escalated] = client.get("/v1/approvals", headers=home.headers(**lead, now=clock.now)).json()["approvals"]
    assert escalated["escalated"] and "sales-directors" in escalated["deciders"]
    clock.now += 86_400  # past expire_after_s: silence never approves, expiry counts as rejected
    assert approvals.sweep() == (0, 1)
    client.app.state.services.runs.wait_for_runs(60)
    final = [e["data"] for e in events_of(client, home, run_id, clock.now) if e["type"] == "final"][-1]
    assert [a["error"] for a in final["actions"]] == ["approval_expired"]
    assert "Not done: crm.create_discount_approval (approval_expired)." in final["answer"]
    assert crm.count_approvals("northwind") == 0
    stages = [e["data"].get("stage") for e in events_of(client, home, run_id, clock.now) if e["type"] == "progress"]
    assert "approval_escalated" in stages and "approval_decided" in stages


# ---------------------------------------------------------------------- reviews that mean something (item 6)
# Honeypots are planted here straight through the store (the orchestrator's planting is wired
# elsewhere); the service is built with the process's metrics and candidate queue.
import json  # noqa: E402

from citadel.tools.honeypots import HONEYPOT_RUN_PREFIX, HoneypotPlanter  # noqa: E402
from citadel.quality.candidates import CandidateQueue  # noqa: E402
from serving.services.approvals import ApprovalsService  # noqa: E402

DISCOUNT_TOOL = "crm.create_discount_approval"


@pytest.fixture
def reviews(deployment):
    home, client, crm = deployment
    services = client.app.state.services
    services.approvals = ApprovalsService(services.wiring.approval_store, services.wiring.run_store,
                                          services.wiring.tool_policy, services.runs.resume,
                                          metrics=services.metrics, candidates=services.approvals.candidates)
    return home, client, crm, services


def real_pending(client, home, run_id: str, now: float | None = None) -> dict:
    """The run's own pending approval (whatever else a reviewer's list holds)."""
    listed = client.get("/v1/approvals", headers=home.headers(**DANA, now=now)).json()["approvals"]
    [mine] = [a for a in listed if a["run_id"] == run_id]
    return mine


def plant(services, approval_id: str, **planter_options) -> str:
    """A honeypot twin of the stored approval, stored; its id."""
    store = services.wiring.approval_store
    original = store.get(approval_id)
    planter = HoneypotPlanter(1.0, **{"seed": 1, **planter_options})
    honeypot = planter.maybe_plant(original, services.wiring.tool_policy.spec(original.tool))
    return store.request(honeypot).approval_id


def sample(services, name: str, **labels) -> float:
    return services.metrics.registry.get_sample_value(name, labels) or 0.0


def test_approving_a_honeypot_tells_the_reviewer_at_once_runs_nothing_and_counts_a_miss(reviews):
    home, client, crm, services = reviews
    run_id = start_run(client, home)
    real = real_pending(client, home, run_id)
    honeypot_id = plant(services, real["approval_id"])
    events_before = len(events_of(client, home, run_id))

    listed = {a["approval_id"]: a for a in client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]}
    shown = listed[honeypot_id]
    assert set(shown) == set(listed[real["approval_id"]]) and "honeypot" not in shown  # looks like any request
    assert not shown["run_id"].startswith(HONEYPOT_RUN_PREFIX) and len(shown["run_id"]) == 32
    assert shown["proposed_args"]["discount_pct"] > 15 and shown["tool"] == DISCOUNT_TOOL

    decide = f"/v1/approvals/{honeypot_id}:decide"
    assert client.post(decide, headers=home.headers(**SAM), json={"decision": "approve"}).status_code == 403
    approved = client.post(decide, headers=home.headers(**DANA), json={"decision": "approve", "comment": "ok"})
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert body["honeypot"] is True and body["caught"] is False and body["status"] == "approved"
    assert body["message"].startswith("This was a deliberately wrong test request")
    assert "above the limit of 15" in body["message"] and body["decided_by"] == "dana"
    assert client.post(decide, headers=home.headers(**DANA), json={"decision": "reject"}).status_code == 409

    services.runs.wait_for_runs(60)
    assert crm.count_approvals("northwind") == 0  # nothing ran
    assert client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()["status"] == "waiting"
    assert len(events_of(client, home, run_id)) == events_before  # the real run heard nothing
    assert real_pending(client, home, run_id)["status"] == "pending"
    assert services.wiring.approval_store.get(honeypot_id).decided_by == "dana"  # the miss is a record

    # editing a honeypot and approving it is approving it all the same: told at once, nothing runs
    edited_id = plant(services, real["approval_id"], seed=4)
    edited = client.post(f"/v1/approvals/{edited_id}:decide", headers=home.headers(**DANA),
                         json={"decision": "edit_and_approve", "edits": {"discount_pct": 10}})
    assert edited.status_code == 200, edited.text
    assert edited.json()["honeypot"] is True and edited.json()["caught"] is False
    assert edited.json()["final_args"]["discount_pct"] == 10
    services.runs.wait_for_runs(60)
    assert crm.count_approvals("northwind") == 0 and len(events_of(client, home, run_id)) == events_before

    assert sample(services, "citadel_honeypots_total", team="deal-desk", outcome="missed") == 2
    assert sample(services, "citadel_honeypots_total", team="deal-desk", outcome="caught") == 0
    assert sample(services, "citadel_approval_decisions_total", tool=DISCOUNT_TOOL, decision="approved") == 0
    stats = services.approvals.review_stats("northwind")
    assert stats["teams"] == {"deal-desk": {"caught": 0, "missed": 2, "expired": 0, "catch_rate": 0.0}}
    assert stats["tools"] == {}  # a honeypot is no real approval of the tool
    assert services.wiring.catalog.candidates("northwind") == []  # nor a candidate test item
    metrics_text = client.get("/metrics", headers=home.metrics_headers()).text
    assert 'citadel_honeypots_total{outcome="missed",team="deal-desk"} 2.0' in metrics_text


def test_rejecting_a_honeypot_is_a_catch_and_an_unanswered_one_expires_without_touching_a_run(reviews, clock):
    home, client, crm, services = reviews
    run_id = start_run(client, home)
    real = real_pending(client, home, run_id)
    decoy_id = plant(services, real["approval_id"], seed=2, decoy_accounts=["globex"], decoy_share=1.0)
    over_id = plant(services, real["approval_id"], seed=3)
    assert services.wiring.approval_store.get(decoy_id).proposed_args == \
        {"account_id": "globex", "discount_pct": 12, "term_months": 24}  # fails the 2-year tenure rule

    rejected = client.post(f"/v1/approvals/{decoy_id}:decide", headers=home.headers(**DANA),
                           json={"decision": "reject", "comment": "Globex is not two years a customer"})
    assert rejected.status_code == 200, rejected.text
    assert rejected.json()["honeypot"] is True and rejected.json()["caught"] is True
    assert rejected.json()["status"] == "rejected" and "Well caught" in rejected.json()["message"]
    assert sample(services, "citadel_honeypots_total", team="deal-desk", outcome="caught") == 1
    assert services.wiring.catalog.candidates("northwind") == []  # honeypots are no test items

    lead = {"tenant": "northwind", "user": "lee", "groups": ("sales-directors",)}
    clock.now += 3_601  # the real approval and the honeypot left pending escalate together
    assert services.approvals.sweep() == (2, 0)
    escalated = client.get("/v1/approvals", headers=home.headers(**lead, now=clock.now)).json()["approvals"]
    assert {a["approval_id"] for a in escalated} == {real["approval_id"], over_id}
    clock.now += 86_400  # past expiry: both expire
    assert services.approvals.sweep() == (0, 2)
    services.runs.wait_for_runs(60)
    assert sample(services, "citadel_honeypots_total", team="deal-desk", outcome="expired") == 1
    assert sample(services, "citadel_approval_decisions_total", tool=DISCOUNT_TOOL, decision="expired") == 1
    stages = [e["data"].get("stage") for e in events_of(client, home, run_id, clock.now) if e["type"] == "progress"]
    assert stages.count("approval_decided") == 1 and stages.count("approval_escalated") == 1  # the real one's only
    stats = services.approvals.review_stats("northwind")
    assert stats["teams"]["deal-desk"] == {"caught": 1, "missed": 0, "expired": 1, "catch_rate": 1.0}
    assert stats["tools"][DISCOUNT_TOOL]["expired"] == 1 and stats["tools"][DISCOUNT_TOOL]["approval_rate"] == 0.0
    assert services.wiring.approval_store.get(over_id).status == "expired"
    assert crm.count_approvals("northwind") == 0


def test_edits_and_rejections_of_real_approvals_become_candidate_items_of_the_tool_and_tenant(reviews):
    home, client, crm, services = reviews
    edited_run, rejected_run, plain_run = (start_run(client, home) for _ in range(3))
    edited, rejected, plain = (real_pending(client, home, r) for r in (edited_run, rejected_run, plain_run))
    assert client.post(f"/v1/approvals/{edited['approval_id']}:decide", headers=home.headers(**DANA),
                       json={"decision": "edit_and_approve", "edits": {"term_months": 36},
                             "comment": "3 years, call dana@northwind.example"}).status_code == 200
    assert client.post(f"/v1/approvals/{rejected['approval_id']}:decide", headers=home.headers(**DANA),
                       json={"decision": "reject", "comment": "not this quarter"}).status_code == 200
    assert client.post(f"/v1/approvals/{plain['approval_id']}:decide", headers=home.headers(**DANA),
                       json={"decision": "approve"}).status_code == 200  # as proposed: nothing to learn
    services.runs.wait_for_runs(60)

    catalog = services.wiring.catalog
    queued = catalog.candidates("northwind")
    assert {row["source"] for row in queued} == {f"tool:{DISCOUNT_TOOL}"} and catalog.candidates("acme") == []
    first, second = (row["item"] for row in queued)
    assert [first["approval_id"], second["approval_id"]] == [edited["approval_id"], rejected["approval_id"]]
    assert first["proposed_args"] == PROPOSAL["args"] and first["final_args"] == {**PROPOSAL["args"], "term_months": 36}
    assert (first["decision"], first["reason"], first["tool"]) == \
        ("edit_and_approve", "3 years, call [email]", DISCOUNT_TOOL)  # the reason masked, as the answer log is
    assert second["proposed_args"] == PROPOSAL["args"] and second["final_args"] is None
    assert (second["decision"], second["reason"]) == ("reject", "not this quarter")
    assert all("dana" not in json.dumps(row["item"]) for row in queued)  # the reviewer is in the approval only
    assert all(row["status"] == "pending" for row in queued)


def test_review_stats_give_the_approval_rate_and_median_decision_time_per_tool(reviews, clock):
    home, client, crm, services = reviews
    runs = [start_run(client, home) for _ in range(3)]
    pending = [real_pending(client, home, r)["approval_id"] for r in runs]
    for approval_id, wait_s, decision in zip(pending, (10, 20, 50), ("approve", "reject", "approve")):
        clock.now += wait_s
        answered = client.post(f"/v1/approvals/{approval_id}:decide", headers=home.headers(**DANA, now=clock.now),
                               json={"decision": decision})
        assert answered.status_code == 200, answered.text
    services.runs.wait_for_runs(60)

    stats = services.approvals.review_stats("northwind")
    tool = stats["tools"][DISCOUNT_TOOL]
    assert (tool["approved"], tool["rejected"], tool["expired"], tool["edited"]) == (2, 1, 0, 0)
    assert tool["approval_rate"] == pytest.approx(2 / 3)
    # each approval waited from the run's request: 10 s, 10 + 20 s, 10 + 20 + 50 s
    assert tool["median_decision_s"] == pytest.approx(30, abs=1)
    assert stats["teams"] == {} and stats["truncated"] is False
    assert sample(services, "citadel_approval_decisions_total", tool=DISCOUNT_TOOL, decision="approved") == 2
    assert sample(services, "citadel_approval_decisions_total", tool=DISCOUNT_TOOL, decision="rejected") == 1
    assert sample(services, "citadel_approval_decision_seconds_count", tool=DISCOUNT_TOOL) == 3
    assert sample(services, "citadel_approval_decision_seconds_sum", tool=DISCOUNT_TOOL) == pytest.approx(120, abs=3)
    assert services.approvals.review_stats("acme") == {"tenant_id": "acme", "teams": {}, "tools": {},
                                                       "truncated": False}


def test_concurrent_decisions_queue_each_candidate_once(tmp_path):
    """Eight threads reject 160 approvals with large arguments at once: each is one whole candidate."""
    import concurrent.futures
    from types import SimpleNamespace

    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.tools.approvals import Approval, MemoryApprovalStore
    from citadel.types import Principal

    store = MemoryApprovalStore(time.time)
    runs = SimpleNamespace(append=lambda *a, **k: None, update=lambda *a, **k: None)
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    service = ApprovalsService(store, runs, None, lambda run_id: None, candidates=CandidateQueue(catalog))
    big = {"account_id": "acme", "discount_pct": 12, "term_months": 24, "note": "x" * 50_000}
    ids = [store.request(Approval("", "northwind", f"run-{i}", "s1", DISCOUNT_TOOL, "sam", big, "deal-desk")).approval_id
           for i in range(160)]
    dana = SimpleNamespace(principal=Principal("northwind", "dana", frozenset({"deal-desk"})))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda approval_id: service.decide(dana, approval_id, "reject", None, "no"), ids))
    queued = catalog.candidates("northwind", f"tool:{DISCOUNT_TOOL}")
    assert sorted(row["item"]["approval_id"] for row in queued) == sorted(ids)
    assert all(row["item"]["proposed_args"] == big for row in queued)
    catalog.close()


def test_the_reviewer_sees_the_change_against_the_current_record(deployment):
    home, client, crm = deployment
    crm.create_discount_approval("northwind", "acme", 5, 12, "sam", "earlier-deal")  # the terms in force
    start_run(client, home)
    services = client.app.state.services
    headers = home.headers(**DANA)
    dana = services.access.caller(headers["authorization"], headers["x-citadel-user-context"])
    [item] = services.approvals.review_items(dana)
    assert item["title"] == "crm.create_discount_approval for acme, requested by sam"
    rows = {row["field"]: row for row in item["diff"]}
    assert rows["discount_pct"] == {"field": "discount_pct", "current": "5", "proposed": "12", "changed": True}
    assert rows["term_months"]["current"] == "12" and rows["term_months"]["proposed"] == "24"
    assert rows["account_id"]["changed"] is False
    assert [f["field"] for f in item["editable"]] == ["discount_pct", "term_months"]  # not the account it changes
    assert item["decisions"] == ["approve", "edit_and_approve", "reject"]
    sam_headers = home.headers(**SAM)
    sam = services.access.caller(sam_headers["authorization"], sam_headers["x-citadel-user-context"])
    assert services.approvals.review_items(sam) == []


# ---------------------------------------------------------------------- the running example, planned by rules
RUNNING_EXAMPLE = ("Acme renews next month. Are they eligible for the multi-year discount? "
                   "Propose 12% for 24 months.")


@pytest.fixture
def planned_by_rules(tmp_path, clock):
    """The Northwind tenant ingested, the rules planner (no scripted plan), the CRM on loopback."""
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.embedding.factory import make_embedder
    from citadel.ingest.local import Ingestor
    from citadel.ingest.sources import AclSpec, discover

    home = make_home(tmp_path / "home", CITADEL_TOOLS__REGISTRY_FILE=str(REPO / "examples" / "crm" / "tools.yaml"),
                     CITADEL_ANSWER__MIN_VECTOR_SCORE="0", CITADEL_ANSWER__STRONG_VECTOR_SCORE="0.9")
    northwind = REPO / "examples" / "northwind"
    catalog = SQLiteCatalog(home.config.catalog_path)
    Ingestor(catalog, make_embedder(home.config.embedding), home.config).ingest(
        "northwind", discover([northwind], trust_front_matter=True), AclSpec.from_file(northwind / "acl.yaml"))
    catalog.close()
    with tool_servers(home.config):
        with client_for(home, clock=clock) as client:
            yield home, client, CrmStore(db_path(Path(home.config.home).resolve()))
            client.app.state.services.runs.wait_for_runs(60)


def test_the_running_example_end_to_end_the_rules_propose_the_approval_and_the_answer_names_it(planned_by_rules):
    home, client, crm = planned_by_rules
    conversation = client.post("/v1/conversations", headers=home.headers(**SAM)).json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", headers=home.headers(**SAM),
                         json={"content": RUNNING_EXAMPLE})
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["run_id"]
    client.app.state.services.runs.wait_for_runs(60)
    events = events_of(client, home, run_id)
    plan = [e["data"] for e in events if e["type"] == "progress" and e["data"].get("stage") == "plan"][0]
    [action] = [s for s in plan["steps"] if s["tool"] != "search"]
    assert action["tool"] == "crm.create_discount_approval"
    [required] = [e["data"] for e in events if e["type"] == "approval_required"]
    assert required["arguments"] == {"account_id": "acme", "discount_pct": 12, "term_months": 24}
    assert set(action["needs"]) == {s["id"] for s in plan["steps"] if s["tool"] == "search"}  # evidence first
    assert not any("propose" in s["ask"].lower() for s in plan["steps"] if s["tool"] == "search")

    [pending] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    dana = home.headers(**DANA)
    [item] = client.app.state.services.approvals.review_items(
        client.app.state.services.access.caller(dana["authorization"], dana["x-citadel-user-context"]))
    assert len(item["evidence"]) == 2 and all(e["citation"] for e in item["evidence"])
    assert any("Discount Policy 2026" in e["citation"] for e in item["evidence"])
    decide = f"/v1/approvals/{pending['approval_id']}:decide"
    refused = client.post(decide, headers=dana, json={"decision": "edit_and_approve", "edits": {"discount_pct": 20}})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "outside_limits"
    assert client.post(decide, headers=dana, json={"decision": "edit_and_approve",
                                                  "edits": {"term_months": 36}}).status_code == 200
    deadline = time.monotonic() + 60
    while client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()["status"] != "succeeded":
        assert time.monotonic() < deadline, "the approved run never finished"
        time.sleep(0.1)
    [record] = crm.list_approvals("northwind", "acme")
    assert (record.discount_pct, record.term_months) == (12, 36)
    final = [e["data"] for e in events_of(client, home, run_id) if e["type"] == "final"][-1]
    assert record.approval_id in final["answer"] and "12%" in final["answer"]
    assert {c["document_id"] for c in final["citations"]} >= {"discount-policy-2026"}


# ---------------------------------------------------------------------- review tasks for failed checks
OUT_OF_SCOPE = {**PROPOSAL, "args": {"account_id": "acme", "discount_pct": 40, "term_months": 24}}


def review_deployment(deployment, step):
    home, client, crm = deployment
    client.app.state.services.wiring.orchestrator.planner = ScriptedPlanner([step])
    return home, client, crm


def test_an_action_out_of_scope_is_held_and_the_approver_groups_correction_runs_it(deployment):
    home, client, crm = review_deployment(deployment, OUT_OF_SCOPE)
    run_id = start_run(client, home)
    assert client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()["status"] == "waiting"
    [held] = [e["data"] for e in events_of(client, home, run_id) if e["type"] == "review_pending"]
    assert held["reason"] == "action_out_of_scope" and held["reviewers"] == "deal-desk"
    assert "outside what the assistant may do" in held["message"]
    assert not [e for e in events_of(client, home, run_id) if e["type"] == "approval_required"]
    [task] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    assert task["kind"] == "review" and task["decisions"] == ["correct", "request_info", "reject"]
    decide = f"/v1/approvals/{task['approval_id']}:decide"
    assert client.post(decide, headers=home.headers(**SAM), json={"decision": "correct"}).status_code == 403
    as_asked = client.post(decide, headers=home.headers(**DANA), json={"decision": "correct"})
    assert as_asked.status_code == 403 and as_asked.json()["error"]["code"] == "outside_limits"  # 40% stays out
    assert client.post(decide, headers=home.headers(**DANA), json={"decision": "approve"}).status_code == 422
    corrected = client.post(decide, headers=home.headers(**DANA),
                            json={"decision": "correct", "edits": {"discount_pct": 12}, "comment": "policy says 12"})
    assert corrected.status_code == 200, corrected.text
    client.app.state.services.runs.wait_for_runs(60)
    deadline = time.monotonic() + 30
    while client.get(f"/v1/runs/{run_id}", headers=home.headers(**SAM)).json()["status"] != "succeeded":
        assert time.monotonic() < deadline, "the corrected run never finished"
        time.sleep(0.1)
    [record] = crm.list_approvals("northwind", "acme")  # the correction by the approver group approved it
    assert (record.discount_pct, record.term_months) == (12, 24)
    final = [e["data"] for e in events_of(client, home, run_id) if e["type"] == "final"][-1]
    assert record.approval_id in final["answer"]


def test_a_reviewer_asking_for_more_information_closes_the_action_and_the_requester_is_told(deployment):
    home, client, crm = review_deployment(deployment, OUT_OF_SCOPE)
    run_id = start_run(client, home)
    [task] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
    asked = client.post(f"/v1/approvals/{task['approval_id']}:decide", headers=home.headers(**DANA),
                        json={"decision": "request_info", "comment": "Which competitor offer is this matching?"})
    assert asked.status_code == 200 and asked.json()["status"] == "info_requested"
    client.app.state.services.runs.wait_for_runs(60)
    final = [e["data"] for e in events_of(client, home, run_id) if e["type"] == "final"][-1]
    assert [a["error"] for a in final["actions"]] == ["review_info_requested"]
    assert "Which competitor offer is this matching?" in final["answer"]
    assert crm.count_approvals("northwind") == 0


def test_the_requester_is_told_of_the_decision_by_an_optional_webhook(deployment):
    """The run's event is the requester's news; a configured webhook gets ids and the outcome too."""
    import http.server
    import json
    import threading

    from citadel.config import load_config
    from serving.services.webhooks import DecisionWebhook

    received = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/decided"
    assert load_config(environ={"CITADEL_TOOLS__DECISION_WEBHOOK": url}).tools.decision_webhook == url
    home, client, crm = deployment
    webhook = DecisionWebhook(url)
    client.app.state.services.approvals.webhook = webhook
    try:
        run_id = start_run(client, home)
        [pending] = client.get("/v1/approvals", headers=home.headers(**DANA)).json()["approvals"]
        client.post(f"/v1/approvals/{pending['approval_id']}:decide", headers=home.headers(**DANA),
                    json={"decision": "reject", "comment": "not this quarter"})
        webhook.close()  # waits for the delivery
        assert received == [{"approval_id": pending["approval_id"], "kind": "approval",
                             "tool": "crm.create_discount_approval", "run_id": run_id, "tenant_id": "northwind",
                             "status": "rejected", "decided_by": "dana", "decided_at": received[0]["decided_at"]}]
    finally:
        server.shutdown()
        server.server_close()
