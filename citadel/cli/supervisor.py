"""The supervisor `citadel up` starts (serving/ray/launcher.py's `supervise`) with the deployment's job
runner actor (indexing/job_runner.py `deployment_job_runner`): started once Ray is connected, the serving
processes deployed with `jobs.embedded_runner` off, stopped with the deployment. Here because only the
composition root joins serving and indexing.

Run as `python -m citadel.cli.supervisor <run config json>` by `serving.ray.launcher.up`.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(config_path: Path) -> None:
    from indexing.job_runner import deployment_job_runner
    from serving.ray.launcher import supervise

    supervise(config_path, job_runner=deployment_job_runner)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
