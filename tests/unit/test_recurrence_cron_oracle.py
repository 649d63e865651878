"""Cron rules against an independent, well-kept cron library (cronsim) near DST changes.

cronsim decides which local wall times a cron expression selects (fields, ranges, steps,
names, ``L`` and ``LW`` in day-of-month, ``d#n`` and ``dL`` in day-of-week, the
day-of-month/day-of-week "either" rule); 300 random cases per run. cronsim has no ``nW``
or ``L-n``: those are covered by the unit tests of the cron form. Its own DST handling differs
from ours, so the oracle iterates it in naive wall time and resolves each wall time with
our documented policy: a time in a spring-forward gap runs shifted by the gap (and is one
with an occurrence already at that instant), a time in a fall-back overlap runs once at
its first instant, except for rules that fire in every hour of the day, which run at each
real instant.

Each DST choice of a rule (``dst``: gap ``shift``/``end``/``skip``, overlap
``first``/``second``/``both``) is resolved by :func:`resolve` here, from zoneinfo's fold
facts alone and never by calling the engine: a gap's end is found by walking the wall
clock minute by minute to the first wall time that exists once; the engine bisects
instants. The random cases draw a choice too, and every choice is checked across New
York's one-hour and Lord Howe's 30-minute transitions for the cron, calendar and rrule
forms.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import cache
from itertools import takewhile
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timekeeper.schedules.recurrence import parse_rule

UTC = timezone.utc
ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "America/Havana",
         "Asia/Beirut", "Pacific/Chatham", "Europe/Chisinau", "America/St_Johns", "Asia/Kolkata"]
WINDOW = timedelta(days=2)
GAPS = ("shift", "end", "skip")
OVERLAPS = ("first", "second", "both")
CHOICES = [(gap, overlap) for gap in GAPS for overlap in OVERLAPS]
DEFAULT = ("shift", "first")
#: A DST choice as the random cases draw it: the default half of the time.
dst_choices = st.one_of(st.just(DEFAULT), st.sampled_from(CHOICES))


def resolve(wall: datetime, zone: ZoneInfo, every_hour: bool, dst: tuple[str, str] = DEFAULT
            ) -> list[tuple[datetime, bool, bool]]:
    """The ``(instant, shifted, skipped)`` a naive local ``wall`` time runs at by the
    documented policy and the DST choice ``dst`` = ``(gap, overlap)``."""
    gap, overlap = dst
    off0, off1 = zone.utcoffset(wall), zone.utcoffset(wall.replace(fold=1))
    naive_utc = wall.replace(tzinfo=UTC)
    if off0 == off1:
        return [(naive_utc - off0, False, False)]
    if off0 < off1:  # the clock skips this wall time
        if gap == "end":
            resumed = wall
            while zone.utcoffset(resumed) != zone.utcoffset(resumed.replace(fold=1)):
                resumed += timedelta(minutes=1)  # the first wall time after the gap
            return [(resumed.replace(tzinfo=UTC) - zone.utcoffset(resumed), True, False)]
        return [(naive_utc - off0, True, gap == "skip")]  # shifted by the gap's length
    if every_hour or overlap == "both":
        return [(naive_utc - off0, False, False), (naive_utc - off1, False, False)]
    return [(naive_utc - (off1 if overlap == "second" else off0), False, False)]


def keep(found: dict[datetime, tuple[bool, bool]], at: datetime, shifted: bool, skipped: bool) -> None:
    """One occurrence per instant: an unshifted one wins over a shifted (or skipped) one."""
    if at not in found or not shifted:
        found[at] = (shifted, skipped) if at not in found or found[at][0] else found[at]


@cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """The UTC instants (to the hour) where ``zone_name``'s offset changes in 2026-2028."""
    zone = ZoneInfo(zone_name)
    out, previous = [], None
    t = datetime(2026, 1, 1, tzinfo=UTC)
    while t.year < 2029:
        offset = t.astimezone(zone).utcoffset()
        if previous is not None and offset != previous:
            out.append(t)
        previous = offset
        t += timedelta(hours=1)
    return tuple(out) or (datetime(2027, 3, 14, tzinfo=UTC),)


def field(values: list[str]) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(values), min_size=1, max_size=3, unique=True).map(",".join)


cron_expressions = st.builds(
    lambda m, h, dom, mon, dow: f"{m} {h} {dom} {mon} {dow}",
    st.one_of(st.sampled_from(["*", "*/5", "*/15", "*/7", "0-59/10"]), field(["0", "1", "15", "30", "45", "59"])),
    st.one_of(st.sampled_from(["*", "*/2", "*/3", "0-23", "1-3", "22-23"]), field(["0", "1", "2", "3", "12", "23"]),
              st.just("*")),
    st.one_of(st.just("*"), st.just("L"), st.just("LW"),
              field(["1", "8", "13", "14", "15", "28", "29", "30", "31", "L", "LW"])),
    st.one_of(st.just("*"), field(["1", "3", "4", "9", "10", "11", "12", "MAR", "NOV"])),
    st.one_of(st.just("*"), st.just("1-5"), field(["0", "1", "5", "6", "7", "SUN", "SAT"]),
              field(["1#1", "1#3", "5#2", "0#5", "SUN#1", "MON#4", "7#2", "5L", "0L", "1L", "7L", "3", "6"]))).filter(
        lambda e: _selects_a_real_date(e))


def _selects_a_real_date(expression: str) -> bool:
    try:
        parse_rule({"cron": expression, "timezone": "UTC"})
        CronSim(expression, datetime(2026, 1, 1))
    except Exception:  # both refuse a day of month no selected month has
        return False
    return True


def oracle(expression: str, zone_name: str, after: datetime, until: datetime,
           dst: tuple[str, str] = DEFAULT) -> list[tuple[datetime, bool, bool]]:
    """``(instant, shifted, skipped)`` of the rule in ``(after, until]``: cronsim's naive
    wall times resolved by our gap and overlap policy and the DST choice ``dst``."""
    zone = ZoneInfo(zone_name)
    hours = CronSim(expression, datetime(2026, 1, 1)).hours
    every_hour = len(hours) == 24
    start = (after - timedelta(days=1)).astimezone(zone).replace(tzinfo=None)
    stop = (until + timedelta(days=1)).astimezone(zone).replace(tzinfo=None)
    found: dict[datetime, tuple[bool, bool]] = {}
    for wall in takewhile(lambda w: w <= stop, CronSim(expression, start - timedelta(seconds=1))):
        for instant in resolve(wall, zone, every_hour, dst):
            keep(found, *instant)
    return sorted((at, *flags) for at, flags in found.items() if after < at <= until)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(expression=cron_expressions, zone_name=st.sampled_from(ZONES), pick=st.integers(0, 10_000),
       shift_minutes=st.integers(-2 * 1440 + 60, -60), dst=dst_choices)
def test_next_occurrences_match_cronsim_resolved_by_our_dst_policy(expression, zone_name, pick, shift_minutes, dst):
    changes = transitions(zone_name)
    after = changes[pick % len(changes)] + timedelta(minutes=shift_minutes, seconds=pick % 60)
    until = after + WINDOW
    rule = parse_rule({"cron": expression, "timezone": zone_name, "dst": {"gap": dst[0], "overlap": dst[1]}})
    ours = [(o.at, o.shifted, o.skipped) for o in takewhile(lambda o: o.at <= until, rule.occurrences_after(after))]
    assert ours == oracle(expression, zone_name, after, until, dst)
    # The backlog count and the backwards search agree with the walk (their own code paths).
    if ours:
        assert rule.count_between(ours[0][0], until) == (len(ours), True)
        assert rule.latest_at_or_before(until, after).at == ours[-1][0]


#: Fixed times that meet New York's (2027-03-14 02:00 -> 03:00, 2027-11-07 02:00 -> 01:00) and
#: Lord Howe's (2027-10-03 02:00 -> 02:30, 2027-04-04 02:00 -> 01:30) gaps and overlaps, with
#: times outside them and a time the gap's end lands on.
TRANSITION_CASES = [
    ("America/New_York", datetime(2027, 3, 13, tzinfo=UTC), "30 2 * * *"),
    ("America/New_York", datetime(2027, 3, 13, tzinfo=UTC), "0,30 2,3 * * *"),
    ("America/New_York", datetime(2027, 11, 6, tzinfo=UTC), "30 1 * * *"),
    ("America/New_York", datetime(2027, 11, 6, tzinfo=UTC), "0,45 0,1,2 * * *"),
    ("Australia/Lord_Howe", datetime(2027, 10, 1, tzinfo=UTC), "15 2 * * *"),
    ("Australia/Lord_Howe", datetime(2027, 10, 1, tzinfo=UTC), "0,15,30,45 2 * * *"),
    ("Australia/Lord_Howe", datetime(2027, 4, 2, tzinfo=UTC), "45 1 * * *"),
    ("Australia/Lord_Howe", datetime(2027, 4, 2, tzinfo=UTC), "40 1,2 * * *"),
]


@pytest.mark.parametrize("dst", CHOICES, ids=["-".join(c) for c in CHOICES])
@pytest.mark.parametrize(("zone_name", "after", "expression"), TRANSITION_CASES)
def test_each_dst_choice_across_new_york_and_lord_howe_matches_the_oracle(dst, zone_name, after, expression):
    until = after + timedelta(days=4)
    choice = {"gap": dst[0], "overlap": dst[1]}
    expected = oracle(expression, zone_name, after, until, dst)
    cron = parse_rule({"cron": expression, "timezone": zone_name, "dst": choice})
    minute, hour = expression.split()[:2]
    times = sorted(f"{int(h):02d}:{int(m):02d}" for h in hour.split(",") for m in minute.split(","))
    calendar = parse_rule({"calendar": {"frequency": "daily", "times": times}, "timezone": zone_name, "dst": choice})
    for rule in (cron, calendar):
        ours = [(o.at, o.shifted, o.skipped) for o in takewhile(lambda o: o.at <= until, rule.occurrences_after(after))]
        assert ours == expected, rule
        assert rule.count_between(after, until) == (len(expected), True)


@pytest.mark.parametrize("dst", CHOICES[1:], ids=["-".join(c) for c in CHOICES[1:]])
def test_the_transition_cases_show_each_choice(dst):
    """Each non-default choice runs differently from the default in some case above."""
    days = timedelta(days=4)
    assert any(oracle(expression, zone, after, after + days, dst) != oracle(expression, zone, after, after + days)
               for zone, after, expression in TRANSITION_CASES)
