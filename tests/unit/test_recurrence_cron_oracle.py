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
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import cache
from itertools import takewhile
from zoneinfo import ZoneInfo

from cronsim import CronSim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timekeeper.schedules.recurrence import parse_rule

UTC = timezone.utc
ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "America/Havana",
         "Asia/Beirut", "Pacific/Chatham", "Europe/Chisinau", "America/St_Johns", "Asia/Kolkata"]
WINDOW = timedelta(days=2)


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


def oracle(expression: str, zone_name: str, after: datetime, until: datetime) -> list[tuple[datetime, bool]]:
    """``(instant, shifted)`` of the rule in ``(after, until]``: cronsim's naive wall times
    resolved by our gap and overlap policy."""
    zone = ZoneInfo(zone_name)
    hours = CronSim(expression, datetime(2026, 1, 1)).hours
    every_hour = len(hours) == 24
    start = (after - timedelta(days=1)).astimezone(zone).replace(tzinfo=None)
    stop = (until + timedelta(days=1)).astimezone(zone).replace(tzinfo=None)
    found: dict[datetime, bool] = {}
    for wall in takewhile(lambda w: w <= stop, CronSim(expression, start - timedelta(seconds=1))):
        off0, off1 = zone.utcoffset(wall), zone.utcoffset(wall.replace(fold=1))
        naive_utc = wall.replace(tzinfo=UTC)
        instants = [(naive_utc - off0, off0 < off1)]  # a gap shifts by its length (fold 0's offset)
        if off0 > off1 and every_hour:
            instants.append((naive_utc - off1, False))  # the repeated hour's second instant
        for at, shifted in instants:
            found[at] = found.get(at, True) and shifted  # one per instant, unshifted preferred
    return sorted((at, shifted) for at, shifted in found.items() if after < at <= until)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(expression=cron_expressions, zone_name=st.sampled_from(ZONES), pick=st.integers(0, 10_000),
       shift_minutes=st.integers(-2 * 1440 + 60, -60))
def test_next_occurrences_match_cronsim_resolved_by_our_dst_policy(expression, zone_name, pick, shift_minutes):
    changes = transitions(zone_name)
    after = changes[pick % len(changes)] + timedelta(minutes=shift_minutes, seconds=pick % 60)
    until = after + WINDOW
    rule = parse_rule({"cron": expression, "timezone": zone_name})
    ours = [(o.at, o.shifted) for o in takewhile(lambda o: o.at <= until, rule.occurrences_after(after))]
    assert ours == oracle(expression, zone_name, after, until)
