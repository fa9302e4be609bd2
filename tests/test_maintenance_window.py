"""GKE's maintenance-window rule, computed two ways: the module's exact sweep, and a brute force
hour by hour over the same year. They must agree for every window and rule."""

from __future__ import annotations

from datetime import timedelta

from dateutil.rrule import rrulestr
from hypothesis import given, settings
from hypothesis import strategies as st
from tpu_training_components.maintenance_window import (
    _HORIZON,
    FIRST_DAY,
    MIN_CONTIGUOUS,
    ROLLING_PERIOD,
    least_availability,
    recurring_window,
)

DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


def brute_force_hours(start_hour: int, length_hours: int, recurrence: str) -> int:
    """Least hours counted in any 32 days, by marking every hour of the year."""
    start = FIRST_DAY + timedelta(hours=start_hour)
    hours = int(_HORIZON / timedelta(hours=1))
    covered = [False] * hours
    for occurrence in rrulestr(recurrence, dtstart=start).between(start, start + _HORIZON, inc=True):
        first = int((occurrence - start) / timedelta(hours=1))
        for hour in range(first, min(first + length_hours, hours)):
            covered[hour] = True
    # Only runs of at least 4 hours count.
    counted = covered[:]
    run_start = None
    for hour in range(hours + 1):
        on = hour < hours and covered[hour]
        if on and run_start is None:
            run_start = hour
        if not on and run_start is not None:
            if hour - run_start < MIN_CONTIGUOUS / timedelta(hours=1):
                counted[run_start:hour] = [False] * (hour - run_start)
            run_start = None
    period = int(ROLLING_PERIOD / timedelta(hours=1))
    total = sum(counted[:period])
    least = total
    for first in range(1, hours - period + 1):
        total += counted[first + period - 1] - counted[first - 1]
        least = min(least, total)
    return least


rules = st.one_of(
    st.builds(lambda n: f"FREQ=DAILY;INTERVAL={n}", st.integers(1, 4)),
    st.builds(
        lambda days, n: f"FREQ=WEEKLY;INTERVAL={n};BYDAY={','.join(days)}",
        st.lists(st.sampled_from(DAYS), min_size=1, max_size=7, unique=True),
        st.integers(1, 2),
    ),
    st.builds(
        lambda days: f"FREQ=MONTHLY;BYMONTHDAY={','.join(map(str, days))}",
        st.lists(st.integers(1, 31), min_size=1, max_size=12, unique=True),
    ),
)


@settings(max_examples=40, deadline=None)
@given(start_hour=st.integers(0, 23), length_hours=st.integers(1, 23), recurrence=rules)
def test_the_sweep_agrees_with_an_hour_by_hour_count(start_hour, length_hours, recurrence):
    start = FIRST_DAY + timedelta(hours=start_hour)
    rule = rrulestr(recurrence, dtstart=start)
    exact = least_availability(start, timedelta(hours=length_hours), rule)
    assert exact == timedelta(hours=brute_force_hours(start_hour, length_hours, recurrence))


def test_the_default_window_gives_48_hours_and_is_sent_as_gke_writes_rrules():
    window = recurring_window("02:00", "08:00", "freq=weekly;byday=sa,su")
    assert window.recurrence == "FREQ=WEEKLY;BYDAY=SA,SU"
    rule = rrulestr(window.recurrence, dtstart=window.start)
    assert least_availability(window.start, window.length, rule) == timedelta(hours=48)
