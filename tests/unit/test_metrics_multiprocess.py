"""Several processes' metrics in one directory (prometheus_client's multiprocess mode, as the gateway's Serve
replicas run it: serving/services/metrics.py): a scrape served by any process sums every process's counters
and histograms, and a process's per-process gauge leaves the sum when it ends, said or not.
Two real processes, since the mode is chosen when a process first imports prometheus_client."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from serving.services.metrics import MULTIPROCESS_ENV, ApiMetrics, multiprocess_dir

REPO = Path(__file__).resolve().parents[2]
# A gateway replica in miniature: `requests` counted requests, its breaker open, one retriever hedge; then
# it either says it ended (`ended`) or waits for its stdin to close and exits without saying so (`kept`).
REPLICA = """
import sys
from citadel.resilience.breaker import BreakerState
from serving.services.metrics import ApiMetrics, multiprocess_dir

requests, how = int(sys.argv[1]), sys.argv[2]
assert multiprocess_dir() is not None, "prometheus_client is not in multiprocess mode"
metrics = ApiMetrics(multiprocess_dir=multiprocess_dir())
metrics.watch_retriever(type("Client", (), {"stats": lambda self: {"requests": requests, "hedges": 1}})())
for _ in range(requests):
    metrics.count_request("retrieve", "acme", 200, 0.01)
metrics.breaker_transition("catalog", BreakerState.CLOSED, BreakerState.OPEN, "slow")
if how == "ended":
    metrics.process_ended()
print("ready", flush=True)
if how == "kept":
    sys.stdin.read()
"""


def _replica(directory: Path, requests: int, how: str) -> subprocess.Popen:
    env = {**os.environ, MULTIPROCESS_ENV: str(directory), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", REPLICA, str(requests), how], cwd=REPO, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _samples(metrics: ApiMetrics) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(metrics.render().decode()) for s in family.samples}


def test_a_scrape_sums_every_process_and_forgets_ended_ones_gauges(tmp_path):
    kept, ended = _replica(tmp_path, 7, "kept"), _replica(tmp_path, 5, "ended")
    try:
        assert ended.wait(timeout=60) == 0
        assert kept.stdout.readline().strip() == "ready"
        scrape = ApiMetrics(multiprocess_dir=tmp_path)  # this process writes nothing: it only reads the directory
        request = ("citadel_requests_total", (("endpoint", "retrieve"), ("status", "200"), ("tenant", "acme")))
        open_catalog = ("citadel_breaker_state", (("breaker", "catalog"), ("state", "open")))
        both = _samples(scrape)
        assert both[request] == 12
        assert both[("citadel_request_seconds_count", (("endpoint", "retrieve"),))] == 12
        assert both[("citadel_retriever_reads_total", ())] == 12 and both[("citadel_retriever_hedges_total", ())] == 2
        assert both[open_catalog] == 1  # the live replica's; the one that said it ended has left the sum
        kept.stdin.close()
        assert kept.wait(timeout=60) == 0
        after = _samples(scrape)
        assert after[request] == 12, "a finished process's counts stay in the node's totals"
        assert open_catalog not in after, "a process that exited unannounced leaves the gauge's sum too"
    finally:
        for process in (kept, ended):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_without_the_environment_the_metrics_stay_in_memory(tmp_path):
    assert multiprocess_dir() is None  # the test process never set PROMETHEUS_MULTIPROC_DIR
    metrics = ApiMetrics()
    metrics.count_request("retrieve", "acme", 200, 0.01)
    assert _samples(metrics)[("citadel_requests_total",
                              (("endpoint", "retrieve"), ("status", "200"), ("tenant", "acme")))] == 1
    assert not list(tmp_path.iterdir())


def test_the_cluster_config_keeps_the_metrics_files_off_the_shared_home():
    """Memory-mapped files on a network filesystem would mix nodes; each pod writes to its own /tmp."""
    from citadel.config import load_config

    config = load_config(REPO / "cluster" / "gpu.yaml", environ={})
    assert not config.metrics_multiprocess_path.is_relative_to(config.home)
    assert config.metrics_multiprocess_path.is_relative_to("/tmp")


def test_a_local_deploy_empties_the_directory_of_metric_files_only(tmp_path):
    """The directory is the operator's to name: only prometheus_client's <type>_<pid>.db files go."""
    from citadel.config import load_config
    from serving.services.metrics import clear_metric_files

    config = load_config(environ={"CITADEL_HOME": str(tmp_path)})
    directory = config.metrics_multiprocess_path
    directory.mkdir(parents=True)
    for name in ("counter_11.db", "histogram_11.db", "gauge_livesum_12.db", "catalog.db", "notes.txt"):
        (directory / name).write_text("x")
    clear_metric_files(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["catalog.db", "notes.txt"]
