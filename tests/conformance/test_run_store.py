"""Every RunStore runs the run-store suite (tests/conformance/suites/run_store.py): in process, SQLite
and Redis Streams (against the session's real redis-server, tests/redis_server.py;
CITADEL_REQUIRE_REDIS=1 makes its absence a failure; each test gets its own key prefix). The tests
that are not about one backend follow.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from citadel.config import CitadelConfig
from citadel.state.factory import make_run_store
from citadel.state.runs import MemoryRunStore
from tests.conformance.suites.run_store import RunStoreConformance, Backend, clock, REPO  # noqa: F401 (clock: fixtures)


class TestMemoryRunStore(RunStoreConformance):
    @pytest.fixture
    def backend(self, clock, tmp_path):
        opened = Backend("memory", clock, tmp_path, "")
        yield opened
        opened.close()


class TestSQLiteRunStore(RunStoreConformance):
    @pytest.fixture
    def backend(self, clock, tmp_path):
        opened = Backend("sqlite", clock, tmp_path, "")
        yield opened
        opened.close()


class TestRedisRunStore(RunStoreConformance):
    @pytest.fixture
    def backend(self, clock, tmp_path, redis_url):
        opened = Backend("redis", clock, tmp_path, redis_url)
        yield opened
        opened.close()


def test_factory_refuses_unknown_backends_and_redis_without_a_url(tmp_path):
    config = CitadelConfig(home=tmp_path)
    with pytest.raises(ValueError):
        make_run_store(config, backend="postgres")
    with pytest.raises(ValueError):
        make_run_store(config, backend="redis")
    assert isinstance(make_run_store(config, backend="memory"), MemoryRunStore)


def test_factory_imports_redis_only_when_configured(tmp_path):
    script = (
        "import sys\n"
        "from citadel.config import CitadelConfig\n"
        "from citadel.state.factory import make_run_store\n"
        f"store = make_run_store(CitadelConfig(home={str(tmp_path)!r}))\n"
        "store.close()\n"
        "print(type(store).__name__, 'redis' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["SQLiteRunStore", "False"]
