"""GKE's rules for a recurring maintenance window, checked before anything is declared.

Pure Python with no Pulumi import. GKE refuses a cluster whose window gives too little time for
upgrades; ``pulumi up`` would then fail half-way, after the network and service accounts exist.
The rules, from GKE's "Maintenance windows and exclusions" documentation
(https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions):

- the recurrence is an RFC 5545 RRULE (parsed here with python-dateutil, not by hand);
- a window must allow at least 48 hours of maintenance in every rolling 32 days;
- only contiguous availability of at least 4 hours counts towards those 48 hours.

It also holds the standing maintenance exclusion's choices (``UPGRADE_EXCLUSION_SCOPES``).

Times are UTC. A window whose end time is not after its start time ends on the next day
(``22:00``-``04:00``; ``02:00``-``02:00`` is 24 hours), as GKE reads it.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

from dateutil.rrule import rrule, rrulestr

MIN_AVAILABILITY = timedelta(hours=48)
ROLLING_PERIOD = timedelta(days=32)
MIN_CONTIGUOUS = timedelta(hours=4)

# A fixed first day, so the declared window never changes between runs; GKE takes the time of
# day and the length from it, and the recurrence from the RRULE. 2025-01-04 is a Saturday.
FIRST_DAY = datetime(2025, 1, 4, tzinfo=timezone.utc)
# A year of occurrences (plus one rolling period) shows every pattern an RRULE can repeat with
# (yearly rules repeat within a year too, leap days aside).
_HORIZON = timedelta(days=366) + ROLLING_PERIOD

UPGRADE_EXCLUSION_SCOPES = ("NO_MINOR_OR_NODE_UPGRADES", "NO_MINOR_UPGRADES", "NONE")
"""Scopes of the cluster's standing maintenance exclusion (GKE ``MaintenanceExclusionOptions``);
NONE declares no exclusion."""
RFC3339_UTC = re.compile(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\dZ$")
DEFAULT_UPGRADE_EXCLUSION_START = "2025-12-01T00:00:00Z"
"""A fixed start, so the exclusion never changes between runs (Cluster Toolkit's TPU flex-start
example uses this date)."""


def exclusion_start_problem(value: str) -> Optional[str]:
    """Why ``value`` cannot start a maintenance exclusion (an RFC 3339 UTC time), or None."""
    problem = f"{value!r} must be an RFC 3339 UTC time such as {DEFAULT_UPGRADE_EXCLUSION_START!r}"
    if not RFC3339_UTC.fullmatch(value):
        return problem
    try:
        datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return f"{problem}: there is no such day"
    return None


_TIME = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


class MaintenanceWindowError(ValueError):
    """A window GKE would refuse; the message says why and what is allowed."""


@dataclass(frozen=True)
class RecurringWindow:
    """A validated window: its first occurrence and the RRULE that repeats it."""

    start: datetime
    end: datetime
    recurrence: str

    @property
    def length(self) -> timedelta:
        return self.end - self.start

    def rfc3339(self) -> tuple[str, str]:
        """Start and end as the GKE API takes them, e.g. ``2025-01-04T22:00:00Z``."""
        return (self.start.strftime("%Y-%m-%dT%H:%M:%SZ"), self.end.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _time_of_day(key: str, value: str) -> timedelta:
    match = _TIME.fullmatch(value)
    if match is None:
        raise MaintenanceWindowError(f"{key} {value!r} must be HH:MM in UTC (00:00 to 23:59)")
    return timedelta(hours=int(match.group(1)), minutes=int(match.group(2)))


_FREQUENCIES = ("DAILY", "WEEKLY", "MONTHLY")
_EXAMPLES = "e.g. 'FREQ=WEEKLY;BYDAY=SA,SU' or 'FREQ=DAILY'"


def _rule(recurrence: str, start: datetime) -> tuple[rrule, str]:
    """The parsed rule and its text as GKE gets it (upper case, as RFC 5545 writes it)."""
    text = recurrence.strip().upper()
    if not text.startswith("FREQ=") or "\n" in text:
        raise MaintenanceWindowError(
            f"recurrence {recurrence!r} must be one RFC 5545 RRULE starting with FREQ=, {_EXAMPLES}"
        )
    parts = dict(part.partition("=")[::2] for part in text.split(";") if part)
    if parts.get("FREQ") not in _FREQUENCIES:
        raise MaintenanceWindowError(
            f"recurrence {recurrence!r}: FREQ must be {', '.join(_FREQUENCIES)} for a maintenance "
            f"window, {_EXAMPLES}"
        )
    if "COUNT" in parts or "UNTIL" in parts:
        # A window that stops recurring leaves no maintenance time at all once it has stopped.
        raise MaintenanceWindowError(
            f"recurrence {recurrence!r} ends (COUNT or UNTIL); a maintenance window recurs for as "
            f"long as the cluster lives"
        )
    if not re.fullmatch(r"[1-9][0-9]{0,3}", parts.get("INTERVAL", "1")):
        raise MaintenanceWindowError(
            f"recurrence {recurrence!r}: INTERVAL must be a whole number from 1 to 9999"
        )
    _check_parts(recurrence, parts)
    try:
        parsed = rrulestr(text, dtstart=start)
    except (ValueError, TypeError, OverflowError) as exc:
        raise MaintenanceWindowError(
            f"recurrence {recurrence!r} is not a valid RFC 5545 RRULE ({exc}); {_EXAMPLES}"
        ) from None
    assert isinstance(parsed, rrule)  # one rule, no RDATE/EXDATE: rrulestr gives an rrule
    return parsed, text


# The parts a window's RRULE may have. The window starts at startTime, once on each day the rule
# picks: GKE's RecurringTimeWindow says the rule gives "how frequently the window starts" and that
# "the FREQ values of HOURLY, MINUTELY, and SECONDLY are not supported" (container v1 API,
# RecurringTimeWindow.recurrence). BYHOUR, BYMINUTE and BYSECOND would start it many times a day,
# and expanding them costs up to 86,400 starts a day (a year of BYSECOND=0,...,59 with BYMINUTE and
# BYHOUR took minutes). BYMONTH, BYWEEKNO and BYYEARDAY leave out whole months, weeks or days of the
# year, where the 48 hours in every 32 days cannot hold; a rule they empty is scanned by
# python-dateutil to the year 9999 (10 s and more) before it says so.
_ALLOWED_PARTS = ("FREQ", "INTERVAL", "BYDAY", "BYMONTHDAY", "BYSETPOS", "WKST")
_SUB_DAILY_PARTS = ("BYHOUR", "BYMINUTE", "BYSECOND")
# A day is the finest a window recurs at; this many starts in the year it is checked over means
# the rule starts more often than that.
_MAX_STARTS = (_HORIZON // timedelta(days=1)) + 2
# BYSETPOS picks the n-th of the days a MONTHLY or WEEKLY period gives (31 at most); a DAILY
# period gives one day, where any other position empties the rule.
_SET_POSITION = re.compile(r"^[+-]?([1-9]|[12][0-9]|3[01])$")


def _check_parts(recurrence: str, parts: dict[str, str]) -> None:
    for key in parts:
        if key in _SUB_DAILY_PARTS:
            raise MaintenanceWindowError(
                f"recurrence {recurrence!r}: {key}={parts[key]} is not allowed; a maintenance window "
                f"starts at startTime once a day at most (GKE does not support windows that recur "
                f"more often than daily), so its time of day comes from startTime and endTime"
            )
        if key not in _ALLOWED_PARTS:
            raise MaintenanceWindowError(
                f"recurrence {recurrence!r}: {key}={parts[key]} is not allowed; a maintenance window's "
                f"RRULE may have {', '.join(_ALLOWED_PARTS)} ({_EXAMPLES}, or "
                f"'FREQ=MONTHLY;BYSETPOS=1;BYDAY=SA,SU' for the first weekend of each month)"
            )
    if "BYSETPOS" in parts:
        positions = parts["BYSETPOS"].split(",")
        if parts["FREQ"] == "DAILY" or not all(_SET_POSITION.match(p) for p in positions):
            raise MaintenanceWindowError(
                f"recurrence {recurrence!r}: BYSETPOS={parts['BYSETPOS']} is not allowed; BYSETPOS picks "
                f"among the days of a WEEKLY or MONTHLY period: positions 1 to 31 or -31 to -1"
            )


# The Gregorian calendar repeats itself every 400 years, weekdays included (146,097 days, a whole
# number of weeks). python-dateutil looks for a rule's next start period by period up to the year
# 9999, however long that takes: a rule that picks no day after the checked year (BYSETPOS=2 of a
# weekly rule with one BYDAY) took 5 s to say so from 2025. The same rule expanded 7,600 years later
# gives the same starts, and the search for one after them ends within 400 years: 20 times less.
_CALENDAR_CYCLES = timedelta(days=146_097 * 19)


def _starts(
    rule: rrule, start: datetime, after: datetime, before: datetime, recurrence: str
) -> list[datetime]:
    """The starts in [after, before] of ``rule`` (whose first start is ``start``), refusing a rule
    that starts more than once a day before it has expanded a year of them."""
    later = rule.replace(dtstart=start + _CALENDAR_CYCLES)
    starts = []
    for occurrence in later.xafter(after + _CALENDAR_CYCLES, inc=True):
        if occurrence > before + _CALENDAR_CYCLES:
            break
        starts.append(occurrence - _CALENDAR_CYCLES)
        if len(starts) > _MAX_STARTS:
            raise MaintenanceWindowError(
                f"recurrence {recurrence!r} starts the window more than once a day; a maintenance "
                f"window starts at startTime once a day at most"
            )
    return starts


def _merged(intervals: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    merged: list[tuple[datetime, datetime]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def least_availability(start: datetime, length: timedelta, rule: rrule, recurrence: str = "") -> timedelta:
    """The least maintenance time GKE counts in any rolling 32 days over a year (daily, weekly
    and monthly rules repeat within it), for ``rule`` whose first start is ``start``."""
    horizon = start + _HORIZON
    # Windows that began up to one length before `start` still reach into it.
    occurrences = _starts(rule, start, start - length, horizon, recurrence or str(rule))
    windows = [(s, e) for s, e in _merged([(o, o + length) for o in occurrences]) if e - s >= MIN_CONTIGUOUS]
    # Covered time in [t, t + 32 days) is piecewise linear in t: its minimum is where t is a
    # window's end, where t + 32 days is a window's start, or at either end of the year.
    candidates = sorted(
        {e for _, e in windows}
        | {s - ROLLING_PERIOD for s, _ in windows}
        | {start, horizon - ROLLING_PERIOD},
    )
    candidates = [t for t in candidates if start <= t <= horizon - ROLLING_PERIOD]
    starts = [s for s, _ in windows]

    def covered(t: datetime) -> timedelta:
        until = t + ROLLING_PERIOD
        first = max(bisect.bisect_right(starts, t) - 1, 0)
        last = bisect.bisect_left(starts, until)
        total = timedelta(0)
        for s, e in windows[first:last]:
            total += max(timedelta(0), min(e, until) - max(s, t))
        return total

    if not windows or not candidates:
        return timedelta(0)
    return min(covered(t) for t in candidates)


def recurring_window(start_time: str, end_time: str, recurrence: str) -> RecurringWindow:
    """Validate a window as GKE would, or raise ``MaintenanceWindowError``."""
    start_of_day = _time_of_day("startTime", start_time)
    end_of_day = _time_of_day("endTime", end_time)
    start = FIRST_DAY + start_of_day
    # Not after the start: the window ends on the next day, so an end equal to the start is a
    # whole day (GKE takes a 24-hour recurring window: its first start and end a day apart).
    end = FIRST_DAY + end_of_day + (timedelta(days=1) if end_of_day <= start_of_day else timedelta(0))
    rule, text = _rule(recurrence, start)
    try:
        available = least_availability(start, end - start, rule, recurrence)
    except (ValueError, OverflowError) as exc:  # dateutil checks some parts only when it expands
        raise MaintenanceWindowError(
            f"recurrence {recurrence!r} is not a valid RFC 5545 RRULE ({exc}); {_EXAMPLES}"
        ) from None
    if available < MIN_AVAILABILITY:
        hours = available.total_seconds() / 3600
        raise MaintenanceWindowError(
            f"{start_time}-{end_time} UTC recurring {recurrence!r} leaves {hours:g} h of "
            f"maintenance in some 32-day period; GKE requires at least 48 h in every 32 days, "
            f"counting only stretches of 4 h or more (e.g. 02:00-08:00 with "
            f"'FREQ=WEEKLY;BYDAY=SA,SU' gives 48 h or more)"
        )
    return RecurringWindow(start, end, text)
