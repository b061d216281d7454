"""The ObjectStore suite (citadel/ingest/objects.py): the local directory and an S3-compatible bucket
behave the same. A key is written once; listing is by string prefix; bad keys are refused before
anything is written; of two writers racing for one key with different bytes exactly one wins.
"""

from __future__ import annotations

import threading

import pytest

from citadel.errors import Conflict, InvalidRequest, NotFound
from citadel.ingest.objects import ObjectStore

PDF_BYTES = b"%PDF-1.7\n\x00\x01\xff binary \r\n"


class ObjectStoreConformance:
    """`backend` yields an empty ObjectStore per test."""

    @pytest.fixture
    def backend(self) -> ObjectStore:
        raise NotImplementedError

    def test_a_put_is_read_back_byte_for_byte(self, backend):
        assert backend.put_if_absent("raw/acme/memo/v1/abc.pdf", PDF_BYTES) is True
        assert backend.get("raw/acme/memo/v1/abc.pdf") == PDF_BYTES
        assert backend.put_if_absent("raw/acme/empty/v1/e.txt", b"") is True
        assert backend.get("raw/acme/empty/v1/e.txt") == b""

    def test_the_same_bytes_again_are_a_no_op(self, backend):
        backend.put_if_absent("raw/acme/memo/v1/abc.md", b"# memo")
        assert backend.put_if_absent("raw/acme/memo/v1/abc.md", b"# memo") is False
        assert backend.get("raw/acme/memo/v1/abc.md") == b"# memo"
        assert backend.list_prefix("raw/acme/memo/") == ["raw/acme/memo/v1/abc.md"]

    def test_other_bytes_under_an_existing_key_are_refused_and_the_first_stay(self, backend):
        backend.put_if_absent("raw/acme/memo/v1/abc.md", b"first")
        with pytest.raises(Conflict) as refused:
            backend.put_if_absent("raw/acme/memo/v1/abc.md", b"second")
        assert refused.value.code == "object_exists"
        assert backend.get("raw/acme/memo/v1/abc.md") == b"first"

    def test_a_missing_object_is_not_found(self, backend):
        with pytest.raises(NotFound):
            backend.get("raw/acme/nothing/v1/x.md")
        backend.put_if_absent("raw/acme/memo/v1/abc.md", b"x")
        with pytest.raises(NotFound):
            backend.get("raw/acme/memo/v1")  # a prefix is not an object

    def test_delete_removes_once(self, backend):
        backend.put_if_absent("raw/acme/memo/v1/abc.md", b"x")
        backend.put_if_absent("raw/acme/memo/v2/def.md", b"y")
        assert backend.delete("raw/acme/memo/v1/abc.md") is True
        assert backend.delete("raw/acme/memo/v1/abc.md") is False
        with pytest.raises(NotFound):
            backend.get("raw/acme/memo/v1/abc.md")
        assert backend.list_prefix("raw/acme/memo/") == ["raw/acme/memo/v2/def.md"]
        assert backend.put_if_absent("raw/acme/memo/v1/abc.md", b"z") is True  # deleted: the key is free again

    def test_listing_is_by_string_prefix_sorted(self, backend):
        for key in ("raw/acme/memo/v2/b.md", "raw/acme/memo/v1/a.md", "raw/acme/memo2/v1/c.md",
                    "raw/acme/memox.md", "raw/globex/memo/v1/d.md"):
            backend.put_if_absent(key, key.encode())
        assert backend.list_prefix("raw/acme/memo/") == ["raw/acme/memo/v1/a.md", "raw/acme/memo/v2/b.md"]
        assert backend.list_prefix("raw/acme/memo") == ["raw/acme/memo/v1/a.md", "raw/acme/memo/v2/b.md",
                                                        "raw/acme/memo2/v1/c.md", "raw/acme/memox.md"]
        assert backend.list_prefix("raw/acme/memo/v1/") == ["raw/acme/memo/v1/a.md"]
        assert backend.list_prefix("raw/initech/") == []
        assert len(backend.list_prefix("")) == 5

    @pytest.mark.parametrize("key", ["", "../escape", "raw/../../etc/passwd", "raw//double", "raw/./dot", "/abs",
                                     "raw/with space", "raw/new\nline", "raw/trailing/", "x" * 1025])
    def test_a_bad_key_is_refused_before_anything_is_written(self, backend, key):
        with pytest.raises(InvalidRequest):
            backend.put_if_absent(key, b"x")
        with pytest.raises(InvalidRequest):
            backend.get(key)
        assert backend.list_prefix("") == []

    def test_of_two_writers_racing_for_a_key_exactly_one_wins(self, backend):
        outcomes: list[str] = []

        def write(data: bytes) -> None:
            try:
                outcomes.append("stored" if backend.put_if_absent("raw/acme/race/v1/k.md", data) else "same")
            except Conflict:
                outcomes.append("refused")

        writers = [threading.Thread(target=write, args=(f"writer {n}".encode(),)) for n in range(6)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        assert sorted(outcomes) == ["refused"] * 5 + ["stored"]
        assert backend.get("raw/acme/race/v1/k.md").startswith(b"writer ")
