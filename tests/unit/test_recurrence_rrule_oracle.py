"""RRULE rules against dateutil.rrule, the well-kept implementation of RFC 5545, near DST changes.

dateutil decides which local date-times a rule selects from its start (FREQ, INTERVAL,
BYxxx, BYSETPOS, COUNT, UNTIL, EXDATE); it knows nothing of our DST policy, so the oracle
iterates it in naive wall time and resolves each wall time by the documented policy (a
time in a spring-forward gap runs shifted by the gap and is one with an occurrence
already at that instant; a time in a fall-back overlap runs once at its first instant,
except for rules with a time in every hour of the day, which run at each real instant).
That resolution is the only difference allowed. 250 random cases per run; rules our
engine refuses (a documented refusal) are drawn again.

One oracle defect is kept out of the draws: dateutil miscounts the previous year's weeks
when it decides whether the first days of January belong to BYWEEKNO=52 or 53 (it uses
the current year's length), so those two week numbers are checked by unit cases against
ISO 8601 instead.

Each case also draws a DST choice (``dst``), resolved by the cron oracle's independent
:func:`~tests.unit.test_recurrence_cron_oracle.resolve` from zoneinfo's fold facts; every
choice is checked across New York's and Lord Howe's transitions too.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from functools import cache
from itertools import islice, takewhile
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rruleset, rrulestr
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.unit.test_recurrence_cron_oracle import CHOICES, DEFAULT, dst_choices, keep, resolve
from timekeeper.schedules.recurrence import InvalidRecurrence, parse_rule

UTC = timezone.utc
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Pacific/Chatham",
         "America/St_Johns", "Asia/Kolkata", "Europe/London"]
TAKE = 6


@cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    zone = ZoneInfo(zone_name)
    out, previous = [datetime(2025, 6, 1, tzinfo=UTC)], None
    t = datetime(2026, 1, 1, tzinfo=UTC)
    while t.year < 2030:
        offset = t.astimezone(zone).utcoffset()
        if previous is not None and offset != previous:
            out.append(t)
        previous = offset
        t += timedelta(hours=1)
    return tuple(out)


def listed(values, max_size=3):
    return st.lists(st.sampled_from(values), min_size=1, max_size=max_size, unique=True).map(
        lambda items: ",".join(str(v) for v in items))


@st.composite
def rules(draw):
    freq = draw(st.sampled_from(["YEARLY", "MONTHLY", "WEEKLY", "DAILY"]))
    parts = [f"FREQ={freq}"]
    if draw(st.booleans()):
        parts.append(f"INTERVAL={draw(st.integers(1, 3))}")
    days = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]
    if draw(st.booleans()):
        if freq in ("MONTHLY", "YEARLY") and draw(st.booleans()):
            parts.append("BYDAY=" + draw(listed([f"{n}{d}" for n in (1, 2, 3, -1, -2, 5) for d in days])))
        else:
            parts.append("BYDAY=" + draw(listed(days, 5)))
    if freq != "WEEKLY" and draw(st.booleans()):
        parts.append("BYMONTHDAY=" + draw(listed([1, 2, 13, 15, 28, 29, 30, 31, -1, -2, -7])))
    if draw(st.booleans()):
        parts.append("BYMONTH=" + draw(listed(list(range(1, 13)), 4)))
    if freq == "YEARLY" and draw(st.integers(0, 3)) == 0:
        parts.append("BYWEEKNO=" + draw(listed([1, 2, 10, 13, 26, 43, 44, 51, -1, -2, -52])))
    if freq in ("YEARLY", "DAILY") and draw(st.integers(0, 3)) == 0:
        parts.append("BYYEARDAY=" + draw(listed([1, 2, 59, 60, 88, 100, 200, 300, 365, 366, -1, -100, -300])))
    hours = draw(st.one_of(st.just(None), listed([0, 1, 2, 3, 9, 12, 18, 23]), st.just(",".join(map(str, range(24))))))
    minutes = draw(st.one_of(st.just(None), listed([0, 15, 30, 45, 59])))
    if hours:
        parts.append(f"BYHOUR={hours}")
    if minutes:
        parts.append(f"BYMINUTE={minutes}")
    if (hours is None or "," not in hours) and (minutes is None or "," not in minutes) and draw(st.booleans()):
        parts.append("BYSETPOS=" + draw(listed([1, 2, 3, -1, -2])))
    end = draw(st.integers(0, 3))
    if end == 1:
        parts.append(f"COUNT={draw(st.integers(1, 60))}")
    elif end == 2:
        parts.append(f"UNTIL={draw(st.dates(date(2026, 1, 1), date(2031, 12, 31))).strftime('%Y%m%d')}")
    return ";".join(draw(st.permutations(parts)))


def oracle(text: str, zone_name: str, start: date, exdates: list[date], after: datetime, take: int,
           dst: tuple[str, str] = DEFAULT):
    """The first ``take`` ``(instant, shifted, skipped)`` after ``after``: dateutil's naive
    local date-times resolved by our gap and overlap policy and the DST choice ``dst``."""
    zone = ZoneInfo(zone_name)
    dtstart = datetime(start.year, start.month, start.day)
    series = rruleset()
    rule = rrulestr(text, dtstart=dtstart)
    series.rrule(rule)
    for d in exdates:
        for h in range(24):
            for m in (0, 15, 30, 45, 59):
                series.exdate(datetime(d.year, d.month, d.day, h, m))
    every_hour = rule._byhour is not None and len(rule._byhour) == 24
    begin = (after - timedelta(days=2)).astimezone(zone).replace(tzinfo=None)
    horizon = datetime(2045, 1, 2)  # wall time: a day past the UTC end below, for zones east of UTC
    found: dict[datetime, tuple[bool, bool]] = {}
    for wall in takewhile(lambda w: w <= horizon, series.xafter(begin) if hasattr(series, "xafter")
                          else (w for w in series if w >= begin)):
        for instant in resolve(wall, zone, every_hour, dst):
            keep(found, *instant)
        if len([a for a in found if a > after]) >= take + 2:
            break
    # The same end as the engine's side of the comparison: instants before 2045-01-01 UTC.
    end = datetime(2045, 1, 1, tzinfo=UTC)
    return sorted((at, *flags) for at, flags in found.items() if after < at < end)[:take]


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(text=rules(), zone_name=st.sampled_from(ZONES), start=st.dates(date(2025, 1, 1), date(2028, 12, 31)),
       pick=st.integers(0, 10_000), shift_minutes=st.integers(-2 * 1440, 60),
       exdates=st.lists(st.dates(date(2026, 1, 1), date(2029, 12, 31)), max_size=3), dst=dst_choices)
def test_next_occurrences_match_dateutil_resolved_by_our_dst_policy(text, zone_name, start, pick, shift_minutes,
                                                                    exdates, dst):
    try:
        rule = parse_rule({"rrule": text, "timezone": zone_name, "start": start.isoformat(),
                           "exdate": [d.isoformat() for d in exdates], "dst": {"gap": dst[0], "overlap": dst[1]}})
    except InvalidRecurrence:
        assume(False)
    changes = transitions(zone_name)
    after = changes[pick % len(changes)] + timedelta(minutes=shift_minutes, seconds=pick % 60)
    ours = [(o.at, o.shifted, o.skipped) for o in islice(
        takewhile(lambda o: o.at < datetime(2045, 1, 1, tzinfo=UTC), rule.occurrences_after(after)), TAKE)]
    assume(ours or rule.next_after(datetime(2024, 1, 1, tzinfo=UTC)) is not None)
    assert ours == oracle(text, zone_name, start, exdates, after, TAKE, dst), (text, zone_name, start, exdates, after)


@pytest.mark.parametrize("dst", CHOICES, ids=["-".join(c) for c in CHOICES])
@pytest.mark.parametrize(("zone_name", "after", "text"), [
    ("America/New_York", datetime(2027, 3, 13, tzinfo=UTC), "FREQ=DAILY;BYHOUR=2,3;BYMINUTE=0,30"),
    ("America/New_York", datetime(2027, 11, 6, tzinfo=UTC), "FREQ=DAILY;BYHOUR=1;BYMINUTE=30"),
    ("America/New_York", datetime(2027, 3, 13, tzinfo=UTC), "FREQ=WEEKLY;BYDAY=SU;BYHOUR=2;BYMINUTE=30;COUNT=1"),
    ("America/New_York", datetime(2027, 11, 6, tzinfo=UTC), "FREQ=MONTHLY;BYDAY=1SU;BYHOUR=1;BYMINUTE=30;COUNT=11"),
    ("Australia/Lord_Howe", datetime(2027, 10, 1, tzinfo=UTC), "FREQ=DAILY;BYHOUR=2;BYMINUTE=0,15,45"),
    ("Australia/Lord_Howe", datetime(2027, 4, 2, tzinfo=UTC), "FREQ=DAILY;BYHOUR=1;BYMINUTE=45"),
    ("Australia/Lord_Howe", datetime(2027, 4, 2, tzinfo=UTC), "FREQ=MONTHLY;BYDAY=1SU;BYHOUR=1;BYMINUTE=45;COUNT=4"),
])
def test_each_dst_choice_across_new_york_and_lord_howe_matches_dateutil(dst, zone_name, after, text):
    """Every choice, including a series whose COUNT ends on the change day's repeated or
    skipped time (the series' end is the instant the choice gives that time)."""
    rule = parse_rule({"rrule": text, "timezone": zone_name, "start": "2027-01-03",
                       "dst": {"gap": dst[0], "overlap": dst[1]}})
    ours = [(o.at, o.shifted, o.skipped) for o in islice(rule.occurrences_after(after), 8)]
    assert ours == oracle(text, zone_name, date(2027, 1, 3), [], after, 8, dst)
