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

Where no CLI drives the deployment (a KubeRay RayService, `serve deploy` of a Serve config) the Serve
config runs a second application, `citadel-jobs` (`import_path: indexing.job_runner:build_app`, no
route): its one `job-runner` replica gets or starts the same named actor, and its health check starts it
again should it be gone, so that deployment too has exactly one runner. (The gateway cannot start it:
serving never imports indexing.) The Citadel config the serving app gets must then have
`jobs.embedded_runner` off (cluster/gpu.yaml), as `citadel up` turns it off for its serving processes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.exceptions import RayActorError
from ray.serve import Application

from citadel.config import CitadelConfig, load_config
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
# The Serve application that keeps the runner where no CLI starts it (module docstring).
JOBS_APP_NAME = "citadel-jobs"
KEEPER_DEPLOYMENT = "job-runner"
HEALTH_TIMEOUT_S = 20.0  # under Serve's own health_check_timeout_s (30 s)
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


@serve.deployment(name=KEEPER_DEPLOYMENT, num_replicas=1, ray_actor_options={"num_cpus": 0})
class JobRunnerKeeper:
    """The `citadel-jobs` app's one replica: it holds the deployment's runner actor (started if none
    runs) and answers Serve's health checks for it, so a runner gone for good (killed without restart)
    is started again. It takes no requests; the runner claims its jobs from the catalog."""

    def __init__(self, config: dict[str, Any]):
        self._config = CitadelConfig.model_validate(config)
        self._actor = start_job_runner(self._config)
        ray.get(self._actor.owner.remote(), timeout=READY_TIMEOUT_S)  # a runner that cannot start fails the deploy

    async def check_health(self) -> None:
        try:
            await asyncio.wait_for(self._actor.owner.remote(), HEALTH_TIMEOUT_S)
        except RayActorError:
            log.warning("the job runner actor is gone; starting it again")
            self._actor = start_job_runner(self._config)
            await asyncio.wait_for(self._actor.owner.remote(), READY_TIMEOUT_S)

    async def owner(self) -> str:
        """The lease owner id of the runner this replica keeps."""
        return await self._actor.owner.remote()


def build_app(args: dict[str, Any] | None = None) -> Application:
    """The Serve config's entry point for `citadel-jobs`: `args.config`, the Citadel config YAML (else
    CITADEL_CONFIG), as the serving app's."""
    config = load_config((args or {}).get("config"))
    config.home = Path(config.home).resolve()  # the actor does not share our working directory
    return build_app_for(config)


def build_app_for(config: CitadelConfig) -> Application:
    return JobRunnerKeeper.bind(config.model_dump(mode="json"))
