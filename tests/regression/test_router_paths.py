"""The router's paths on a labeled set of messages: a request for an action,
bare or after a question, takes the agentic path; plain questions keep the single-shot path; small
talk gets the router's fixed reply. `citadel eval router` prints the same table."""

from __future__ import annotations

from collections import Counter

import pytest

from citadel.eval import router as router_eval

# Measured 0.987 (76 of 77) when the action rules came in; before them 0.636 (every bare action
# request went single-shot). The floor leaves room for one or two new hard cases, not for a regression.
MIN_ACCURACY = 0.95


@pytest.fixture(scope="module")
def result():
    return router_eval.run()


def test_the_set_is_large_and_covers_every_label():
    items = router_eval.load_set()
    labels = Counter(item.label for item in items)
    assert len(items) >= 60
    assert set(labels) == set(router_eval.LABELS) and min(labels.values()) >= 8
    assert len({item.message for item in items}) == len(items), "no message twice"


def test_the_router_routes_the_set_above_the_floor(result):
    assert result["accuracy"] >= MIN_ACCURACY, router_eval.format_table(result)


def test_every_request_for_an_action_takes_the_agentic_path(result):
    for label in ("bare_action", "question_plus_action"):
        row = result["table"][label]
        assert row["single_shot"] == row["refused"] == 0, (label, result["misses"])


def test_plain_questions_keep_the_single_shot_path(result):
    row = result["table"]["single_question"]
    assert row["single_shot"] / sum(row.values()) >= 0.9 and row["refused"] == 0, result["misses"]


def test_a_bad_line_is_refused_by_name(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"message": "hi", "label": "greeting", "path": "refused"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        router_eval.load_set(bad)
