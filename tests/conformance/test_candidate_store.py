"""Every catalog backend runs the candidate-queue suite (tests/conformance/suites/candidate_queue.py):
SQLite on a file and in memory, Postgres when its binaries are here, and the guarded catalog."""

from __future__ import annotations

from tests.conformance.suites.candidate_queue import CandidateQueueConformance
from tests.conformance.suites.catalog import (GuardedSQLiteBackend, PostgresBackend, SQLiteFileBackend,
                                             SQLiteMemoryBackend)
from tests.postgres_server import postgres_dsn  # noqa: F401  (a session fixture)


class TestSQLiteFileCandidates(SQLiteFileBackend, CandidateQueueConformance):
    pass


class TestSQLiteMemoryCandidates(SQLiteMemoryBackend, CandidateQueueConformance):
    pass


class TestPostgresCandidates(PostgresBackend, CandidateQueueConformance):
    pass


class TestGuardedCandidates(GuardedSQLiteBackend, CandidateQueueConformance):
    pass
