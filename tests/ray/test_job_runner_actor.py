"""The deployment's job runner as a Ray actor (indexing/job_runner.py) on a local Ray instance (2 CPUs,
127.0.0.1 only): started once per deployment (as `citadel up` runs it: deployment_job_runner, which
gives the serving processes a config with their runner threads off), it runs a small upload in its
process and a large one (jobs.ray_min_bytes or more) through the Ray Data pipeline, both to a published
version; leaving the deployment stops it."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SMALL = "# Leave policy\n\n## Annual leave\n\nStaff receive 25 days of annual leave each year.\n"
LARGE = "# Travel policy\n\n## Hotels\n\n" + "The hotel limit is 220 USD per night in most cities. " * 20 + "\n"


def test_the_runner_actor_runs_small_uploads_here_and_large_ones_on_ray_data(ray_runtime):
    import ray

    from citadel.ingest.runner import UploadSpec, queue_upload
    from citadel.ingest.sources import TrustedFields
    from indexing.job_runner import ACTOR_NAME, ACTOR_NAMESPACE, deployment_job_runner, start_job_runner

    config = ray_runtime.config
    config.jobs.ray_min_bytes = len(SMALL) + 1
    config.jobs.poll_s = 0.05
    catalog = ray_runtime.catalog
    catalog.ensure_tenant("acme")
    jobs = {}
    for document, text in (("leave", SMALL), ("travel", LARGE)):
        spec = UploadSpec(f"{document}.md", ("staff",), TrustedFields(), len(text.encode()), "admin")
        jobs[document] = queue_upload(catalog, ray_runtime.objects, "uploader", 30.0, time.time(), "acme", document,
                                      text.encode(), spec).job_id
    with deployment_job_runner(config, ready_timeout_s=120) as serving:
        assert (serving.jobs.embedded_runner, config.jobs.embedded_runner) == (False, True)
        owner = ray.get(ray.get_actor(ACTOR_NAME, namespace=ACTOR_NAMESPACE).owner.remote(), timeout=60)
        assert ray.get(start_job_runner(config).owner.remote(), timeout=60) == owner  # one per deployment
        deadline = time.monotonic() + 240
        while any(catalog.get_job(j)["state"] != "done" for j in jobs.values()) and time.monotonic() < deadline:
            time.sleep(0.25)
        done = {document: catalog.get_job(job_id) for document, job_id in jobs.items()}
    assert [(j["status"], j["owner"]) for j in done.values()] == [("succeeded", owner)] * 2, done
    assert done["leave"]["report"]["progress"]["engine"] == "local"
    assert done["travel"]["report"]["progress"]["engine"] == "ray"
    assert done["travel"]["report"]["engine"] == "raydata"
    assert {d.document_id: d.published_version for d in catalog.list_documents("acme")} == {"leave": 1, "travel": 1}
    deadline = time.monotonic() + 30
    while _actor_alive(ray, ACTOR_NAME, ACTOR_NAMESPACE):  # the deployment stopped it
        assert time.monotonic() < deadline, "the runner actor outlived its deployment"
        time.sleep(0.25)


def _actor_alive(ray, name: str, namespace: str) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return True
