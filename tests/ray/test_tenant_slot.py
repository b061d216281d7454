"""The retriever replica's multiplexed tenant slot: loading warms the partition, and the cleanup Serve
runs on eviction is safe to run twice (Serve calls it, then the garbage collector may)."""

import pytest

pytest.importorskip("ray")

from tests.integration.conftest import make_home  # noqa: E402


@pytest.fixture
def home(tmp_path):
    return make_home(tmp_path / "home")


def test_eviction_cleanup_is_idempotent(home):
    from citadel.catalog.sqlite import SQLiteCatalog
    from citadel.retrieval.partitions import PartitionCache
    from serving.ray.app import TenantSlot

    partitions = PartitionCache(SQLiteCatalog(home.config.catalog_path), home.config.partitions_dir)
    slot = TenantSlot(partitions, "acme")
    assert len(partitions._loaded) == 1
    slot.__del__()
    slot.__del__()
    assert len(partitions._loaded) == 0
    assert partitions.evict("never-loaded") == 0
