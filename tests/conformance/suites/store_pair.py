"""The fixtures every store suite shares: a backend the subclass provides, a store it opens, and a
peer opened on the same data (a second process's view of one file or key prefix)."""

from __future__ import annotations

import pytest


class StorePairFixtures:
    """Override `backend` with a Backend of one kind: `open()` opens a store, a second call a peer
    on the same data."""

    @pytest.fixture
    def backend(self):
        raise NotImplementedError("a conformance subclass provides the backend under test")

    @pytest.fixture
    def store(self, backend):
        return backend.open()

    @pytest.fixture
    def peer(self, backend, store):
        return backend.open()
