"""The reader's uses that need no model: the blended rerank, the shared memo, and the artefact checks
that make a corrupt or mismatched artefact a clear startup error naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from citadel.reader.base import ReaderError
from citadel.reader.fake import FakeReader
from citadel.reader.memo import MemoReader
from citadel.reader.network import MANIFEST_FILE, WEIGHTS_FILE, read_artefact
from citadel.rerank.reader import ReaderReranker, blended
from citadel.types import Passage


def passage(chunk: str, text: str, score: float, heading: str = "Leave") -> Passage:
    return Passage(f"t:{chunk}:v1:0000", text, chunk, chunk.title(), 1, heading, None, f"{chunk}.md", score)


class CountingReader:
    model_id = "counting"

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def score(self, question, texts):
        self.calls.append(list(texts))
        return self.inner.score(question, texts)


def test_blend_is_the_reader_at_zero_and_the_fused_order_at_one():
    probabilities, fused = [0.9, 0.1, 0.5], [0.01, 0.03, 0.02]
    assert blended(probabilities, fused, 0.0) == pytest.approx(probabilities)
    assert blended(probabilities, fused, 1.0) == pytest.approx([1 / 3, 1.0, 2 / 3])
    assert blended([0.2], [0.0], 0.5) == pytest.approx([0.1])  # no fused score: no division by zero


def test_the_reader_lifts_the_passage_that_answers_above_a_better_fused_one():
    question = "How many days of annual leave do new employees get?"
    candidates = [passage("cafeteria", "The cafeteria opens at noon.", 0.033),
                  passage("leave", "New employees get 13 days of annual leave each year.", 0.030)]
    reranked = ReaderReranker(FakeReader(), fusion_weight=0.3).rerank(question, candidates, top_n=2)
    assert [p.document_id for p in reranked] == ["leave", "cafeteria"]
    assert reranked[0].score >= reranked[1].score
    assert ReaderReranker(FakeReader(), fusion_weight=1.0).rerank(question, candidates, 2)[0].document_id == "cafeteria"


def test_candidates_past_the_reader_depth_keep_their_fused_order_below_the_read_ones():
    question = "annual leave days"
    candidates = [passage(f"d{i}", "annual leave days" if i == 3 else "other text", 0.05 - i * 0.001) for i in range(5)]
    counting = CountingReader(FakeReader())
    reranked = ReaderReranker(counting, candidates=2).rerank(question, candidates, top_n=5)
    assert len(counting.calls[0]) == 2  # only the first two were read
    assert [p.document_id for p in reranked][2:] == ["d2", "d3", "d4"]
    assert ReaderReranker(FakeReader()).rerank(question, [], 3) == []


def test_the_memo_scores_a_pair_once_and_keeps_the_order():
    counting = CountingReader(FakeReader())
    memo = MemoReader(counting, capacity=3)
    first = memo.score("leave days", ["a leave", "b days", "a leave"])
    assert memo.score("leave days", ["b days", "a leave"]) == [first[1], first[0]]
    assert counting.calls == [["a leave", "b days"]]
    memo.score("leave days", ["c", "d"])  # over capacity: the oldest pair is forgotten
    memo.score("leave days", ["a leave"])
    assert counting.calls[-1] == ["a leave"]


def test_a_missing_or_corrupt_manifest_is_an_error_naming_the_file(tmp_path: Path):
    with pytest.raises(ReaderError) as missing:
        read_artefact(tmp_path)
    assert str(tmp_path / MANIFEST_FILE) in str(missing.value) and missing.value.code == "reader_artefact_missing"
    (tmp_path / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ReaderError) as corrupt:
        read_artefact(tmp_path)
    assert str(tmp_path / MANIFEST_FILE) in str(corrupt.value) and corrupt.value.code == "reader_artefact_corrupt"
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({"base_sha256": "0" * 64}))
    with pytest.raises(ReaderError) as no_weights:
        read_artefact(tmp_path)
    assert str(tmp_path / WEIGHTS_FILE) in str(no_weights.value)


def test_an_artefact_for_other_base_weights_or_with_garbage_weights_refuses_to_load(tmp_path: Path):
    pytest.importorskip("torch")
    from citadel.reader.network import ARTEFACT_DIR, load_network

    (tmp_path / MANIFEST_FILE).write_text(json.dumps({"base_sha256": "0" * 64}))
    (tmp_path / WEIGHTS_FILE).write_bytes(b"garbage")
    with pytest.raises(ReaderError) as mismatch:
        load_network(read_artefact(tmp_path))
    assert mismatch.value.code == "reader_base_mismatch" and str(tmp_path / WEIGHTS_FILE) in str(mismatch.value)
    packaged = json.loads((ARTEFACT_DIR / MANIFEST_FILE).read_text())
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({"base_sha256": packaged["base_sha256"]}))
    with pytest.raises(ReaderError) as garbage:
        load_network(read_artefact(tmp_path))
    assert garbage.value.code == "reader_artefact_corrupt" and str(tmp_path / WEIGHTS_FILE) in str(garbage.value)
