"""The deployment's job runner as one Ray actor: citadel/ingest/runner.py's loop, with the Ray Data
engine (indexing/pipeline.py) for uploads of `jobs.ray_min_bytes` or more and the in-process engine for
the rest.

`start_job_runner(config)` starts it once per deployment (a named, detached actor in the `citadel`
namespace: a second call, from any driver, returns the running one) and Ray restarts it if its process dies; a restarted
or second runner takes over a job whose lease ran out, so nothing is lost and nothing runs twice. It
needs a connected Ray driver (the composition root that starts Serve on the cluster calls it), and
then `jobs.embedded_runner` can be off in the gateway replicas.
"""

from __future__ import annotations

from typing import Any

import ray

from citadel.config import CitadelConfig
from citadel.ingest.runner import Progress
from citadel.wiring import Wiring
from indexing.pipeline import RayDataEngine

ACTOR_NAME = "citadel-job-runner"
ACTOR_NAMESPACE = "citadel"  # a named namespace: every driver of the deployment finds the one actor
# What the actor reserves: it mostly waits on the catalog and on the Ray Data jobs it submits.
ACTOR_CPUS = 0.25


@ray.remote(max_restarts=-1, max_task_retries=-1)
class JobRunnerActor:
    def __init__(self, config: dict[str, Any]):
        self._config = CitadelConfig.model_validate(config)
        self._wiring = Wiring(self._config)
        self._runner = self._wiring.job_runner(large=self._ray_data_engine)
        self._runner.start()

    def _ray_data_engine(self, progress: Progress) -> RayDataEngine:
        return RayDataEngine(self._wiring.catalog, self._config, progress=progress)

    def owner(self) -> str:
        """The lease owner id this actor claims jobs as."""
        return self._runner.owner

    def wake(self) -> None:
        """A job was queued: look now rather than at the next poll."""
        self._runner.wake()


def start_job_runner(config: CitadelConfig) -> ray.actor.ActorHandle:
    """The deployment's runner actor, started if it is not running yet."""
    return JobRunnerActor.options(name=ACTOR_NAME, namespace=ACTOR_NAMESPACE, get_if_exists=True,
                                  lifetime="detached", num_cpus=ACTOR_CPUS).remote(config.model_dump(mode="json"))
