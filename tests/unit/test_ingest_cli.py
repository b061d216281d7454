"""`citadel ingest` options (in-process here: unit tests never start Ray), the pipeline config section,
the fault hook and the Ray launcher's checks that need no Ray instance."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from citadel.resilience import crash_points
from citadel.cli.ingest_cmd import LOCAL, RAY, choose_engine
from citadel.cli.main import app
from citadel.wiring import Wiring
from citadel.config import load_config
from citadel.ingest.synth import SynthSpec, generate
from cluster.ray_local import RayLaunch, RayNotLocal, check_loopback

DOC = "# Hotel policy\n\n## Limit\n\nThe hotel limit is 220 USD per night.\n"


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("CITADEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CITADEL_EMBEDDING__BACKEND", "hash")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args), catch_exceptions=False)


def test_pipeline_section_from_env():
    config = load_config(environ={"CITADEL_INGEST_PIPELINE__EMBED_ACTORS": "3",
                                  "CITADEL_INGEST_PIPELINE__EMBED_DTYPE": "float16"})
    assert (config.ingest_pipeline.embed_actors, config.ingest_pipeline.embed_dtype) == (3, "float16")
    assert config.ingest_pipeline.engine == "auto"
    with pytest.raises(ValidationError):
        load_config(environ={"CITADEL_INGEST_PIPELINE__EMBED_DTYPE": "int8"})


def test_engine_choice(tmp_path):
    runtime = Wiring(config=load_config(environ={"CITADEL_HOME": str(tmp_path)}))
    assert choose_engine(runtime, local=True) == LOCAL
    runtime.config.ingest_pipeline.engine = "local"
    assert choose_engine(runtime, local=False) == LOCAL
    runtime.config.ingest_pipeline.engine = "auto"
    assert choose_engine(runtime, local=False) in (LOCAL, RAY)


def test_local_manifest_ingest_publishes_every_tenant(cli, tmp_path):
    corpus = generate(SynthSpec(tenants=3, chunks=60, seed=2), tmp_path / "corpus")
    result = cli("ingest", "--local", "--manifest", str(corpus.manifest), "--json")
    assert result.exit_code == 0, result.output
    reports = _json_objects(result.stdout)
    assert sorted(r["tenant_id"] for r in reports) == sorted(corpus.tenant_chunks)
    assert sum(r["chunks"] for r in reports) == 60


def _json_objects(text: str) -> list[dict]:
    """The JSON reports printed one after another (one per tenant in-process)."""
    decoder, objects, position = json.JSONDecoder(), [], 0
    while text[position:].strip():
        position += len(text[position:]) - len(text[position:].lstrip())
        obj, position = decoder.raw_decode(text, position)
        objects.append(obj)
    return objects


@pytest.mark.parametrize("args", [
    ("ingest", "--local", "--manifest", "m.parquet", "--tenant", "t"),
    ("ingest", "--local", "--groups", "x", "docs"),
    ("ingest", "--local", "--retry-dead-letters", "docs"),
])
def test_bad_option_combinations_exit_2(cli, args):
    assert cli(*args).exit_code == 2


def test_fault_point_pauses_and_signals(monkeypatch, tmp_path):
    crash_points.fault_point(crash_points.BEFORE_PUBLISH)  # unset: returns at once
    marker = tmp_path / "paused"
    monkeypatch.setenv(crash_points.PAUSE_AT_ENV, crash_points.BEFORE_PUBLISH)
    monkeypatch.setenv(crash_points.MARKER_ENV, str(marker))
    monkeypatch.setattr(crash_points, "MAX_PAUSE_S", 0.3)
    with pytest.raises(RuntimeError, match="nobody killed"):
        crash_points.fault_point(crash_points.BEFORE_PUBLISH)
    assert marker.read_text().isdigit()


def test_launcher_refuses_a_node_off_loopback():
    fake = SimpleNamespace(nodes=lambda: [{"NodeManagerAddress": "192.0.2.2", "Alive": True}])
    with pytest.raises(RayNotLocal, match="192.0.2.2"):
        check_loopback(fake)
    check_loopback(SimpleNamespace(nodes=lambda: [{"NodeManagerAddress": "127.0.0.1", "Alive": True},
                                                  {"NodeManagerAddress": "10.0.0.1", "Alive": False}]))
    launch = RayLaunch.from_config(load_config(environ={"CITADEL_INGEST_PIPELINE__RAY_OBJECT_STORE_MB": "300"})
                                   .ingest_pipeline)
    assert launch.object_store_bytes == 300 * 1024 * 1024 and launch.worker_niceness == 15
