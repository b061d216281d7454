from pathlib import Path

import pytest
from pydantic import ValidationError

from citadel.config import load_config


def test_defaults_without_file_or_env():
    config = load_config(environ={})
    assert config.home == Path("./var")
    assert config.retrieval.rrf_k == 60
    assert config.index.tiny_max_chunks == 20_000


def test_yaml_then_env_precedence(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("home: /data/citadel\nretrieval:\n  top_k: 5\n  candidates: 30\n")
    config = load_config(path, environ={"CITADEL_RETRIEVAL__TOP_K": "3", "CITADEL_EMBEDDING__BACKEND": "hash"})
    assert config.home == Path("/data/citadel")
    assert config.retrieval.top_k == 3  # env wins over the file
    assert config.retrieval.candidates == 30  # the file wins over defaults
    assert config.embedding.backend == "hash"


def test_citadel_home_env(tmp_path):
    config = load_config(environ={"CITADEL_HOME": str(tmp_path)})
    assert config.catalog_path == tmp_path / "catalog.sqlite"


def test_nested_mapping_from_env():
    config = load_config(environ={"CITADEL_INDEX__TIER_OVERRIDES": "{acme: cold}"})
    assert config.index.tier_overrides == {"acme": "cold"}


@pytest.mark.parametrize("env", [{"CITADEL_RETRIEVAL__NO_SUCH_FIELD": "1"}, {"CITADEL_EMBEDDING__BACKEND": "gpt"}])
def test_bad_values_are_refused(env):
    with pytest.raises(ValidationError):
        load_config(environ=env)


def test_an_ingress_limit_at_or_below_the_shedders_bound_is_refused():
    """Serve's proxy must hand every request to the shedder: at the ingress replica's own limit it holds
    them and backs off instead, so the limit has to sit above in-flight + waiting."""
    from citadel.config import CitadelConfig

    for name in ("gateway", "fused"):
        with pytest.raises(ValidationError, match=f"deployments.{name}.max_ongoing_requests"):
            CitadelConfig(serving={"admission_max_in_flight": 8, "admission_max_waiting": 8,
                                   "deployments": {name: {"max_ongoing_requests": 16}}})
    config = CitadelConfig(serving={"admission_max_in_flight": 8, "admission_max_waiting": 8,
                                    "deployments": {"gateway": {"max_ongoing_requests": 17}}})
    assert config.serving.deployments["gateway"].max_ongoing_requests == 17
