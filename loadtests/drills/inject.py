"""The fault side of a drill, beside its traffic: wait `before_s`, start the fault, hold it `fault_s`,
end it; note each moment. Faults go through the deployment's admin API (a platform admin's token),
except a node kill, which only the operator's machine can do: the caller passes a `node_killer`
(argv prefix; the node's name is appended), e.g. `citadel cluster kill-node --home H`.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import httpx

from loadtests.client import HTTP_TIMEOUT_S
from loadtests.drills.control import clear_fault, set_fault
from loadtests.drills.scenario import DrillScenario

JOB_WAIT_S = 90.0
JOB_POLL_S = 0.5
NODE_KILL_TIMEOUT_S = 60.0
# Not a PDF at all: the parser refuses it, so the job fails and its document goes to the dead-letter queue.
UNPARSABLE_PDF = b"%PDF-1.7\n this is not a PDF body, only its first line \x00\xff\x00\xff\n%%EOF"


class DrillNotApplicable(RuntimeError):
    """The deployment cannot take this fault (no node killer given, say): the verdict is `skipped`."""


@dataclass
class FaultLog:
    fault_at_s: float | None = None
    fault_end_s: float | None = None
    events: list[dict] = field(default_factory=list)
    uploads: list[dict] = field(default_factory=list)  # {status, job_id, job_status}

    def note(self, t_s: float, event: str, **detail) -> None:
        self.events.append({"t_s": round(t_s, 2), "event": event, **detail})


def _admin(token: str) -> dict:
    return {"authorization": f"Bearer {token}"}


def check_applicable(scenario: DrillScenario, admin_token: str | None, node_killer: list[str] | None,
                     stages: set[str] | None = None) -> None:
    """Raises DrillNotApplicable when this deployment cannot take the drill's fault; `stages` are the
    ones it can fault (None: unknown, not checked)."""
    if scenario.fault.kind == "node_kill" and not node_killer:
        raise DrillNotApplicable("a node kill needs the operator's node killer: run it against the local "
                                 "multi-node cluster (`citadel cluster up`, then --home) or pass --node-kill-command")
    if scenario.fault.kind in ("stage", "dead_letters") and not admin_token:
        raise DrillNotApplicable("this drill needs a platform admin's token (the home's local-admin, or --admin-token)")
    if scenario.fault.kind == "stage" and stages is not None and scenario.fault.stage not in stages:
        raise DrillNotApplicable(f"this deployment has no {scenario.fault.stage} stage (not configured), so the "
                                 f"fault would change nothing; it can fault {', '.join(sorted(stages))}")


def direct_fault(url: str, admin_token: str | None, scenario: DrillScenario, since: Callable[[], float],
                 log: FaultLog, node_killer: list[str] | None) -> None:
    """Runs beside the traffic (on a thread): the fault from `before_s` for `fault_s`."""
    load, fault = scenario.load, scenario.fault
    time.sleep(max(0.0, load.before_s - since()))
    log.fault_at_s = since()
    if fault.kind == "stage":
        spec = dict(fault.spec)
        if spec.get("kill"):
            spec.setdefault("kill_nonce", uuid.uuid4().hex)  # each drill run kills once
        set_fault(url, admin_token, fault.stage, **spec)
        log.note(since(), "fault set", stage=fault.stage, spec=spec)
        _sleep_until(since, load.before_s + load.fault_s)
        clear_fault(url, admin_token, fault.stage)
        log.note(since(), "fault cleared", stage=fault.stage)
    elif fault.kind == "node_kill":
        done = subprocess.run([*node_killer, fault.node], capture_output=True, text=True, timeout=NODE_KILL_TIMEOUT_S)
        log.note(since(), "node killed" if done.returncode == 0 else "node kill failed", node=fault.node,
                 exit_code=done.returncode, output=(done.stdout + done.stderr)[-500:])
        _sleep_until(since, load.before_s + load.fault_s)
    else:
        _upload_backlog(url, admin_token, scenario, since, log)
        _sleep_until(since, load.before_s + load.fault_s)
    log.fault_end_s = since()


def _sleep_until(since: Callable[[], float], t_s: float) -> None:
    time.sleep(max(0.0, t_s - since()))


def _upload_backlog(url: str, admin_token: str, scenario: DrillScenario, since: Callable[[], float],
                    log: FaultLog) -> None:
    """`documents` unparsable uploads spread evenly over the first half of the fault window."""
    fault = scenario.fault
    tenant = fault.tenant or "acme"
    gap = scenario.load.fault_s / 2 / fault.documents
    run = uuid.uuid4().hex[:8]
    with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S, headers=_admin(admin_token)) as client:
        for number in range(fault.documents):
            body = {"document_id": f"drill-dead-{run}-{number}", "filename": f"drill-dead-{number}.pdf",
                    "content_base64": base64.b64encode(UNPARSABLE_PDF).decode(), "groups": ["drill"]}
            try:
                response = client.post(f"/v1/admin/tenants/{tenant}/documents", json=body)
                job_id = response.json().get("job_id") if response.status_code == 202 else None
                log.uploads.append({"status": response.status_code, "job_id": job_id, "job_status": None})
            except (httpx.HTTPError, ValueError):
                log.uploads.append({"status": 599, "job_id": None, "job_status": None})
            time.sleep(gap)
    log.note(since(), "backlog uploaded", documents=fault.documents, tenant=tenant)


def settle_uploads(url: str, admin_token: str, log: FaultLog) -> None:
    """After the traffic: wait (bounded) for each uploaded job to finish and note its end status."""
    deadline = time.monotonic() + JOB_WAIT_S
    with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S, headers=_admin(admin_token)) as client:
        for upload in log.uploads:
            while upload["job_id"] and time.monotonic() < deadline:
                try:
                    job = client.get(f"/v1/admin/jobs/{upload['job_id']}").json()
                except (httpx.HTTPError, ValueError):
                    break
                if job.get("status") not in ("running", "queued", None):
                    upload["job_status"] = job["status"]
                    break
                time.sleep(JOB_POLL_S)
