"""Every catalog backend runs the prompt-store suite (tests/conformance/suites/prompt_store.py): SQLite
on a file and in memory, Postgres when its binaries are here, and the guarded catalog."""

from __future__ import annotations

from tests.conformance.suites.catalog import (GuardedSQLiteBackend, PostgresBackend, SQLiteFileBackend,
                                             SQLiteMemoryBackend)
from tests.conformance.suites.prompt_store import PromptStoreConformance
from tests.postgres_server import postgres_dsn  # noqa: F401  (a session fixture)


class TestSQLiteFilePromptStore(SQLiteFileBackend, PromptStoreConformance):
    pass


class TestSQLiteMemoryPromptStore(SQLiteMemoryBackend, PromptStoreConformance):
    pass


class TestPostgresPromptStore(PostgresBackend, PromptStoreConformance):
    pass


class TestGuardedPromptStore(GuardedSQLiteBackend, PromptStoreConformance):
    pass
