"""The deployment's job runner as one Ray actor: citadel/ingest/runner.py's loop, with the Ray Data
engine (indexing/pipeline.py) for uploads of `jobs.ray_min_bytes` or more and the in-process engine for
the rest.

`start_job_runner(config)` starts it once per deployment (a named, detached actor in the `citadel`
namespace: a second call, from any driver, returns the running one) and Ray restarts it if its process dies; a restarted
or second runner takes over a job whose lease ran out, so nothing is lost and nothing runs twice. It
needs a connected Ray driver. `deployment_job_runner(config)` is how a deployment runs it (`citadel up`,
serving/ray/local.py): the actor for the block, with `jobs.embedded_runner` off in the config the serving
processes get, so one kind of runner works the queue; leaving the block stops the actor (detached, it
would outlive the driver, e.g. on a cluster `citadel up --address` joined).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray

from citadel.config import CitadelConfig
from citadel.ingest.runner import Progress
from citadel.state.base import StateUnavailable
from citadel.wiring import Wiring
from indexing.pipeline import RayDataEngine

ACTOR_NAME = "citadel-job-runner"
ACTOR_NAMESPACE = "citadel"  # a named namespace: every driver of the deployment finds the one actor
# What the actor reserves: it mostly waits on the catalog and on the Ray Data jobs it submits.
ACTOR_CPUS = 0.25
# How long a deployment waits for its runner to come up, and for it to stop between jobs.
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
log = logging.getLogger(__name__)


@ray.remote(max_restarts=-1, max_task_retries=-1)
class JobRunnerActor:
    def __init__(self, config: dict[str, Any]):
        self._config = CitadelConfig.model_validate(config)
        self._wiring = Wiring(self._config)
        # No upload wakes this runner (they arrive at the gateways), so it looks every jobs.poll_s.
        self._runner = self._wiring.job_runner(large=self._ray_data_engine, on_published=self._published,
                                               idle_backoff=False)
        self._runner.start()

    def _ray_data_engine(self, progress: Progress) -> RayDataEngine:
        return RayDataEngine(self._wiring.catalog, self._config, progress=progress)

    def _published(self, tenant_id: str) -> None:
        """Drop the tenant's cached answers (a refusal cites nothing, so all of them), as a gateway's
        runner does; where the cache is unreachable they expire by their TTL."""
        try:
            self._wiring.state.cache.invalidate_tenant(tenant_id)
        except StateUnavailable:
            log.warning("answer cache unreachable; entries for %s expire by TTL", tenant_id)

    def owner(self) -> str:
        """The lease owner id this actor claims jobs as."""
        return self._runner.owner

    def wake(self) -> None:
        """A job was queued: look now rather than at the next poll."""
        self._runner.wake()

    def stop(self, timeout_s: float) -> None:
        """Claim no more jobs; wait up to `timeout_s` for the one running (a job still running after
        it is taken over by the next runner once its lease runs out)."""
        self._runner.stop(timeout_s)


def start_job_runner(config: CitadelConfig) -> ray.actor.ActorHandle:
    """The deployment's runner actor, started if it is not running yet."""
    return JobRunnerActor.options(name=ACTOR_NAME, namespace=ACTOR_NAMESPACE, get_if_exists=True,
                                  lifetime="detached", num_cpus=ACTOR_CPUS).remote(config.model_dump(mode="json"))


def stop_job_runner(actor: ray.actor.ActorHandle, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop the runner between jobs if it gets there within `timeout_s`, then end the actor (no restart)."""
    try:
        ray.get(actor.stop.remote(timeout_s), timeout=timeout_s + 5)
    except Exception:  # a dead or stuck actor: it is killed below all the same
        log.warning("the job runner actor did not stop in time; killing it", exc_info=True)
    ray.kill(actor, no_restart=True)


@contextmanager
def deployment_job_runner(config: CitadelConfig, ready_timeout_s: float = READY_TIMEOUT_S) -> Iterator[CitadelConfig]:
    """The deployment's runner actor for the block, started and answering before the block runs;
    yields the config for the serving processes (`jobs.embedded_runner` off). Ray must be connected."""
    actor = start_job_runner(config)
    try:
        ray.get(actor.owner.remote(), timeout=ready_timeout_s)  # a runner that cannot start fails the deployment
        serving = config.model_copy(deep=True)
        serving.jobs.embedded_runner = False
        yield serving
    finally:
        stop_job_runner(actor)
