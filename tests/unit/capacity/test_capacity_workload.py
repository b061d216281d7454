"""The workload spec: YAML files load, typos are rejected, every field is documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from capacity.workload import MeasuredRates, Workload, load_rates, load_workload, with_rates

WORKLOADS = Path(__file__).resolve().parents[3] / "cluster" / "workloads"


@pytest.mark.parametrize("name", ["agentic-400m", "small-team"])
def test_workload_files_load(name: str) -> None:
    assert load_workload(WORKLOADS / f"{name}.yaml").name == name


def test_unknown_keys_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("hnsw:\n  M: 48\n", encoding="utf-8")
    with pytest.raises(ValidationError):
        load_workload(path)


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    assert load_workload(path) == Workload()


def _sections(model: type[BaseModel]) -> list[type[BaseModel]]:
    return [field.annotation for field in model.model_fields.values()
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)]


@pytest.mark.parametrize("section", _sections(Workload), ids=lambda s: s.__name__)
def test_every_number_is_a_documented_field(section: type[BaseModel]) -> None:
    if section is MeasuredRates:
        return  # filled by calibrate, named after the benchmarks
    undocumented = [name for name, field in section.model_fields.items() if not field.description]
    assert not undocumented


def test_rates_file_overrides_only_known_rates(tmp_path: Path) -> None:
    path = tmp_path / "rates.yaml"
    path.write_text("rates:\n  hnsw_search_ms: 0.5\n  bm25_search_ms: 0.1\n  unknown_rate: 3\n", encoding="utf-8")
    rates = load_rates(path)
    assert rates.hnsw_search_ms == 0.5
    merged = with_rates(Workload(), rates)
    assert merged.measured.bm25_search_ms == 0.1
