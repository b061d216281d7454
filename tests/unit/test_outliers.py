"""Per-replica latency outliers: ejected while slow, tried again once the evidence is stale."""

from citadel.resilience.outliers import LatencyOutliers


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_replica_ten_times_slower_is_ranked_last():
    clock = Clock()
    tracker = LatencyOutliers(clock=clock)
    for _ in range(5):
        tracker.observe("a", 40)
        tracker.observe("b", 45)
        tracker.observe("c", 450)
    assert tracker.outliers(["a", "b", "c"]) == {"c"}
    assert tracker.rank(["c", "a"]) == [["a"], ["c"]]
    assert tracker.rank(["c"]) == [["c"]]  # alone it is still used


def test_noise_and_small_gaps_are_not_outliers():
    tracker = LatencyOutliers(clock=Clock())
    for replica, ms in (("a", 2), ("b", 3), ("c", 9)):  # 4.5x but only 6.5 ms apart
        tracker.observe(replica, ms)
    assert tracker.outliers(["a", "b", "c"]) == set()
    tracker.observe("d", 60)
    assert tracker.outliers(["a", "b", "c", "d"]) == {"d"}


def test_stale_evidence_is_forgotten_so_a_recovered_replica_returns():
    clock = Clock()
    tracker = LatencyOutliers(stale_s=5.0, clock=clock)
    tracker.observe("a", 40)
    tracker.observe("b", 400)
    assert tracker.outliers(["a", "b"]) == {"b"}
    clock.now = 3.0
    tracker.observe("a", 40)
    clock.now = 6.0  # b's last sample is 6 s old: unknown again, so it is tried
    assert tracker.outliers(["a", "b"]) == set()
    tracker.observe("b", 42)  # it recovered
    assert tracker.outliers(["a", "b"]) == set()


def test_the_mean_moves_with_new_samples():
    tracker = LatencyOutliers(alpha=0.5, clock=Clock())
    tracker.observe("a", 100)
    tracker.observe("a", 0)
    tracker.observe("b", 10)
    assert tracker.outliers(["a", "b"]) == {"a"}  # mean 50 vs 10: 5x and 40 ms apart
    for _ in range(4):
        tracker.observe("a", 10)
    assert tracker.outliers(["a", "b"]) == set()


def test_a_request_long_in_flight_is_evidence_before_it_completes():
    clock = Clock()
    tracker = LatencyOutliers(clock=clock)
    for replica in ("a", "b", "c"):
        tracker.sent(replica)
    clock.now = 0.05
    tracker.completed("a")
    tracker.completed("b")
    assert tracker.outliers(["a", "b", "c"]) == set()  # c: 50 ms in flight, like its peers
    clock.now = 0.5
    assert tracker.outliers(["a", "b", "c"]) == {"c"}  # 500 ms and counting
    tracker.completed("c")
    assert tracker.outliers(["a", "b", "c"]) == {"c"}  # now a completed 500 ms sample
