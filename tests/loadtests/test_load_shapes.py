"""The load shapes (loadtests/shapes.py): user counts over the run, and None at the run time."""

from __future__ import annotations

import pytest

from loadtests.shapes import DiurnalShape, SpikeShape, StepShape, make_shape


@pytest.mark.parametrize("name", ["diurnal", "step", "spike", "constant"])
def test_every_shape_ends_at_its_run_time_and_stays_within_its_bounds(name):
    shape = make_shape(name, 120.0, 40)
    ticks = [shape.tick(t / 2) for t in range(240)]
    assert all(tick is not None and 1 <= tick[0] <= 40 and tick[1] > 0 for tick in ticks)
    assert max(tick[0] for tick in ticks) == 40
    assert shape.tick(120.0) is None and shape.tick(500.0) is None


def test_diurnal_has_a_night_trough_and_an_afternoon_peak():
    shape = DiurnalShape(240.0, 100)  # ten seconds per hour
    users = {hour: shape.tick(hour * 10.0)[0] for hour in range(24)}
    assert users[2] == 10 and users[14] == 100  # trough at 02:00, peak at 14:00
    assert all(users[h] <= users[h + 1] for h in range(2, 14)) and all(users[h] >= users[h + 1] for h in range(14, 23))
    assert users[9] < 100 and users[20] < 100


def test_step_climbs_in_equal_steps():
    shape = StepShape(50.0, 50, steps=5)
    assert [shape.tick(t)[0] for t in (0, 9.9, 10, 25, 35, 49.9)] == [10, 10, 20, 30, 40, 50]


def test_spike_jumps_to_the_peak_for_the_middle_of_the_run_only():
    shape = SpikeShape(100.0, 50)
    assert [shape.tick(t)[0] for t in (0, 39, 40, 59, 60, 99)] == [10, 10, 50, 50, 10, 10]
    assert shape.tick(45)[1] >= 50  # the spike arrives within about a second


def test_shapes_are_bounded():
    with pytest.raises(ValueError):
        make_shape("diurnal", 121 * 60, 10)
    with pytest.raises(ValueError):
        make_shape("step", 60, 2001)
    with pytest.raises(ValueError):
        make_shape("sawtooth", 60, 10)
