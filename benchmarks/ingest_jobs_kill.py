"""Durable ingestion jobs with the runner killed once mid-way: the four shared
handbooks uploaded through the admin API of a local app, one upload (one job) per file, each handbook
its own tenant.

The app is the fused gateway (serving/services/compose.py) served by uvicorn on 127.0.0.1 in this
process, with its runner thread off (`jobs.embedded_runner: false`): the queue is worked by a runner in
a child process (this script with `--runner`: citadel.wiring's JobRunner), which is killed with
SIGKILL once half the jobs are done, while it holds a job (at its build or publish stage if it gets
there within a minute). A second runner process starts at once; it works the queued jobs and takes
over the killed one's job when that job's lease runs out.

Then, from the catalog and the published partitions: every job's end, the jobs run more than once,
chunk ids that appear twice in a tenant's partition (duplicates) and documents whose published
version's chunks in the partition differ from the catalog's manifest of that version, or chunks of a
version that is not the published one (partial publishes).

    python benchmarks/ingest_jobs_kill.py [--home var/jobs-kill] [--lease 60] [--embedder hash]
                                          [--per-tenant N] [--json]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.ingest_handbooks import CORPORA, TENANTS  # noqa: E402  (the same four handbooks, one tenant each)
GROUPS = ["staff"]
MAX_DOCUMENT_ID = 128  # serving/http/protocol.py NAME_PATTERN
ADMIN = "jobs-kill-admin"
POLL_S = 0.02
PREFER_PUBLISH_S = 60.0  # how long the kill waits for a job at its build or publish stage
FINISH_TIMEOUT_S = 1800.0


def environment(home: Path, lease_s: float, embedder: str) -> dict[str, str]:
    """The config of the app and both runners (citadel's CITADEL_* variables)."""
    return {"CITADEL_HOME": str(home), "CITADEL_EMBEDDING__BACKEND": embedder, "CITADEL_JOBS__LEASE_S": str(lease_s),
            "CITADEL_JOBS__POLL_S": "0.1", "CITADEL_JOBS__EMBEDDED_RUNNER": "false",
            "CITADEL_ANSWER__CONFIRM": "false"}


# ------------------------------------------------------------------ the runner child
def run_runner() -> None:
    """A child's work: the job runner of this home (CITADEL_* from the environment) until killed.
    It looks every jobs.poll_s (no idle backoff), as the deployment's runner actor does."""
    from citadel.wiring import Wiring

    runner = Wiring().job_runner(idle_backoff=False)
    print(json.dumps({"owner": runner.owner}), flush=True)
    runner.run_until_stopped()


def start_runner(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    """A runner child; returns it and its lease owner id (once it is ready to claim)."""
    with open(log, "ab") as errors:
        process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--runner"],
                                   env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=errors)
    owner = json.loads(process.stdout.readline())["owner"]
    return process, owner


# ------------------------------------------------------------------ the app and the uploads
def start_app(config):
    """The fused gateway served by uvicorn on a free port of 127.0.0.1, on a thread; (server, URL)."""
    import uvicorn

    from serving.http.api import create_api
    from serving.services.compose import build_services

    server = uvicorn.Server(uvicorn.Config(create_api(build_services(config)), host="127.0.0.1", port=0,
                                           log_level="warning"))
    threading.Thread(target=server.run, name="jobs-kill-gateway", daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


def handbook_files(per_tenant: int | None = None) -> list[tuple[str, str, Path]]:
    """(tenant, document id, file) of every ingestible file of the four handbooks (the first
    `per_tenant` of each, for a quick try), tenant by tenant. The id is the one `citadel ingest`
    gives the file, made an API document id (`api_document_id`)."""
    from citadel.ingest.sources import discover

    return [(tenant, api_document_id(source.document_id), source.path)
            for tenant, folder in TENANTS.items() for source in discover([CORPORA / folder])[:per_tenant]]


def api_document_id(document_id: str) -> str:
    """The file's id with '.' for '/', and one longer than the API's 128 characters cut to 119 plus
    eight hex digits of its hash (ids stay distinct)."""
    dotted = document_id.replace("/", ".")
    if len(dotted) <= MAX_DOCUMENT_ID:
        return dotted
    return f"{dotted[:MAX_DOCUMENT_ID - 9]}-{hashlib.sha256(dotted.encode()).hexdigest()[:8]}"


def upload_all(client, admin_token: str, files: list[tuple[str, str, Path]]) -> list[str]:
    """One admin upload per file (202 and a queued job each); the job ids, in order."""
    headers = {"authorization": f"Bearer {admin_token}"}
    job_ids = []
    for tenant, document_id, path in files:
        body = {"document_id": document_id, "filename": path.name, "groups": GROUPS,
                "content_base64": base64.b64encode(path.read_bytes()).decode()}
        response = client.post(f"/v1/admin/tenants/{tenant}/documents", json=body, headers=headers)
        if response.status_code != 202:
            raise SystemExit(f"upload of {tenant}/{document_id} answered {response.status_code}: {response.text}")
        job_ids.append(response.json()["job_id"])
    return job_ids


# ------------------------------------------------------------------ the kill
def job_rows(catalog, job_ids: list[str]) -> list[dict]:
    """The jobs' catalog rows (state, owner, progress as last renewed), in one query."""
    rows = {row["job_id"]: row for row in catalog.list_jobs(None, limit=len(job_ids) + 100)}
    return [rows[job_id] for job_id in job_ids]


def kill_mid_way(catalog, job_ids: list[str], runner: subprocess.Popen, owner: str) -> dict:
    """SIGKILL the runner once half the jobs are done, while it holds a job: preferably right before
    or during its build and publish (the lease is renewed with that stage then), the moment a partial
    publish would happen if one could; after PREFER_PUBLISH_S, at whatever stage it holds one."""
    half, waited_from = len(job_ids) // 2, None
    while True:
        rows = job_rows(catalog, job_ids)
        done = sum(row["state"] == "done" for row in rows)
        held = [row for row in rows if row["state"] == "leased" and row["owner"] == owner]
        if done >= half and waited_from is None:
            waited_from = time.monotonic()
        publishing = [row for row in held if (row.get("progress") or {}).get("stage") in ("build", "publish")]
        if held and waited_from is not None and (publishing or time.monotonic() - waited_from > PREFER_PUBLISH_S):
            os.kill(runner.pid, signal.SIGKILL)
            runner.wait()
            job = (publishing or held)[0]
            return {"killed_at_done": done, "job_id": job["job_id"], "tenant": job["tenant_id"],
                    "document": job["document_id"], "stage": (job.get("progress") or {}).get("stage")}
        if runner.poll() is not None:
            raise SystemExit(f"the first runner exited on its own ({runner.returncode})")
        time.sleep(POLL_S)


def wait_all_done(catalog, job_ids: list[str], timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while any(row["state"] != "done" for row in job_rows(catalog, job_ids)):
        if time.monotonic() > deadline:
            raise SystemExit("the jobs did not finish in time")
        time.sleep(0.25)
    return time.perf_counter()


# ------------------------------------------------------------------ the checks
def check_catalog_and_partitions(wiring, job_ids: list[str], killed_job: str) -> dict:
    """What the catalog and the partitions say once every job is done (module docstring)."""
    catalog = wiring.catalog
    jobs = job_rows(catalog, job_ids)
    duplicates = partial = chunks = published = 0
    for tenant in TENANTS:
        partition = wiring.partitions.get(tenant)
        served = Counter(partition.table.column("chunk_id").to_pylist()) if partition is not None else Counter()
        chunks += sum(served.values())
        duplicates += sum(count - 1 for count in served.values() if count > 1)
        expected: set[str] = set()
        for document in catalog.list_documents(tenant):
            if document.published_version is None:
                continue
            published += 1
            manifest = set(catalog.manifest(tenant, document.document_id, document.published_version))
            in_partition = {c for c in served if c.startswith(f"{tenant}:{document.document_id}:v")}
            partial += in_partition != manifest
            expected |= manifest
        partial += len(set(served) - expected)  # chunks of no published version
    killed = catalog.get_job(killed_job)
    return {
        "jobs": len(jobs),
        "statuses": dict(Counter(job["status"] for job in jobs)),
        "jobs_run_more_than_once": sum(job["attempts"] > 1 for job in jobs),
        "killed_job": {"status": killed["status"], "attempts": killed["attempts"],
                       # published: the takeover published it; unchanged: the killed attempt had
                       "outcome": _file_outcome(killed).get("status"), "version": _file_outcome(killed).get("version")},
        "documents_published": published,
        "dead_letters": len(catalog.dead_letters()),
        "chunks_served": chunks,
        "duplicate_chunks": duplicates,
        "partial_publishes": partial,
    }


def _file_outcome(job: dict) -> dict:
    files = (job.get("report") or {}).get("files") or [{}]
    return files[0]


def measure(home: Path, lease_s: float, embedder: str, per_tenant: int | None = None) -> dict:
    env = environment(home, lease_s, embedder)
    os.environ.update(env)
    import httpx

    from citadel.config import load_config
    from citadel.identity.credentials import ALL_TENANTS, add_credential
    from citadel.wiring import Wiring

    config = load_config()
    admin_token = add_credential(config.credentials_path, ADMIN, [ALL_TENANTS], admin=True)
    files = handbook_files(per_tenant)
    server, url = start_app(config)
    log = home / "runners.log"
    first = second = None
    try:
        started = time.perf_counter()
        first, first_owner = start_runner(env, log)
        with httpx.Client(base_url=url, timeout=60.0) as client:
            job_ids = upload_all(client, admin_token, files)
        uploaded = time.perf_counter()
        wiring = Wiring(config=config)
        kill = kill_mid_way(wiring.catalog, job_ids, first, first_owner)
        killed_at, killed_epoch = time.perf_counter(), time.time()
        second, second_owner = start_runner(env, log)
        finished = wait_all_done(wiring.catalog, job_ids, FINISH_TIMEOUT_S)
        killed_row = wiring.catalog.get_job(kill["job_id"])
        report = check_catalog_and_partitions(Wiring(config=config), job_ids, kill["job_id"])
        report["killed_job"]["finished_by_second_runner"] = killed_row["owner"] == second_owner
        # On the catalog's clock (epoch seconds): when the killed job and the others were done.
        others = max(row["finished_at"] for row in job_rows(wiring.catalog, job_ids) if row["job_id"] != kill["job_id"])
        report["killed_job"]["done_after_kill_s"] = round(killed_row["finished_at"] - killed_epoch, 1)
        report["others_done_after_kill_s"] = round(others - killed_epoch, 1)
    finally:
        for runner in (first, second):
            if runner is not None and runner.poll() is None:
                runner.kill()
                runner.wait()
        server.should_exit = True
    return {
        "embedder": embedder, "lease_s": lease_s, "files": len(files),
        "upload_s": round(uploaded - started, 1),
        "kill": {**kill, "after_s": round(killed_at - started, 1)},
        "time_to_finish_s": round(finished - started, 1),
        "after_kill_s": round(finished - killed_at, 1),
        **report,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=REPO / "var" / "jobs-kill")
    parser.add_argument("--lease", type=float, default=60.0, help="jobs.lease_s of the runners (default: the config's)")
    parser.add_argument("--embedder", choices=("hash", "minilm"), default="hash")
    parser.add_argument("--per-tenant", type=int, default=None, help="only the first N files of each handbook")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runner", action="store_true", help=argparse.SUPPRESS)  # the child's role
    args = parser.parse_args()
    if args.runner:
        run_runner()
        return
    shutil.rmtree(args.home, ignore_errors=True)
    args.home.mkdir(parents=True)
    result = measure(args.home.resolve(), args.lease, args.embedder, args.per_tenant)
    print(json.dumps(result, indent=None if args.json else 1))


if __name__ == "__main__":
    main()
