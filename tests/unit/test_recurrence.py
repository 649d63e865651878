"""Recurrence rules: the time policy (gap shift keeping the local date, one run in an overlap).

Covers the DST policy (gap shift, fall-back overlap, wall-time frequent rules), the
calendar and cron forms, absolute intervals, validation errors, and property tests over
many IANA zones against an independent oracle (a minute-by-minute scan of real instants).
"""

from __future__ import annotations

import calendar as pycalendar
import timeit
from collections import Counter
from datetime import date, datetime, time, timedelta, timezone
from functools import cache
from itertools import islice
from zoneinfo import ZoneInfo

import pytest
from dateutil import rrule as du
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from timekeeper.schedules.recurrence import (
    InvalidRecurrence,
    Occurrence,
    Recurrence,
    next_occurrences,
    parse_rule,
)
from timekeeper.schedules.zones import canonical_zones

UTC = timezone.utc
NY = "America/New_York"


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def cal(tz: str = NY, **calendar) -> dict:
    calendar.setdefault("frequency", "daily")
    return {"calendar": calendar, "timezone": tz}


def occurrences_on(rule: dict, local_day: date, tz: str) -> list[Occurrence]:
    """All occurrences whose intended local date is ``local_day``."""
    after = datetime.combine(local_day - timedelta(days=2), time(), ZoneInfo(tz))
    out = []
    for occ in parse_rule(rule).occurrences_after(after):
        if occ.local_date > local_day + timedelta(days=1):
            break
        if occ.local_date == local_day:
            out.append(occ)
    return out


def assert_well_formed(occs: list[Occurrence], after: datetime) -> None:
    ats = [o.at for o in occs]
    assert all(a.tzinfo is UTC for a in ats)
    assert all(a > after for a in ats)
    assert all(x < y for x, y in zip(ats, ats[1:], strict=False)), "not strictly increasing"
    assert len(set(ats)) == len(ats)


# ------------------------------------------------------------------ spring-forward gap


def test_gap_time_shifts_forward_by_the_gap_and_keeps_its_local_date():
    rule = cal(times=["02:30"])
    occ = next_occurrences(rule, utc(2027, 3, 14, 0, 0), 1)[0]
    assert occ.at == utc(2027, 3, 14, 7, 30)
    assert occ.at.astimezone(ZoneInfo(NY)).time() == time(3, 30)
    assert occ.local_date == date(2027, 3, 14)
    assert occ.local_time == time(2, 30)
    assert occ.shifted is True
    # The days around it are ordinary.
    before, _, after = next_occurrences(rule, utc(2027, 3, 13, 0, 0), 3)
    assert (before.at, before.shifted) == (utc(2027, 3, 13, 7, 30), False)
    assert (after.at, after.shifted) == (utc(2027, 3, 15, 6, 30), False)


def test_cron_gap_time_shifts_too_and_exact_after_excludes_it():
    rule = {"cron": "30 2 * * *", "timezone": NY}
    occ = next_occurrences(rule, utc(2027, 3, 14, 0, 0), 1)[0]
    assert (occ.at, occ.local_time, occ.shifted) == (utc(2027, 3, 14, 7, 30), time(2, 30), True)
    nxt = parse_rule(rule).next_after(occ.at)
    assert nxt.at == utc(2027, 3, 15, 6, 30)  # strictly after


def test_shift_landing_on_another_occurrence_is_one_run():
    # Hourly: 02:00 would shift to 03:00, which is itself an occurrence -> one, unshifted.
    occs = occurrences_on({"cron": "0 * * * *", "timezone": NY}, date(2027, 3, 14), NY)
    at_three = [o for o in occs if o.at == utc(2027, 3, 14, 7, 0)]
    assert len(at_three) == 1 and at_three[0].local_time == time(3, 0) and not at_three[0].shifted
    assert not any(o.shifted for o in occs)
    # Calendar times 02:30 and 03:30: one run at 03:30.
    occs = occurrences_on(cal(times=["03:30", "02:30"]), date(2027, 3, 14), NY)
    assert [(o.at, o.local_time, o.shifted) for o in occs] == [(utc(2027, 3, 14, 7, 30), time(3, 30), False)]


def test_lord_howe_thirty_minute_gap():
    tz = "Australia/Lord_Howe"  # 2027-10-03 02:00 -> 02:30 local
    occs = occurrences_on(cal(tz, times=["02:15"]), date(2027, 10, 3), tz)
    assert len(occs) == 1
    occ = occs[0]
    assert occ.shifted and occ.local_time == time(2, 15)
    local = occ.at.astimezone(ZoneInfo(tz))
    assert (local.date(), local.time()) == (date(2027, 10, 3), time(2, 45))
    assert occ.at == utc(2027, 10, 2, 15, 45)


def test_europe_london_gap_and_overlap():
    tz = "Europe/London"
    spring = occurrences_on(cal(tz, times=["01:30"]), date(2027, 3, 28), tz)
    assert [(o.at, o.shifted) for o in spring] == [(utc(2027, 3, 28, 1, 30), True)]  # 02:30 BST
    autumn = occurrences_on(cal(tz, times=["01:30"]), date(2027, 10, 31), tz)
    assert [(o.at, o.shifted) for o in autumn] == [(utc(2027, 10, 31, 0, 30), False)]  # first, BST


def test_skipped_local_day_samoa_2011():
    # Pacific/Apia jumped from 2011-12-29 23:59:59 (-10) to 2011-12-31 00:00 (+14): the
    # whole of Friday 2011-12-30 was skipped (a 24-hour gap).
    tz = "Pacific/Apia"
    daily = next_occurrences(cal(tz, times=["09:00"]), utc(2011, 12, 28), 4)
    # The skipped day's 09:00 shifts onto the real 2011-12-31 09:00: one run, unshifted.
    assert [(o.at, o.local_date, o.shifted) for o in daily] == [
        (utc(2011, 12, 28, 19), date(2011, 12, 28), False),
        (utc(2011, 12, 29, 19), date(2011, 12, 29), False),
        (utc(2011, 12, 30, 19), date(2011, 12, 31), False),
        (utc(2011, 12, 31, 19), date(2012, 1, 1), False)]
    # Fridays only: the skipped Friday still runs once, a day late in wall time.
    fridays = next_occurrences(cal(tz, frequency="weekly", weekdays=["FR"], times=["09:00", "20:00"]),
                               utc(2011, 12, 20), 4)
    assert [(o.at, o.local_date, o.local_time, o.shifted) for o in fridays] == [
        (utc(2011, 12, 23, 19), date(2011, 12, 23), time(9), False),
        (utc(2011, 12, 24, 6), date(2011, 12, 23), time(20), False),
        (utc(2011, 12, 30, 19), date(2011, 12, 30), time(9), True),
        (utc(2011, 12, 31, 6), date(2011, 12, 30), time(20), True)]
    assert_well_formed(fridays, utc(2011, 12, 20))
    # Daily with a time the next day also has: interleaved days stay strictly increasing.
    both = next_occurrences(cal(tz, times=["09:00", "20:00"]), utc(2011, 12, 29, 12), 6)
    assert_well_formed(both, utc(2011, 12, 29, 12))
    assert [(o.local_date.day, o.local_time.hour, o.shifted) for o in both] == [
        (29, 9, False), (29, 20, False), (31, 9, False), (31, 20, False), (1, 9, False), (1, 20, False)]


def test_asia_kolkata_has_no_dst():
    occs = next_occurrences(cal("Asia/Kolkata", times=["09:00"]), utc(2027, 1, 1), 365)
    assert len(occs) == 365
    assert all(o.at.time() == time(3, 30) and not o.shifted for o in occs)
    assert [o.local_date for o in occs] == [date(2027, 1, 1) + timedelta(days=i) for i in range(365)]


# ------------------------------------------------------------------- fall-back overlap


def test_fixed_time_in_repeated_hour_runs_once_at_first_instant():
    rule = cal(times=["01:30"])
    occs = occurrences_on(rule, date(2027, 11, 7), NY)
    assert [(o.at, o.shifted) for o in occs] == [(utc(2027, 11, 7, 5, 30), False)]
    nxt = parse_rule(rule).next_after(utc(2027, 11, 7, 5, 30))
    assert nxt.at == utc(2027, 11, 8, 6, 30)


@pytest.mark.parametrize("rule", [
    {"cron": "0 * * * *", "timezone": NY},
    {"cron": "0 */1 * * *", "timezone": NY},
    cal(times=[f"{h:02d}:00" for h in range(24)]),
], ids=["cron-star", "cron-step-1", "calendar-24-times"])
def test_hourly_wall_time_rule_runs_25_and_23_times(rule):
    long_day = occurrences_on(rule, date(2027, 11, 7), NY)
    short_day = occurrences_on(rule, date(2027, 3, 14), NY)
    assert len(long_day) == 25
    assert len(short_day) == 23
    for occs in (long_day, short_day):
        ats = [o.at for o in occs]
        assert len(set(ats)) == len(ats)
        assert ats == sorted(ats)
    # The repeated 01:00 runs at both real instants.
    assert [o.at for o in long_day if o.local_time == time(1, 0)] == [utc(2027, 11, 7, 5), utc(2027, 11, 7, 6)]
    whole = next_occurrences(rule, utc(2027, 11, 6), 100)
    assert_well_formed(whole, utc(2027, 11, 6))


def test_non_frequent_rule_with_several_times_in_repeated_hour():
    occs = occurrences_on(cal(times=["01:00", "01:30", "02:00"]), date(2027, 11, 7), NY)
    assert [o.at for o in occs] == [utc(2027, 11, 7, 5), utc(2027, 11, 7, 5, 30), utc(2027, 11, 7, 7)]


def test_every_15_minutes_cron_counts():
    rule = {"cron": "*/15 * * * *", "timezone": NY}
    assert len(occurrences_on(rule, date(2027, 11, 7), NY)) == 25 * 4
    assert len(occurrences_on(rule, date(2027, 3, 14), NY)) == 23 * 4
    assert parse_rule(rule).nominal_period == timedelta(minutes=15)


# ---------------------------------------------------------------- month-end handling


def test_monthly_last_day():
    occs = next_occurrences(cal("Europe/Paris", frequency="monthly", month_day="last", times=["09:00"]),
                            utc(2027, 1, 1), 14)
    dates = [o.local_date for o in occs]
    assert date(2027, 2, 28) in dates and date(2028, 2, 29) in dates
    assert all((d + timedelta(days=1)).day == 1 for d in dates)


def test_monthly_day_31_clamps_and_returns():
    occs = next_occurrences(cal(frequency="monthly", month_day=31, times=["09:00"]), utc(2027, 1, 1), 4)
    assert [o.local_date for o in occs] == [date(2027, 1, 31), date(2027, 2, 28), date(2027, 3, 31), date(2027, 4, 30)]


def test_cron_day_31_skips_short_months_and_warns():
    rule = {"cron": "0 9 31 * *", "timezone": NY}
    r = parse_rule(rule)
    occs = next_occurrences(rule, utc(2027, 1, 1), 3)
    assert [o.local_date for o in occs] == [date(2027, 1, 31), date(2027, 3, 31), date(2027, 5, 31)]
    assert len(r.warnings) == 1 and "skip" in r.warnings[0] and "last" in r.warnings[0]
    assert parse_rule({"cron": "0 9 1,15 * *", "timezone": NY}).warnings == ()
    assert parse_rule({"cron": "0 9 31 1,3 *", "timezone": NY}).warnings == ()  # both months have it


def test_cron_L_gives_last_days():
    occs = next_occurrences({"cron": "0 9 L * *", "timezone": NY}, utc(2027, 1, 1), 14)
    dates = [o.local_date for o in occs]
    assert dates[:3] == [date(2027, 1, 31), date(2027, 2, 28), date(2027, 3, 31)]
    assert date(2028, 2, 29) in dates
    assert parse_rule({"cron": "0 9 L * *", "timezone": NY}).warnings == ()


def test_cron_dom_and_dow_either_matches():
    # POSIX: both restricted -> a day matches if either does (the 13th OR a Friday).
    occs = next_occurrences({"cron": "0 9 13 * FRI", "timezone": NY}, utc(2027, 1, 1), 10)
    assert all(o.local_date.day == 13 or o.local_date.weekday() == 4 for o in occs)
    assert date(2027, 1, 13) in [o.local_date for o in occs]  # a Wednesday
    assert date(2027, 1, 1) in [o.local_date for o in occs]  # a Friday
    # Unrestricted dom -> the weekday alone decides; names, ranges and 7 = Sunday.
    occs = next_occurrences({"cron": "0 9 * * mon-fri", "timezone": NY}, utc(2027, 1, 1), 20)
    assert all(o.local_date.weekday() < 5 for o in occs)
    sundays = next_occurrences({"cron": "0 9 * jan 7", "timezone": NY}, utc(2027, 1, 1), 5)
    assert [o.local_date.day for o in sundays] == [3, 10, 17, 24, 31]


def test_cron_feb_29_runs_in_leap_years_only():
    occs = next_occurrences({"cron": "0 0 29 2 *", "timezone": "UTC"}, utc(2027, 1, 1), 3)
    assert [o.local_date for o in occs] == [date(2028, 2, 29), date(2032, 2, 29), date(2036, 2, 29)]


# ------------------------------------------------------------------ calendar forms


def test_weekly_mo_we_fr_every_second_week():
    rule = cal(frequency="weekly", interval=2, weekdays=["FR", "MO", "WE"], start_date="2027-01-06",
               times=["08:00"])
    occs = next_occurrences(rule, utc(2027, 1, 1), 7)
    # Start week is Mon 2027-01-04 (counted, but no occurrence before start_date); the next is 01-18.
    assert [o.local_date for o in occs] == [
        date(2027, 1, 6), date(2027, 1, 8), date(2027, 1, 18), date(2027, 1, 20), date(2027, 1, 22),
        date(2027, 2, 1), date(2027, 2, 3)]


def test_weekly_default_weekday_is_start_dates():
    rule = cal(frequency="weekly", start_date="2027-01-07", times=["08:00"])  # a Thursday
    occs = next_occurrences(rule, utc(2027, 1, 1), 3)
    assert [o.local_date for o in occs] == [date(2027, 1, 7), date(2027, 1, 14), date(2027, 1, 21)]


def test_daily_interval_counts_from_start_date():
    rule = cal(interval=3, start_date="2027-01-02", times=["08:00"])
    occs = next_occurrences(rule, utc(2027, 1, 5, 20), 3)
    assert [o.local_date for o in occs] == [date(2027, 1, 8), date(2027, 1, 11), date(2027, 1, 14)]


def test_nth_weekday():
    last_friday = next_occurrences(cal(frequency="monthly", nth_weekday=[-1, "FR"], times=["17:00"]),
                                   utc(2027, 1, 1), 3)
    assert [o.local_date for o in last_friday] == [date(2027, 1, 29), date(2027, 2, 26), date(2027, 3, 26)]
    second_tuesday = next_occurrences(cal(frequency="monthly", nth_weekday=[2, "TU"], times=["10:00"]),
                                      utc(2027, 1, 1), 3)
    assert [o.local_date for o in second_tuesday] == [date(2027, 1, 12), date(2027, 2, 9), date(2027, 3, 9)]
    fifth_monday = next_occurrences(cal(frequency="monthly", nth_weekday=[5, "MO"], times=["10:00"]),
                                    utc(2027, 1, 1), 3)
    assert [o.local_date for o in fifth_monday] == [date(2027, 3, 29), date(2027, 5, 31), date(2027, 8, 30)]
    thanksgiving = next_occurrences(cal(frequency="yearly", month=11, nth_weekday=[4, "TH"], times=["12:00"]),
                                    utc(2027, 1, 1), 2)
    assert [o.local_date for o in thanksgiving] == [date(2027, 11, 25), date(2028, 11, 23)]


def test_fifth_weekday_rules_skip_months_without_one_and_never_firing_ones_are_rejected():
    feb = cal(frequency="yearly", month=2, nth_weekday=[5, "MO"], times=["09:00"])
    assert [o.local_date for o in next_occurrences(feb, utc(2000, 1, 1), 2)] == [date(2016, 2, 29), date(2044, 2, 29)]
    never = cal(frequency="yearly", interval=2, start_date="2027-01-01", month=2, nth_weekday=[5, "MO"],
                times=["09:00"])  # odd years only: never a leap year
    with pytest.raises(InvalidRecurrence) as info:
        parse_rule(never)
    assert info.value.field == "calendar.nth_weekday"


def test_yearly_feb_29_clamps_in_common_years():
    occs = next_occurrences(cal(frequency="yearly", month=2, month_day=29, times=["09:00"]), utc(2027, 1, 1), 3)
    assert [o.local_date for o in occs] == [date(2027, 2, 28), date(2028, 2, 29), date(2029, 2, 28)]


def test_monthly_interval_counts_from_start_month():
    rule = cal(frequency="monthly", interval=3, month_day=15, start_date="2027-02-20", times=["09:00"])
    occs = next_occurrences(rule, utc(2027, 1, 1), 3)
    assert [o.local_date for o in occs] == [date(2027, 5, 15), date(2027, 8, 15), date(2027, 11, 15)]


def test_times_are_sorted_and_deduplicated_and_key_is_canonical():
    a = parse_rule(cal(times=["18:00", "09:00", "09:00"]))
    b = parse_rule(cal(times=["09:00", "18:00"], interval=1, start_date="2000-01-01"))
    assert a.key == b.key and a == b
    occs = next_occurrences(cal(times=["18:00", "09:00", "09:00"]), utc(2027, 1, 1), 3)
    assert [o.local_time for o in occs] == [time(9), time(18), time(9)]
    assert a.nominal_period == timedelta(hours=12)
    assert a.timezone == NY and a.warnings == ("calendar.times lists 09:00 more than once; each runs once",)
    assert b.warnings == ()
    assert parse_rule(cal(times=["09:00"], interval=2)).nominal_period == timedelta(days=2)


# ---------------------------------------------------------------------- intervals


def test_interval_minutes_anchor_aligned_and_strictly_after():
    rule = {"interval": {"minutes": 15}, "anchor": "2027-03-14T06:07:00Z"}
    occs = next_occurrences(rule, utc(2027, 3, 14, 7, 22), 3)  # 07:22 is itself an occurrence
    assert [o.at for o in occs] == [utc(2027, 3, 14, 7, 37), utc(2027, 3, 14, 7, 52), utc(2027, 3, 14, 8, 7)]
    assert occs[0].local_date == date(2027, 3, 14) and occs[0].local_time == time(7, 37)
    assert not any(o.shifted for o in occs)
    # Before the anchor, the sequence continues backwards (k < 0).
    early = next_occurrences(rule, utc(2027, 3, 13, 23, 59), 1)[0]
    assert early.at == utc(2027, 3, 14, 0, 7)
    # Far from the anchor: arithmetic, still aligned.
    far = next_occurrences(rule, utc(2040, 1, 1, 0, 0, 30), 1)[0]
    assert far.at == utc(2040, 1, 1, 0, 7)
    r = parse_rule(rule)
    assert r.timezone == "UTC" and r.nominal_period == timedelta(minutes=15)


def test_interval_hours_ignore_wall_time_and_offset_anchor():
    rule = {"interval": {"hours": 1}, "anchor": "2027-11-07T01:30:00-04:00", "timezone": NY}
    occs = next_occurrences(rule, utc(2027, 11, 7, 5), 4)
    assert [o.at for o in occs] == [utc(2027, 11, 7, h, 30) for h in (5, 6, 7, 8)]
    # Display zone: both 01:30 (EDT, EST) appear, no shift semantics.
    assert [o.local_time for o in occs] == [time(1, 30), time(1, 30), time(2, 30), time(3, 30)]
    assert parse_rule(rule).timezone == NY


# ---------------------------------------------------------------------- validation


@pytest.mark.parametrize(("rule", "field"), [
    ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ({"cron": "0 9 * * *", "timezone": ""}, "timezone"),
    ({"cron": "0 9 * * *"}, "timezone"),
    (cal(times=["25:00"]), "calendar.times[0]"),
    (cal(times=["09:00", "9am"]), "calendar.times[1]"),
    (cal(times=[]), "calendar.times"),
    (cal(times=[900]), "calendar.times[0]"),
    (cal(frequency="monthly", month_day=32, times=["09:00"]), "calendar.month_day"),
    (cal(frequency="monthly", month_day=0, times=["09:00"]), "calendar.month_day"),
    (cal(frequency="monthly", month_day="first", times=["09:00"]), "calendar.month_day"),
    (cal(frequency="monthly", times=["09:00"]), "calendar.month_day"),
    (cal(frequency="monthly", month_day=1, nth_weekday=[1, "MO"], times=["09:00"]), "calendar.nth_weekday"),
    (cal(frequency="monthly", nth_weekday=[6, "MO"], times=["09:00"]), "calendar.nth_weekday"),
    (cal(frequency="monthly", nth_weekday=[1, "XX"], times=["09:00"]), "calendar.nth_weekday"),
    (cal(frequency="yearly", month_day=1, times=["09:00"]), "calendar.month"),
    (cal(frequency="yearly", month=13, month_day=1, times=["09:00"]), "calendar.month"),
    (cal(frequency="yearly", month=4, month_day=31, times=["09:00"]), "calendar.month_day"),
    (cal(interval=0, times=["09:00"]), "calendar.interval"),
    (cal(interval=True, times=["09:00"]), "calendar.interval"),
    (cal(frequency="hourly", times=["09:00"]), "calendar.frequency"),
    (cal(weekdays=["MO"], times=["09:00"]), "calendar.weekdays"),
    (cal(frequency="weekly", weekdays=["MON"], times=["09:00"]), "calendar.weekdays[0]"),
    (cal(frequency="weekly", weekdays=[], times=["09:00"]), "calendar.weekdays"),
    (cal(frequency="weekly", month_day=1, times=["09:00"]), "calendar.month_day"),
    (cal(start_date="2027-02-30", times=["09:00"]), "calendar.start_date"),
    (cal(times=["09:00"], colour="blue"), "calendar.colour"),
    ({"interval": {"minutes": 0}, "anchor": "2027-01-01T00:00:00Z"}, "interval.minutes"),
    ({"interval": {"minutes": 5, "hours": 1}, "anchor": "2027-01-01T00:00:00Z"}, "interval"),
    ({"interval": {}, "anchor": "2027-01-01T00:00:00Z"}, "interval"),
    ({"interval": {"days": 1}, "anchor": "2027-01-01T00:00:00Z"}, "interval.days"),
    ({"interval": {"minutes": 5}}, "anchor"),
    ({"interval": {"minutes": 5}, "anchor": "2027-01-01T00:00:00"}, "anchor"),
    ({"interval": {"minutes": 5}, "anchor": "yesterday"}, "anchor"),
    ({"cron": "0 9 * * *", "timezone": NY, "anchor": "2027-01-01T00:00:00Z"}, "anchor"),
    ({"cron": "0 9 * * *", "timezone": NY, "every": "day"}, "every"),
    ({"cron": "0 9 * * * *", "timezone": NY}, "cron"),
    ({"cron": "0 9 * *", "timezone": NY}, "cron"),
    ({"cron": "60 9 * * *", "timezone": NY}, "cron"),
    ({"cron": "0 9 * * 8", "timezone": NY}, "cron"),
    ({"cron": "0 9 0 * *", "timezone": NY}, "cron"),
    ({"cron": "0 9 * * 5-1", "timezone": NY}, "cron"),
    ({"cron": "0 9 * * */0", "timezone": NY}, "cron"),
    ({"cron": "0 L * * *", "timezone": NY}, "cron"),
    ({"cron": "0 9 1,,2 * *", "timezone": NY}, "cron"),
    ({"cron": "0 9 ? * *", "timezone": NY}, "cron"),
    ({"cron": "0 9 30 2 *", "timezone": NY}, "cron"),
    ({"cron": 5, "timezone": NY}, "cron"),
    ({"cron": "0 9 * * *", "calendar": {"frequency": "daily", "times": ["09:00"]}, "timezone": NY}, "rule"),
    ({"timezone": NY}, "rule"),
    ([], "rule"),
])
def test_invalid_rules_name_the_field(rule, field):
    with pytest.raises(InvalidRecurrence) as info:
        parse_rule(rule)
    assert info.value.field == field, str(info.value)
    assert str(info.value) == f"{info.value.field}: {info.value.reason}"
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidRecurrence):
        next_occurrences(rule, utc(2027, 1, 1), 1)


def test_naive_after_is_rejected():
    r = parse_rule(cal(times=["09:00"]))
    with pytest.raises(ValueError):
        r.next_after(datetime(2027, 1, 1))
    with pytest.raises(ValueError):
        r.occurrences_after(datetime(2027, 1, 1))
    with pytest.raises(ValueError):
        next_occurrences({"interval": {"hours": 1}, "anchor": "2027-01-01T00:00:00Z"}, datetime(2027, 1, 1), 1)


def test_after_in_any_zone_and_count_zero():
    rule = cal(times=["09:00"])
    a = next_occurrences(rule, datetime(2027, 1, 1, 9, 0, tzinfo=ZoneInfo(NY)), 1)
    b = next_occurrences(rule, utc(2027, 1, 1, 14), 1)
    assert a == b and a[0].local_date == date(2027, 1, 2)
    assert next_occurrences(rule, utc(2027, 1, 1), 0) == []
    assert isinstance(parse_rule(rule), Recurrence)


# ------------------------------------------------------------------ property tests

DST_ZONES = [
    "America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles", "America/Anchorage",
    "America/Halifax", "America/St_Johns", "America/Havana", "America/Santiago", "America/Asuncion",
    "America/Sao_Paulo", "America/Mexico_City", "America/Godthab", "America/Scoresbysund", "Atlantic/Azores",
    "Europe/London", "Europe/Dublin", "Europe/Paris", "Europe/Moscow", "Europe/Chisinau", "Europe/Istanbul",
    "Africa/Casablanca", "Africa/Cairo", "Asia/Tehran", "Asia/Jerusalem", "Asia/Gaza", "Asia/Beirut",
    "Asia/Damascus", "Asia/Amman", "Asia/Pyongyang", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Lord_Howe",
    "Australia/Adelaide", "Australia/Sydney", "Pacific/Chatham", "Pacific/Auckland", "Pacific/Apia",
    "Pacific/Fakaofo", "Pacific/Norfolk", "Antarctica/Troll", "UTC",
]


def _loadable(name: str) -> bool:
    try:
        ZoneInfo(name)
        return True
    except Exception:
        return False


#: Every zone a rule may name (the host's extra names, such as ``localtime``, are refused).
ALL_ZONES = sorted(z for z in canonical_zones() if _loadable(z))
zones = st.one_of(st.sampled_from(DST_ZONES), st.sampled_from(ALL_ZONES))


@cache
def transitions(zone_name: str, year: int) -> tuple[datetime, ...]:
    """UTC instants (to the minute) where the zone's offset changes during ``year``."""
    zone = ZoneInfo(zone_name)
    out = []
    t = utc(year, 1, 1)
    step = timedelta(hours=6)
    prev = t.astimezone(zone).utcoffset()
    while t.year == year:
        nxt = t + step
        off = nxt.astimezone(zone).utcoffset()
        if off != prev:
            lo, hi = t, nxt  # bisect to the minute
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == prev:
                    lo = mid
                else:
                    hi = mid
            out.append(hi.replace(second=0, microsecond=0))
            prev = off
        t = nxt
    return tuple(out)


@st.composite
def instants(draw, zone_name: str) -> datetime:
    """An instant in 2000-2040, usually within a day or so of a transition of the zone."""
    year = draw(st.integers(2000, 2040))
    trans = transitions(zone_name, year)
    if trans and draw(st.booleans()):
        base = draw(st.sampled_from(trans))
        return base + timedelta(minutes=draw(st.integers(-36 * 60, 12 * 60)))
    start = utc(year, 1, 1)
    return start + timedelta(minutes=draw(st.integers(0, 365 * 1440)))


WEEKDAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]
hhmm = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.sampled_from([0, 1, 15, 30, 45, 59]))


@st.composite
def calendar_rules(draw, zone_name: str) -> dict:
    freq = draw(st.sampled_from(["daily", "weekly", "monthly", "yearly"]))
    body: dict = {"frequency": freq, "interval": draw(st.integers(1, 3))}
    start = date(1999, 12, 1) + timedelta(days=draw(st.integers(0, 40 * 366)))
    body["start_date"] = start.isoformat()
    if draw(st.integers(0, 4)) == 0:  # sometimes every hour of the day (wall-time frequent)
        minute = draw(st.sampled_from([0, 30]))
        body["times"] = [f"{h:02d}:{minute:02d}" for h in range(24)]
    else:
        body["times"] = draw(st.lists(hhmm, min_size=1, max_size=4))
    if freq == "weekly":
        body["weekdays"] = draw(st.lists(st.sampled_from(WEEKDAYS), min_size=1, max_size=7))
    if freq == "yearly":
        body["month"] = draw(st.integers(1, 12))
    if freq in ("monthly", "yearly"):
        if draw(st.booleans()):
            top = 31 if freq == "monthly" else [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][body["month"]]
            body["month_day"] = draw(st.one_of(st.integers(1, top), st.just("last")))
        else:
            body["nth_weekday"] = [draw(st.sampled_from([1, 2, 3, 4, 5, -1])), draw(st.sampled_from(WEEKDAYS))]
    return {"calendar": body, "timezone": zone_name}


@st.composite
def cron_specs(draw) -> tuple[str, dict]:
    """A cron string and the value sets it stands for (built independently of the parser)."""
    minutes = sorted(set(draw(st.lists(st.integers(0, 59), min_size=1, max_size=3))))
    m_text = ",".join(map(str, minutes))
    if draw(st.integers(0, 5)) == 0:
        minutes, m_text = list(range(0, 60, 20)), "*/20"
    kind = draw(st.sampled_from(["star", "step", "list", "range"]))
    if kind == "star":
        hours, h_text = list(range(24)), "*"
    elif kind == "step":
        n = draw(st.integers(1, 6))
        hours, h_text = list(range(0, 24, n)), f"*/{n}"
    elif kind == "list":
        hours = sorted(set(draw(st.lists(st.integers(0, 23), min_size=1, max_size=4))))
        h_text = ",".join(map(str, hours))
    else:
        a = draw(st.integers(0, 23))
        b = draw(st.integers(a, 23))
        hours, h_text = list(range(a, b + 1)), f"{a}-{b}"
    dom_kind = draw(st.sampled_from(["star", "star", "list", "L"]))
    if dom_kind == "star":
        dom, dom_text, last = set(range(1, 32)), "*", False
    elif dom_kind == "L":
        dom, dom_text, last = set(), "L", True
    else:
        dom = set(draw(st.lists(st.integers(1, 31), min_size=1, max_size=3)))
        last = False
        dom.add(1 if not any(d <= 28 for d in dom) else min(dom))  # keep it satisfiable
        dom_text = ",".join(map(str, sorted(dom)))
    dow_kind = draw(st.sampled_from(["star", "star", "list"]))
    if dow_kind == "star":
        dow, dow_text = set(range(7)), "*"
    else:
        dow = set(draw(st.lists(st.integers(0, 7), min_size=1, max_size=3)))
        dow_text = ",".join(map(str, sorted(dow)))
        dow = {d % 7 for d in dow}
    month_kind = draw(st.sampled_from(["star", "star", "list"]))
    if month_kind == "star":
        months, mon_text = set(range(1, 13)), "*"
    else:
        months = set(draw(st.lists(st.integers(1, 12), min_size=1, max_size=4)))
        mon_text = ",".join(map(str, sorted(months)))
    spec = {"minutes": minutes, "hours": hours, "dom": dom, "last": last, "dow": dow, "months": months,
            "either": dom_text != "*" and dow_text != "*"}
    return f"{m_text} {h_text} {dom_text} {mon_text} {dow_text}", spec


def cron_day_matches(spec: dict, d: date) -> bool:
    if d.month not in spec["months"]:
        return False
    ndays = pycalendar.monthrange(d.year, d.month)[1]
    dom_ok = d.day in spec["dom"] or (spec["last"] and d.day == ndays)
    dow_ok = (d.weekday() + 1) % 7 in spec["dow"]
    return (dom_ok or dow_ok) if spec["either"] else (dom_ok and dow_ok)


def rrule_dates(body: dict, lo: date, hi: date) -> set[date]:
    """Dates of a calendar rule in [lo, hi], computed independently with dateutil.rrule."""
    start = date.fromisoformat(body["start_date"])
    kw: dict = {"dtstart": datetime.combine(start, time()), "interval": body["interval"], "wkst": du.MO}
    freq = {"daily": du.DAILY, "weekly": du.WEEKLY, "monthly": du.MONTHLY, "yearly": du.YEARLY}[body["frequency"]]
    if body["frequency"] == "weekly":
        kw["byweekday"] = [WEEKDAYS.index(w) for w in body["weekdays"]]
    if body["frequency"] == "yearly":
        kw["bymonth"] = body["month"]
    md = body.get("month_day")
    if md == "last":
        kw["bymonthday"] = -1
    elif md is not None and md <= 28:
        kw["bymonthday"] = md
    elif md is not None:  # clamp: the latest of 28..md that exists in the month
        kw["bymonthday"] = list(range(28, md + 1))
        kw["bysetpos"] = -1
    if "nth_weekday" in body:
        n, wd = body["nth_weekday"]
        kw["byweekday"] = du.weekday(WEEKDAYS.index(wd))(n)
    if body["frequency"] == "daily" or body["frequency"] == "weekly":
        # rrule counts from dtstart; move dtstart forward by whole periods to stay fast.
        period = body["interval"] * (7 if body["frequency"] == "weekly" else 1)
        monday = start - timedelta(days=start.weekday() if body["frequency"] == "weekly" else 0)
        skip = max(0, (lo - monday).days // period - 1)
        if skip:
            kw["dtstart"] = datetime.combine(monday + timedelta(days=skip * period), time())
    rule = du.rrule(freq, **kw)
    out = {x.date() for x in rule.between(datetime.combine(lo, time()), datetime.combine(hi, time()), inc=True)}
    return {d for d in out if d >= start}


def oracle(zone_name: str, day_matches, minutes_of_day: list[int], frequent: bool,
           after: datetime, until: datetime) -> list[tuple]:
    """Expected occurrences in (after, until], by scanning every real minute.

    A wall time seen for the first time is an occurrence (the earlier instant of a
    repeated hour); seen again, only for a frequent rule. An intended wall time never seen
    lay in a gap: it runs at the intended wall time read with the offset in force before
    the gap. Equal instants collapse, keeping the unshifted one.
    """
    zone = ZoneInfo(zone_name)
    wanted = set(minutes_of_day)
    scan_from = after - timedelta(hours=36)
    scan_to = until + timedelta(hours=36)
    seen: set[tuple[date, int]] = set()
    found: dict[datetime, tuple] = {}
    t = scan_from
    prev_off = None
    gaps = []  # (transition instant, offset before, wall before, wall after)
    while t <= scan_to:
        local = t.astimezone(zone)
        off = local.utcoffset()
        if prev_off is not None and off > prev_off:
            gaps.append((t, prev_off, (t - timedelta(minutes=1)).astimezone(zone).replace(tzinfo=None),
                         local.replace(tzinfo=None)))
        prev_off = off
        mod = local.hour * 60 + local.minute
        if local.second == 0 and mod in wanted and day_matches(local.date()):
            key = (local.date(), mod)
            if key not in seen or frequent:
                found[t] = (t, local.date(), time(local.hour, local.minute), False)
            seen.add(key)
        t += timedelta(minutes=1)
    for _, off_before, wall_before, wall_after in gaps:
        d = wall_before.date()
        while d <= wall_after.date():
            if day_matches(d):
                for mod in sorted(wanted):
                    naive = datetime.combine(d, time(mod // 60, mod % 60))
                    if wall_before < naive < wall_after and (d, mod) not in seen:
                        at = naive.replace(tzinfo=UTC) - off_before
                        found.setdefault(at, (at, d, time(mod // 60, mod % 60), True))
            d += timedelta(days=1)
    return sorted(v for k, v in found.items() if after < k <= until)


def compile_or_reject(rule: dict) -> Recurrence:
    """Compile a generated rule; reject (for hypothesis) one that can never fire."""
    try:
        return parse_rule(rule)
    except InvalidRecurrence as error:
        assert error.field == "calendar.nth_weekday" and "never" in error.reason, str(error)
        assume(False)
        raise


def check_invariants(zone_name: str, occs: list[Occurrence], after: datetime) -> None:
    zone = ZoneInfo(zone_name)
    assert_well_formed(occs, after)
    for o in occs:
        local = o.at.astimezone(zone)
        if o.shifted:
            naive = datetime.combine(o.local_date, o.local_time)
            # The intended wall time really did not exist...
            assert naive.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None) != naive
            # ...and it ran later by the length of the gap.
            assert local.replace(tzinfo=None) > naive
        else:
            assert (local.date(), local.time()) == (o.local_date, o.local_time)


PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ORACLE = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(data=st.data())
def test_property_calendar_rules_invariants(data):
    zone_name = data.draw(zones)
    rule = data.draw(calendar_rules(zone_name))
    compiled = compile_or_reject(rule)
    after = data.draw(instants(zone_name))
    occs = list(islice(compiled.occurrences_after(after), 40))
    # A 5th-weekday rule may be rare enough to run out before year 9999; all others don't.
    assert len(occs) == 40 or rule["calendar"].get("nth_weekday", [0])[0] == 5
    assert occs
    check_invariants(zone_name, occs, after)


@PROPERTY
@given(data=st.data())
def test_property_cron_rules_invariants(data):
    zone_name = data.draw(zones)
    text, _ = data.draw(cron_specs())
    after = data.draw(instants(zone_name))
    occs = next_occurrences({"cron": text, "timezone": zone_name}, after, 40)
    assert len(occs) == 40
    check_invariants(zone_name, occs, after)


@ORACLE
@given(data=st.data())
def test_property_cron_matches_minute_scan_oracle(data):
    zone_name = data.draw(st.sampled_from(DST_ZONES))
    text, spec = data.draw(cron_specs())
    after = data.draw(instants(zone_name))
    until = after + timedelta(hours=30)
    minutes = [h * 60 + m for h in spec["hours"] for m in spec["minutes"]]
    frequent = len(spec["hours"]) == 24
    expected = oracle(zone_name, lambda d: cron_day_matches(spec, d), minutes, frequent, after, until)
    got = []
    for o in parse_rule({"cron": text, "timezone": zone_name}).occurrences_after(after):
        if o.at > until:
            break
        got.append(tuple(o)[:4])  # (at, local date, local time, shifted): the default DST choice skips nothing
    assert got == expected


@ORACLE
@given(data=st.data())
def test_property_calendar_matches_rrule_and_minute_scan_oracle(data):
    zone_name = data.draw(st.sampled_from(DST_ZONES))
    rule = data.draw(calendar_rules(zone_name))
    compile_or_reject(rule)
    body = rule["calendar"]
    after = data.draw(instants(zone_name))
    until = after + timedelta(hours=30)
    local_after = after.astimezone(ZoneInfo(zone_name)).date()
    dates = rrule_dates(body, local_after - timedelta(days=4), local_after + timedelta(days=4))
    assume(dates)  # the window must hold at least a candidate date to be interesting
    minutes = sorted({int(t[:2]) * 60 + int(t[3:]) for t in body["times"]})
    frequent = len({m // 60 for m in minutes}) == 24
    expected = oracle(zone_name, dates.__contains__, minutes, frequent, after, until)
    got = []
    for o in parse_rule(rule).occurrences_after(after):
        if o.at > until:
            break
        got.append(tuple(o)[:4])  # (at, local date, local time, shifted): the default DST choice skips nothing
    assert got == expected


@pytest.mark.parametrize(("zone_name", "day"), [
    ("America/New_York", date(2027, 3, 14)), ("America/New_York", date(2027, 11, 7)),
    ("Australia/Lord_Howe", date(2027, 10, 3)), ("Australia/Lord_Howe", date(2027, 4, 4)),
    ("America/Santiago", date(2027, 9, 5)), ("America/Santiago", date(2027, 4, 4)),
    ("America/Havana", date(2027, 3, 14)), ("America/Havana", date(2027, 11, 7)),
    ("Pacific/Chatham", date(2027, 9, 26)), ("Pacific/Apia", date(2011, 12, 30)),
    ("Asia/Tehran", date(2021, 3, 22)), ("Asia/Tehran", date(2021, 9, 22)),
    ("Europe/Dublin", date(2027, 3, 28)), ("Africa/Casablanca", date(2027, 2, 7)),
])
@pytest.mark.parametrize("cron", ["0 * * * *", "*/30 * * * *", "30 0-3 * * *", "15,45 23,0,1,2 * * *"])
def test_transition_days_match_oracle(zone_name, day, cron):
    spec_minutes = parse_rule({"cron": cron, "timezone": zone_name})
    fields = cron.split()

    def expand(text: str, top: int) -> list[int]:
        if text == "*":
            return list(range(top))
        if text.startswith("*/"):
            return list(range(0, top, int(text[2:])))
        if "-" in text:
            a, b = map(int, text.split("-"))
            return list(range(a, b + 1))
        return [int(x) for x in text.split(",")]

    minutes = sorted(h * 60 + m for h in expand(fields[1], 24) for m in expand(fields[0], 60))
    frequent = len({m // 60 for m in minutes}) == 24
    after = datetime.combine(day - timedelta(days=1), time(12), ZoneInfo(zone_name)).astimezone(UTC)
    until = after + timedelta(hours=48)
    expected = oracle(zone_name, lambda d: True, minutes, frequent, after, until)
    got = []
    for o in spec_minutes.occurrences_after(after):
        if o.at > until:
            break
        got.append(tuple(o)[:4])  # (at, local date, local time, shifted): the default DST choice skips nothing
    assert got == expected
    counts = Counter(o[1] for o in got)
    assert counts  # something ran


# ------------------------------------------------------------- microbenchmark (sanity)


def test_microbenchmark_sanity_no_timing_asserts():
    """Exercise the hot path the dispatcher uses; prints the cost, asserts only results."""
    daily = parse_rule(cal(times=["09:00"]))
    hourly = parse_rule({"cron": "0 * * * *", "timezone": NY})
    after = utc(2027, 6, 15, 10, 17)
    n = 2000
    daily_us = timeit.timeit(lambda: daily.next_after(after), number=n) / n * 1e6
    hourly_us = timeit.timeit(lambda: hourly.next_after(after), number=n) / n * 1e6
    print(f"next_after: daily calendar {daily_us:.1f} us, hourly cron {hourly_us:.1f} us")
    assert daily.next_after(after).at == utc(2027, 6, 15, 13)
    assert hourly.next_after(after).at == utc(2027, 6, 15, 11)


@pytest.mark.parametrize("anchor", ["9999-12-31T23:59:59-23:59", "9999-12-31T23:00:00-01:00",
                                    "0001-01-01T00:00:00+00:01", "0001-01-01T00:00:00+23:59"])
def test_an_anchor_whose_offset_leaves_the_representable_years_is_refused_naming_anchor(anchor):
    with pytest.raises(InvalidRecurrence) as refused:
        parse_rule({"interval": {"hours": 1}, "anchor": anchor})
    assert refused.value.field == "anchor"


def test_a_warm_process_keeps_a_busy_minutes_distinct_rules_compiled():
    # Given 10,000 distinct rules (a busy pipeline's minute of one-of-a-kind schedules),
    # met in the same order pass after pass as a warm dispatcher meets them
    import json

    from timekeeper.schedules import recurrence

    texts = [json.dumps({"cron": f"{i % 60} {i // 60 % 24} * * *", "timezone": zone}, sort_keys=True)
             for i, zone in ((i, ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney",
                                  "America/Sao_Paulo", "Africa/Cairo")[i // 1440]) for i in range(10_000))]
    recurrence._compile_cached.cache_clear()
    for text in texts:
        recurrence.parse_rule_text(text)
    before = recurrence._compile_cached.cache_info()
    # When the next pass meets them again
    first = [recurrence.parse_rule_text(text) for text in texts[:3]]
    for text in texts[3:]:
        recurrence.parse_rule_text(text)
    after = recurrence._compile_cached.cache_info()
    # Then none is compiled again (an LRU smaller than the minute's rules would miss them all)
    assert after.misses == before.misses == 10_000
    assert after.hits - before.hits == 10_000
    assert first[0] is recurrence.parse_rule_text(texts[0])
