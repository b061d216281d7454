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
