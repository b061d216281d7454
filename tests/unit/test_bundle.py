"""Config bundles (citadel/quality/bundle.py): the same config names the same bundle; what shapes an
answer changes the id; where things live, secrets and ports do not; diff names the changed keys."""

from __future__ import annotations

import os
import shutil

import pytest

from citadel.config import load_config
from citadel.quality.bundle import Bundle, bundle_id, diff, effective_bundle
from citadel.quality.bundle_sections import AGENT_LEFT_OUT, ANSWER_LEFT_OUT, INDEX_SEARCH_FIELDS
from citadel.quality.bundle_store import BundleStore
from citadel.reader.network import ARTEFACT_DIR, MANIFEST_FILE, WEIGHTS_FILE

BASE_ENV = {"CITADEL_EMBEDDING__BACKEND": "hash"}


def config(**environ: str):
    return load_config(environ={**BASE_ENV, **environ})


def changed(original, section: str, **fields):
    """`original` with some fields of one section replaced."""
    return original.model_copy(update={section: getattr(original, section).model_copy(update=fields)})


def test_same_config_same_id():
    first, second = effective_bundle(config()), effective_bundle(config())
    assert first.id == second.id == bundle_id(first)
    assert first.id.startswith("b-") and len(first.id) == 14 and int(first.id[2:], 16) >= 0
    assert diff(first, second) == []


def test_a_changed_gate_threshold_changes_the_id_and_diff_names_it():
    before = effective_bundle(config())
    after = effective_bundle(config(CITADEL_ANSWER__MIN_COVERAGE="0.7"))
    assert before.id != after.id
    [change] = diff(before, after)
    assert (change.key, change.old, change.new) == ("answer.min_coverage", 0.6, 0.7)


def test_retrieval_and_model_choices_are_in_the_bundle():
    base = config()
    assert effective_bundle(changed(base, "retrieval", rrf_k=30)).id != effective_bundle(base).id
    keys = [c.key for c in diff(effective_bundle(base), effective_bundle(changed(base, "answer", generator="local_llm")))]
    assert "models.generator.backend" in keys


def test_a_changed_task_instruction_changes_the_id():
    base = config()
    before = effective_bundle(base)
    thorough = "Be thorough and complete: cover every detail the sources give, citing sources with [n] markers."
    after = effective_bundle(changed(base, "answer", task_instruction=thorough))
    assert before.id != after.id
    [change] = diff(before, after)
    assert (change.key, change.new) == ("answer.task_instruction", thorough)


def test_a_changed_prompt_text_changes_the_id(monkeypatch):
    from citadel.prompting import prompt

    before = effective_bundle(config())
    monkeypatch.setattr(prompt, "SYSTEM_PROMPT", prompt.SYSTEM_PROMPT + " Be brief.")
    after = effective_bundle(config())
    assert before.id != after.id
    assert [c.key for c in diff(before, after)] == ["prompts.answer.texts_sha256"]


def test_a_changed_reader_artefact_changes_the_id(tmp_path):
    artefact = tmp_path / "reader"
    artefact.mkdir()
    shutil.copy(ARTEFACT_DIR / MANIFEST_FILE, artefact / MANIFEST_FILE)
    (artefact / WEIGHTS_FILE).write_bytes(b"weights one")
    one = effective_bundle(config(CITADEL_ANSWER__READER_ARTEFACT=str(artefact)))
    packaged = effective_bundle(config())
    assert str(artefact) not in str(one.sections)
    (artefact / WEIGHTS_FILE).write_bytes(b"weights two")
    os.utime(artefact / WEIGHTS_FILE, ns=(1, 1))  # a new version even on a coarse clock
    two = effective_bundle(config(CITADEL_ANSWER__READER_ARTEFACT=str(artefact)))
    assert len({one.id, two.id, packaged.id}) == 3
    assert [c.key for c in diff(one, two)] == ["models.reader.weights_sha256"]


def test_the_same_artefact_elsewhere_is_the_same_bundle(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ARTEFACT_DIR, copy)
    assert effective_bundle(config(CITADEL_ANSWER__READER_ARTEFACT=str(copy))).id == effective_bundle(config()).id


def test_tool_registry_is_named_by_content(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("tools: []\n")
    second.write_text("tools: []\n")
    none = effective_bundle(config())
    a = effective_bundle(config(CITADEL_TOOLS__REGISTRY_FILE=str(first)))
    b = effective_bundle(config(CITADEL_TOOLS__REGISTRY_FILE=str(second)))
    assert a.id == b.id != none.id
    second.write_text("tools: [{name: crm}]\n")
    assert effective_bundle(config(CITADEL_TOOLS__REGISTRY_FILE=str(second))).id != a.id


@pytest.mark.parametrize("section, fields", [
    ("serving", {"port": 9123, "host": "127.0.0.2", "request_timeout_s": 5.0}),
    ("answer", {"openai_base_url": "http://10.0.0.1:9000", "openai_api_key_env": "OTHER_KEY",
                "openai_timeout_s": 3.0, "rerank_timeout_s": 1.0, "prompt_key_env": "KEYS",
                "answer_log_retention_days": 1.0}),
    ("state", {"redis_url": "redis://:secret@10.0.0.2:6380/1"}),
    ("catalog", {"backend": "postgres", "dsn": "postgresql://u:secret@db/citadel"}),
    ("agent", {"openai_base_url": "http://10.0.0.3:1", "openai_timeout_s": 2.0, "lease_ttl_s": 5.0}),
    ("tools", {"endpoints": {"crm": "http://10.0.0.4"}, "timeout_s": 1.0}),
])
def test_secrets_ports_and_places_do_not_change_the_id(section, fields):
    base = config()
    assert effective_bundle(changed(base, section, **fields)).id == effective_bundle(base).id


def test_home_and_credentials_do_not_change_the_id(tmp_path):
    base = config()
    elsewhere = base.model_copy(update={"home": tmp_path / "other"})
    assert effective_bundle(elsewhere).id == effective_bundle(base).id


def test_left_out_names_are_real_fields():
    """A renamed setting must not silently slip past the exclusions (or into a bundle it never shaped)."""
    from citadel.config import AgentConfig, AnswerConfig, IndexConfig

    assert ANSWER_LEFT_OUT <= set(AnswerConfig.model_fields)
    assert AGENT_LEFT_OUT <= set(AgentConfig.model_fields)
    assert set(INDEX_SEARCH_FIELDS) <= set(IndexConfig.model_fields)


def test_the_store_keeps_each_bundle_once(tmp_path):
    store = BundleStore.for_home(tmp_path)
    bundle = effective_bundle(config())
    assert store.save(bundle) == bundle.id
    path = store.path(bundle.id)
    written = path.stat().st_mtime_ns
    store.save(bundle)
    assert path.stat().st_mtime_ns == written and store.ids() == [bundle.id]
    loaded = store.load(bundle.id)
    assert loaded == bundle and loaded.id == bundle.id
    for unknown in ("b-000000000000", "../secrets", ""):
        with pytest.raises(KeyError):
            store.load(unknown)


def test_diff_of_keys_only_one_side_has():
    a, b = Bundle({"x": {"y": 1}}), Bundle({"x": {"y": 1, "z": [1, 2]}})
    [change] = diff(a, b)
    assert (change.key, change.old, change.new) == ("x.z", None, [1, 2])
