"""Backlog arithmetic of recurrence rules: the latest occurrence at or before an instant,
the count of occurrences in a range, the ten-year firing horizon and the interval bound.

The oracle is the forward iterator (``occurrences_after``), whose DST policy is covered by
test_recurrence.py: searching backwards and counting whole days must give exactly what
walking the occurrences one by one gives, around every kind of UTC offset change.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from itertools import takewhile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timekeeper.schedules.dues import compute_due
from timekeeper.schedules.recurrence import (
    COUNT_HORIZON,
    MAX_CALENDAR_INTERVAL,
    InvalidRecurrence,
    parse_rule,
    parse_rule_text,
)

UTC = timezone.utc
_US = timedelta(microseconds=1)

# Zones with every kind of change: 1-hour gaps and overlaps (New York, London), a
# 30-minute change (Lord Howe), changes at midnight (Santiago, Havana, Asuncion, Cairo,
# Beirut), a 45-minute offset (Chatham), a skipped calendar day (Apia, 2011) and none.
ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "America/Havana",
         "America/Asuncion", "Africa/Cairo", "Asia/Beirut", "Pacific/Chatham", "Pacific/Apia", "Asia/Kolkata"]


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def walked(rule, first: datetime, last: datetime) -> list:
    """The occurrences in ``[first, last]`` one by one (the oracle)."""
    return list(takewhile(lambda o: o.at <= last, rule.occurrences_after(first - _US)))


cron_rules = st.builds(
    lambda m, h, dom, mon, dow, zone: {"cron": f"{m} {h} {dom} {mon} {dow}", "timezone": zone},
    st.sampled_from(["*", "*/15", "0", "30", "0,30", "*/7", "59"]),
    st.sampled_from(["*", "0", "1", "2", "23", "1-3", "*/2", "0-4"]),
    st.sampled_from(["*", "1", "L", "15", "31"]),
    st.sampled_from(["*", "3", "3,10,11", "*/2"]),
    st.sampled_from(["*", "0", "1-5", "6"]),
    st.sampled_from(ZONES))
daily_weekly_rules = st.builds(
    lambda freq, interval, times, zone: {"calendar": {"frequency": freq, "interval": interval, "times": times},
                                         "timezone": zone},
    st.sampled_from(["daily", "weekly"]), st.sampled_from([1, 2, 3]),
    st.lists(st.sampled_from(["00:00", "00:15", "01:30", "02:00", "02:30", "03:00", "12:00", "23:30", "23:59"]),
             min_size=1, max_size=4, unique=True),
    st.sampled_from(ZONES))
instants = st.integers(0, 3 * 366 * 1440).map(lambda m: utc(2026, 1, 1) + timedelta(minutes=m))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=st.one_of(cron_rules, daily_weekly_rules), first=instants, span=st.integers(0, 40 * 1440))
def test_latest_and_count_agree_with_walking_every_occurrence(rule, first, span):
    compiled = parse_rule(rule)
    last = first + timedelta(minutes=span)
    occurrences = walked(compiled, first, last)
    assert compiled.count_between(first, last) == (len(occurrences), True)
    assert compiled.latest_at_or_before(last, first) == (occurrences[-1] if occurrences else None)


@settings(max_examples=150, deadline=None)
@given(freq=st.sampled_from(["monthly", "yearly"]), interval=st.sampled_from([1, 2, 5]),
       day=st.sampled_from([("month_day", 1), ("month_day", 31), ("month_day", "last"),
                            ("nth_weekday", [5, "SU"]), ("nth_weekday", [-1, "MO"]), ("nth_weekday", [2, "SU"])]),
       month=st.sampled_from([2, 3, 10, 11]), zone=st.sampled_from(ZONES), first=instants,
       span=st.integers(0, 6 * 366 * 1440))
def test_monthly_and_yearly_latest_and_count_agree_with_walking(freq, interval, day, month, zone, first, span):
    calendar = {"frequency": freq, "interval": interval, "times": ["02:30", "23:59"], "start_date": "2020-01-31",
                day[0]: day[1], **({"month": month} if freq == "yearly" else {})}
    try:
        compiled = parse_rule({"calendar": calendar, "timezone": zone})
    except InvalidRecurrence:
        return  # a 5th Sunday that no selected month has
    last = first + timedelta(minutes=span)
    occurrences = walked(compiled, first, last)
    assert compiled.count_between(first, last) == (len(occurrences), True)
    assert compiled.latest_at_or_before(last, first) == (occurrences[-1] if occurrences else None)


@settings(deadline=None)
@given(minutes=st.integers(1, 600), anchor=instants, first=instants, span=st.integers(0, 20 * 1440))
def test_interval_latest_and_count_are_arithmetic_and_exact(minutes, anchor, first, span):
    compiled = parse_rule({"interval": {"minutes": minutes}, "anchor": anchor.isoformat()})
    last = first + timedelta(minutes=span)
    occurrences = walked(compiled, first, last)
    assert compiled.count_between(first, last) == (len(occurrences), True)
    assert compiled.latest_at_or_before(last, first) == (occurrences[-1] if occurrences else None)


def test_latest_prefers_the_unshifted_occurrence_where_a_gap_shift_lands_on_it():
    # 02:30 and 03:30 New York on the spring-forward day: 02:30 shifts onto 03:30 (one run).
    compiled = parse_rule({"cron": "30 2,3 * * *", "timezone": "America/New_York"})
    latest = compiled.latest_at_or_before(utc(2027, 3, 14, 8))
    assert latest.at == utc(2027, 3, 14, 7, 30) and not latest.shifted
    assert compiled.count_between(utc(2027, 3, 13), utc(2027, 3, 15)) == (3, True)  # 02:30, 03:30, then 03:30


def test_a_year_of_every_minute_in_a_dst_zone_counts_every_real_minute():
    # Every-minute rules fire at every real minute: gap minutes coincide with shifted ones
    # and the repeated hour runs twice, so the count is the number of UTC minutes.
    for zone in ("America/New_York", "Australia/Lord_Howe", "America/Santiago"):
        compiled = parse_rule({"cron": "* * * * *", "timezone": zone})
        first, last = utc(2026, 1, 1, 0, 1), utc(2027, 1, 1)
        assert compiled.count_between(first, last) == (525_600, True)
        assert compiled.latest_at_or_before(last + timedelta(seconds=59), first).at == last


def test_a_backlog_longer_than_the_count_horizon_is_a_lower_bound():
    compiled = parse_rule({"calendar": {"frequency": "daily", "times": ["09:00"]}, "timezone": "Europe/London"})
    count, exact = compiled.count_between(utc(2000, 1, 1), utc(2027, 1, 1))
    assert not exact
    assert COUNT_HORIZON.days <= count < (date(2027, 1, 1) - date(2000, 1, 1)).days


def test_compute_due_collapses_a_year_of_minutes_to_the_latest_and_an_exact_count():
    rule = parse_rule({"cron": "* * * * *", "timezone": "Pacific/Chatham"})
    due = compute_due(rule, utc(2026, 1, 1, 0, 1), utc(2027, 1, 1, 0, 0, 30))
    assert due.latest.at == utc(2027, 1, 1)
    assert due.skipped == 525_599 and due.first_skipped_at == utc(2026, 1, 1, 0, 1)
    assert due.next_occurrence.at == utc(2027, 1, 1, 0, 1) and not due.skipped_is_lower_bound


def test_compute_due_marks_a_count_beyond_the_horizon_as_a_lower_bound():
    rule = parse_rule({"cron": "0 * * * *", "timezone": "America/New_York"})
    due = compute_due(rule, utc(2001, 1, 1), utc(2027, 1, 1, 0, 30))
    assert due.latest.at == utc(2027, 1, 1) and due.skipped_is_lower_bound
    assert due.skipped >= COUNT_HORIZON.days * 24 - 1


# -------------------------------------------------------------- the ten-year firing horizon


@pytest.mark.parametrize(("calendar", "field"), [
    ({"frequency": "yearly", "interval": 10_000, "month": 1, "month_day": 1}, "calendar.interval"),
    ({"frequency": "daily", "interval": 20_000}, "calendar.interval"),
    ({"frequency": "daily", "start_date": "9999-12-31"}, "calendar.start_date"),
    ({"frequency": "monthly", "start_date": "2040-01-01", "month_day": 1}, "calendar.start_date"),
    ({"frequency": "yearly", "interval": 12, "start_date": "2014-01-01", "month": 1, "month_day": 1},
     "calendar.interval"),
])
def test_a_rule_without_an_occurrence_in_ten_years_is_refused_naming_the_field(calendar, field):
    compiled = parse_rule({"calendar": {"times": ["09:00"], **calendar}, "timezone": "UTC"})
    with pytest.raises(InvalidRecurrence) as caught:
        compiled.check_fires(utc(2026, 12, 1))
    assert caught.value.field == field and "10 years" in caught.value.reason


def test_a_rule_that_fires_within_ten_years_passes_the_horizon_check():
    compiled = parse_rule({"calendar": {"frequency": "yearly", "interval": 9, "start_date": "2030-06-01",
                                        "month": 6, "month_day": 1, "times": ["09:00"]}, "timezone": "UTC"})
    assert compiled.check_fires(utc(2026, 12, 1)).at == utc(2030, 6, 1, 9)
    assert parse_rule({"cron": "0 0 29 2 *", "timezone": "UTC"}).check_fires(utc(2026, 12, 1)).at == utc(2028, 2, 29)


@pytest.mark.parametrize("frequency", ["daily", "weekly", "monthly", "yearly"])
def test_a_huge_calendar_interval_is_refused_naming_the_field(frequency):
    extra = {"monthly": {"month_day": 1}, "yearly": {"month": 1, "month_day": 1}}.get(frequency, {})
    rule = {"calendar": {"frequency": frequency, "interval": 1_000_000_000, "times": ["09:00"], **extra},
            "timezone": "UTC"}
    with pytest.raises(InvalidRecurrence) as caught:
        parse_rule(rule)
    assert caught.value.field == "calendar.interval"
    assert str(MAX_CALENDAR_INTERVAL) in caught.value.reason


def test_the_largest_calendar_interval_compiles_and_iterates():
    for frequency, extra in (("daily", {}), ("weekly", {}), ("monthly", {"month_day": 1}),
                             ("yearly", {"month": 1, "month_day": 1})):
        compiled = parse_rule({"calendar": {"frequency": frequency, "interval": MAX_CALENDAR_INTERVAL,
                                            "times": ["09:00"], **extra}, "timezone": "UTC"})
        following = compiled.next_after(utc(2026, 12, 1))
        assert following is None or following.at.year > 2200
        assert compiled.latest_at_or_before(utc(2026, 12, 1)).at == utc(2000, 1, 1, 9)


def test_a_stored_rule_text_is_compiled_once_and_bad_text_names_the_rule():
    text = '{"cron": "0 9 * * *", "timezone": "UTC"}'
    assert parse_rule_text(text) is parse_rule_text(text)
    with pytest.raises(InvalidRecurrence) as caught:
        parse_rule_text("{not json")
    assert caught.value.field == "rule"
