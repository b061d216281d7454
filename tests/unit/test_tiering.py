"""Tiers by size and traffic (citadel/segments/tiering.py), on an injected clock:
busy tenants hot, small or quiet ones cold, tiny ones exact; hysteresis and a minimum stay; a tenant that
stops being queried goes cold after its window and comes back hot when traffic returns; and the move
happens at a publish or compaction, never when a query counts (citadel/retrieval/traffic.py)."""

from __future__ import annotations

import time

import pytest

from citadel.catalog.base import TierEntry
from citadel.catalog.sqlite import SQLiteCatalog
from citadel.config import IndexConfig
from citadel.errors import CatalogUnavailable
from citadel.retrieval.traffic import CountingRetriever, TrafficCounter
from citadel.segments.tiering import (COLD, HOT, SECONDS_PER_DAY, TINY, TierStanding, day_of, decide_tier,
                                      queries_per_day, review_tiers, tier_standing)
from tests.settable_clock import SettableClock

DAY = SECONDS_PER_DAY
NOW = 1_000 * DAY
CONFIG = IndexConfig(tiny_max_chunks=1_000, hot_min_chunks=10_000, hot_min_queries_per_day=100, tier_margin=0.2,
                     tier_min_stay_days=2, tier_window_days=7)
BIG = 50_000


def standing(per_day: float | None, tier: str | None = None, since_days: float = 30) -> TierStanding:
    return TierStanding(per_day, TierEntry(tier, NOW - since_days * DAY) if tier else None, NOW)


def test_size_and_traffic_pick_the_tier():
    assert decide_tier("t", 500, standing(5_000), CONFIG) == TINY
    assert decide_tier("t", BIG, standing(5_000), CONFIG) == HOT  # busy
    assert decide_tier("t", BIG, standing(3), CONFIG) == COLD  # rarely used
    assert decide_tier("t", 5_000, standing(5_000), CONFIG) == COLD  # small: cold whatever its traffic
    assert decide_tier("t", BIG, standing(None), CONFIG) == COLD  # a new tenant, no traffic yet
    capped = CONFIG.model_copy(update={"hot_max_chunks": 40_000})
    assert decide_tier("t", BIG, standing(5_000), capped) == COLD
    pinned = CONFIG.model_copy(update={"tier_overrides": {"t": "hot"}})
    assert decide_tier("t", BIG, standing(0, COLD, since_days=0), pinned) == HOT


def test_hysteresis_moves_a_tenant_only_past_a_threshold_by_the_margin():
    # 100 queries a day is the threshold; the margin is 20 %.
    assert decide_tier("t", BIG, standing(110, COLD), CONFIG) == COLD  # above, not by the margin
    assert decide_tier("t", BIG, standing(121, COLD), CONFIG) == HOT
    assert decide_tier("t", BIG, standing(85, HOT), CONFIG) == HOT  # below, not by the margin
    assert decide_tier("t", BIG, standing(79, HOT), CONFIG) == COLD
    assert decide_tier("t", 1_100, standing(0, TINY), CONFIG) == TINY  # grown, within tiny's margin
    assert decide_tier("t", 900, standing(0, COLD), CONFIG) == COLD  # shrunk, within it
    assert decide_tier("t", 790, standing(0, COLD), CONFIG) == TINY
    assert decide_tier("t", 9_000, standing(5_000, HOT), CONFIG) == HOT  # the size threshold has one too


def test_a_tenant_keeps_its_tier_for_the_minimum_stay():
    assert decide_tier("t", BIG, standing(5_000, COLD, since_days=1), CONFIG) == COLD
    assert decide_tier("t", BIG, standing(5_000, COLD, since_days=2), CONFIG) == HOT
    assert decide_tier("t", BIG, standing(0, HOT, since_days=1.9), CONFIG) == HOT
    # A tiny tenant that grew past its margin leaves at once: exact search must stay small.
    assert decide_tier("t", BIG, standing(5_000, TINY, since_days=0), CONFIG) == HOT


def test_unknown_traffic_moves_nothing():
    assert decide_tier("t", BIG, standing(None, HOT), CONFIG) == HOT
    assert decide_tier("t", BIG, standing(None, COLD), CONFIG) == COLD
    assert decide_tier("t", 500, standing(None, COLD), CONFIG) == TINY  # size still decides


def test_quiet_goes_cold_after_its_window_and_busy_comes_back_hot(tmp_path):
    """A week of traffic through the catalog's day rows, one publish a day on the simulated clock."""
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    clock = SettableClock(NOW)
    entry = TierEntry(COLD, NOW)
    history = []
    daily = [1_000] * 5 + [0] * 10 + [1_000] * 3  # busy, then quiet, then busy again
    for queries in daily:
        catalog.record_queries(day_of(clock()), {"t": queries}, keep_days=CONFIG.tier_window_days)
        per_day = queries_per_day(catalog, ["t"], clock(), CONFIG.tier_window_days)["t"]
        tier = decide_tier("t", BIG, TierStanding(per_day, entry, clock()), CONFIG)
        if tier != entry.tier:
            entry = TierEntry(tier, clock())
        history.append(tier)
        clock.now += DAY
    assert history[:2] == [COLD, COLD]  # busy from day 0, but the minimum stay holds it cold for 2 days
    assert history[2:9] == [HOT] * 7
    quiet_days = history[5:].index(COLD)
    # Day 5 on is quiet: the mean over 7 days falls below 80/day (the threshold less its margin) on day 11.
    assert 5 + quiet_days == 11 and history[11:15] == [COLD] * 4
    assert history[15:] == [HOT] * 3  # traffic returns: 1000/7 ≥ 120 on the first day, the stay is over
    assert len(catalog.queries_since(["t"], 0)) == 1 and catalog.queries_since(["t"], 0)["t"] == 3_000
    catalog.close()


def test_a_tier_day_can_be_seconds_long(tmp_path):
    """index.tier_day_s shortens the policy's day (the local-cluster test runs moves in seconds): queries
    a day, the window and the minimum stay all count in days of that length."""
    config = CONFIG.model_copy(update={"tier_day_s": 2.0})
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    clock = SettableClock(1_000.0)
    counter = TrafficCounter(catalog, config, clock, spawn=lambda work: None)
    for _ in range(7 * 121):
        counter.record("t")
    assert counter.flush() == 847
    assert tier_standing(catalog, "t", clock(), config).queries_per_day == 121  # 847 over a 7-day (14 s) window
    entered = TierEntry(COLD, clock())
    assert decide_tier("t", BIG, TierStanding(121, entered, clock() + 3.9), config) == COLD  # a 2-day (4 s) stay
    assert decide_tier("t", BIG, TierStanding(121, entered, clock() + 4.0), config) == HOT
    assert tier_standing(catalog, "t", clock() + 12, config).queries_per_day == 121
    assert tier_standing(catalog, "t", clock() + 14, config).queries_per_day == 0  # out of the window
    catalog.close()


def test_the_counter_flushes_off_the_query_path_and_keeps_counts_the_catalog_refused(tmp_path):
    catalog = SQLiteCatalog(tmp_path / "catalog.sqlite")
    clock = SettableClock(NOW)
    flushes = []
    counter = TrafficCounter(catalog, IndexConfig(traffic_flush_s=30, traffic_max_tenants=2), clock,
                             spawn=flushes.append)
    for tenant in ("a", "a", "b", "c"):  # c is past the bound on counted tenants
        counter.record(tenant)
    assert flushes == [] and counter.pending() == {"a": 2, "b": 1}
    clock.now += 30
    counter.record("a")
    counter.record("a")  # one flush at a time
    assert len(flushes) == 1 and catalog.queries_since(["a", "b"], 0) == {}
    flushes[0]()
    assert catalog.queries_since(["a", "b"], 0) == {"a": 4, "b": 1} and counter.pending() == {}

    class Down:
        def record_queries(self, *args):
            raise CatalogUnavailable("down")

    failing = TrafficCounter(Down(), IndexConfig(), clock, spawn=flushes.append)
    failing.record("a")
    assert failing.flush() == 0 and failing.pending() == {"a": 1}
    catalog.close()


@pytest.fixture
def small_tiers(make_runtime):
    """A runtime whose tenants above 2 chunks are not tiny, hot from one query a day, no minimum stay."""
    return make_runtime(index={"tiny_max_chunks": 2, "hot_min_chunks": 1, "hot_min_queries_per_day": 1.0,
                               "tier_min_stay_days": 0.0, "tier_window_days": 1})


def test_a_tenant_moves_at_a_compaction_not_when_it_is_queried(small_tiers, tmp_path):
    from citadel.ingest.sources import AclSpec, discover
    from citadel.types import Principal

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"note-{i}.md").write_text(f"# Note {i}\n\n## Parking\n\nParking permit {i} costs {i + 10} USD.\n")
    ingestor = small_tiers.ingestor()
    assert ingestor.ingest("acme", discover([docs]), AclSpec.from_groups(["staff"])).tier == COLD  # no traffic yet
    catalog = small_tiers.catalog
    counter = TrafficCounter(catalog, small_tiers.config.index, spawn=lambda work: None)
    retriever = CountingRetriever(small_tiers.retriever, counter)  # as serving wires it (Wiring.retriever)
    alice = Principal("acme", "alice", frozenset({"staff"}))
    for _ in range(5):  # queries count for the tenant; its tier does not change with them
        assert retriever.retrieve(alice, "parking permit").passages
    assert counter.pending() == {"acme": 5} and counter.flush() == 5
    assert catalog.tier_entries(["acme"])["acme"].tier == COLD
    (review,) = review_tiers(catalog, small_tiers.config.index, time.time())  # what `citadel tiers` shows
    assert (review.tier, review.wanted, review.moves, review.queries_per_day) == (COLD, HOT, True, 5.0)
    runner = small_tiers.job_runner()  # a runner's periodic check runs what `citadel tiers --apply` runs
    assert runner.check_tiers() == 1
    latest = catalog.list_jobs(["acme"], limit=1)[0]  # the move is a compaction
    assert (latest["kind"], latest["report"]["tier"], latest["report"]["rebuild_reason"]) == ("compact", HOT, "forced")
    assert catalog.tier_entries(["acme"])["acme"].tier == HOT
    assert not review_tiers(catalog, small_tiers.config.index, time.time())[0].moves
    assert runner.check_tiers() == 0 and small_tiers.move_tiers(time.time()) == []  # nothing left to move
    # Decided again under the tenant's lock: a runner that reviewed before another moved it rebuilds nothing.
    assert ingestor.compact("acme", only_if_tier_moves=True) is None
