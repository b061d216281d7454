"""`citadel bench ingest --json`: the row shape, on the hash embedder (fast) and on the real model (slow)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")

from typer.testing import CliRunner  # noqa: E402

from citadel.cli.main import app  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
ROW_KEYS = {"mode", "chunks", "seconds", "chunks_per_s"}


def _bench(tmp_path, monkeypatch, *args):
    monkeypatch.setenv("CITADEL_INGEST_PIPELINE__RAY_NUM_CPUS", "2")
    monkeypatch.setenv("CITADEL_INGEST_PIPELINE__RAY_OBJECT_STORE_MB", "200")
    result = CliRunner().invoke(app, ["bench", "ingest", "--workdir", str(tmp_path), "--json", *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_bench_ingest_json_rows(tmp_path, monkeypatch):
    payload = _bench(tmp_path, monkeypatch, "--chunks", "120", "--backend", "hash")
    assert set(payload) == {"rows"}
    rows = {row["mode"]: row for row in payload["rows"]}
    assert set(rows) == {"raydata", "raw_encode"}
    for row in rows.values():
        assert ROW_KEYS <= set(row) and row["chunks"] == 120 and row["chunks_per_s"] > 0


@pytest.mark.slow
@pytest.mark.model
def test_bench_ingest_real_model(tmp_path, monkeypatch):
    rows = {row["mode"]: row for row in _bench(tmp_path, monkeypatch, "--chunks", "200")["rows"]}
    assert rows["raydata"]["chunks"] == rows["raw_encode"]["chunks"] == 200
