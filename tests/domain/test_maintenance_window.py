"""GKE's maintenance-window rule, computed two ways: the module's exact sweep, and a brute force
hour by hour over the same year. They must agree for every window and rule."""

from __future__ import annotations

from datetime import timedelta

import pytest
from dateutil.rrule import rrulestr
from hypothesis import given, settings
from hypothesis import strategies as st
from tpu_training_components.domain import maintenance_window
from tpu_training_components.domain.maintenance_window import (
    _HORIZON,
    FIRST_DAY,
    MIN_CONTIGUOUS,
    ROLLING_PERIOD,
    MaintenanceWindowError,
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


@pytest.mark.parametrize(
    ("recurrence", "refused"),
    [
        # 86,400 starts a day for a year: minutes of expansion before any check.
        (
            "FREQ=DAILY;BYHOUR="
            + ",".join(map(str, range(24)))
            + ";BYMINUTE="
            + ",".join(map(str, range(60)))
            + ";BYSECOND="
            + ",".join(map(str, range(60))),
            "BYHOUR=0,1,2",
        ),
        (
            "FREQ=WEEKLY;BYDAY=SA;BYMINUTE=0,30",
            "BYMINUTE=0,30 is not allowed; a maintenance window starts at",
        ),
        ("FREQ=DAILY;BYSECOND=1", "BYSECOND=1 is not allowed; a maintenance window starts at"),
        # Rules python-dateutil scanned to the year 9999 for 10 s and more before finding nothing.
        (
            "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
            "BYMONTH=2 is not allowed; a maintenance window's RRULE may have",
        ),
        ("FREQ=DAILY;BYYEARDAY=400", "BYYEARDAY=400 is not allowed"),
        ("FREQ=DAILY;BYWEEKNO=60", "BYWEEKNO=60 is not allowed"),
        (
            "FREQ=DAILY;BYSETPOS=2",
            "BYSETPOS=2 is not allowed; BYSETPOS picks among the days of a WEEKLY or MONTHLY",
        ),
        ("FREQ=MONTHLY;BYSETPOS=40;BYMONTHDAY=1", "BYSETPOS=40 is not allowed"),
    ],
)
def test_rrule_parts_that_expand_without_bound_are_refused_before_expanding(monkeypatch, recurrence, refused):
    def never(*args):
        raise AssertionError("expanded a rule that should have been refused")

    monkeypatch.setattr(maintenance_window, "_starts", never)
    with pytest.raises(MaintenanceWindowError) as error:
        recurring_window("02:00", "08:00", recurrence)
    # The message names the recurrence, the part and its value, and what is allowed instead.
    assert refused in str(error.value) and f"recurrence {recurrence!r}" in str(error.value)
    allowed = (
        "may have FREQ, INTERVAL, BYDAY, BYMONTHDAY, BYSETPOS, WKST",
        "startTime and endTime",
        "1 to 31",
    )
    assert any(words in str(error.value) for words in allowed)


@pytest.mark.parametrize(
    "recurrence",
    [
        "FREQ=WEEKLY;BYSETPOS=2;BYDAY=MO",  # one day a week, and its second: none (5 s from 2025)
        "FREQ=DAILY;INTERVAL=7;BYDAY=MO",  # every 7th day from a Saturday is never a Monday
        "FREQ=MONTHLY;BYDAY=5MO;BYMONTHDAY=1",
    ],
)
def test_rules_that_never_start_are_refused_as_giving_no_time(recurrence):
    with pytest.raises(MaintenanceWindowError, match="leaves 0 h of maintenance in some 32-day period"):
        recurring_window("02:00", "08:00", recurrence)


def test_a_rule_that_starts_more_than_once_a_day_stops_expanding_after_a_year_of_days():
    rule = rrulestr("FREQ=HOURLY", dtstart=FIRST_DAY)
    with pytest.raises(MaintenanceWindowError, match="starts the window more than once a day"):
        maintenance_window._starts(rule, FIRST_DAY, FIRST_DAY, FIRST_DAY + _HORIZON, "FREQ=HOURLY")


set_rules = st.one_of(
    rules,
    st.builds(
        lambda days, pos, freq: f"FREQ={freq};BYSETPOS={pos};BYDAY={','.join(days)}",
        st.lists(st.sampled_from(DAYS), min_size=1, max_size=7, unique=True),
        st.sampled_from(["1", "2", "-1", "5", "1,-1"]),
        st.sampled_from(["WEEKLY", "MONTHLY"]),
    ),
    st.builds(
        lambda n, day: f"FREQ=MONTHLY;INTERVAL={n};BYDAY={day}",
        st.integers(1, 13),
        st.sampled_from(["1SA", "-1SU", "2MO", "5FR"]),
    ),
)


@settings(max_examples=40, deadline=None)
@given(start_hour=st.integers(0, 23), recurrence=set_rules)
def test_starts_read_four_hundred_year_cycles_later_are_the_rules_own(start_hour, recurrence):
    """The expansion runs 7,600 years on (the calendar repeats every 400) so that dateutil's
    search for a start after the year checked ends soon; the starts are the same."""
    start = FIRST_DAY + timedelta(hours=start_hour)
    rule = rrulestr(recurrence, dtstart=start)
    expected = rule.between(start, start + _HORIZON, inc=True)
    assert maintenance_window._starts(rule, start, start, start + _HORIZON, recurrence) == expected
