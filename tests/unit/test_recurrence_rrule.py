"""The RFC 5545 RRULE form: unit cases (the differential test against dateutil.rrule covers random rules)."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone

import pytest

from timekeeper.schedules.recurrence import InvalidRecurrence, next_occurrences, parse_rule

UTC = timezone.utc
AFTER = datetime(2027, 1, 1, tzinfo=UTC)


def occ(rrule: str, zone: str = "Europe/Berlin", start: str = "2027-01-01", count: int = 5,
        after: datetime = AFTER, **extra):
    return next_occurrences({"rrule": rrule, "timezone": zone, "start": start, **extra}, after, count)


def test_the_last_business_day_of_each_month_at_18_00_berlin():
    found = occ("FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18;BYMINUTE=0", count=3)
    assert [o.local_date for o in found] == [date(2027, 1, 29), date(2027, 2, 26), date(2027, 3, 31)]
    assert found[0].at == datetime(2027, 1, 29, 17, 0, tzinfo=UTC)  # CET
    assert found[2].at == datetime(2027, 3, 31, 16, 0, tzinfo=UTC)  # CEST


def test_count_counts_local_date_times_from_start():
    found = occ("FREQ=DAILY;COUNT=3;BYHOUR=9,17", count=10, after=datetime(2026, 12, 1, tzinfo=UTC))
    assert [(o.local_date, o.local_time) for o in found] == [
        (date(2027, 1, 1), time(9)), (date(2027, 1, 1), time(17)), (date(2027, 1, 2), time(9))]
    rule = parse_rule({"rrule": "FREQ=DAILY;COUNT=3;BYHOUR=9,17", "timezone": "Europe/Berlin", "start": "2027-01-01"})
    assert rule.next_after(datetime(2027, 1, 2, 9, tzinfo=UTC)) is None
    assert rule.latest_at_or_before(datetime(2030, 1, 1, tzinfo=UTC)).local_date == date(2027, 1, 2)
    assert rule.count_between(datetime(2026, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC)) == (3, True)


def test_until_is_inclusive_and_interval_counts_from_start():
    assert [o.local_date for o in occ("FREQ=MONTHLY;BYMONTHDAY=-1;UNTIL=20270331", count=9)] == [
        date(2027, 1, 31), date(2027, 2, 28), date(2027, 3, 31)]
    assert [o.local_date for o in occ("FREQ=WEEKLY;INTERVAL=2;BYDAY=MO", start="2027-01-04",
                                      count=3)] == [date(2027, 1, 4), date(2027, 1, 18), date(2027, 2, 1)]


def test_exdate_removes_a_date_or_one_local_time():
    found = occ("FREQ=DAILY;BYHOUR=9,17", count=3, exdate=["2027-01-01", "2027-01-02T09:00"])
    assert [(o.local_date, o.local_time) for o in found] == [
        (date(2027, 1, 2), time(17)), (date(2027, 1, 3), time(9)), (date(2027, 1, 3), time(17))]
    rule = parse_rule({"rrule": "FREQ=DAILY;BYHOUR=9,17", "timezone": "UTC", "start": "2027-01-01",
                       "exdate": ["2027-01-02T09:00"]})
    assert rule.count_between(datetime(2027, 1, 1, tzinfo=UTC), datetime(2027, 1, 3, 23, tzinfo=UTC)) == (5, True)
    assert rule.latest_at_or_before(datetime(2027, 1, 2, 12, tzinfo=UTC)).at == datetime(2027, 1, 1, 17, tzinfo=UTC)


def test_week_numbers_are_iso_weeks_including_the_days_of_another_calendar_year():
    # 2039-01-01 (a Saturday) is in ISO week 52 of 2038; 2026-12-28..31 are in week 53 of 2026.
    found = occ("FREQ=YEARLY;BYWEEKNO=52;BYMONTH=1", zone="UTC", start="2039-01-01", count=2,
                after=datetime(2038, 12, 31, tzinfo=UTC))
    assert [o.local_date for o in found] == [date(2039, 1, 1), date(2039, 1, 2)]
    found = occ("FREQ=YEARLY;BYWEEKNO=53;BYDAY=MO", zone="UTC", start="2026-01-01", count=1,
                after=datetime(2026, 1, 1, tzinfo=UTC))
    assert found[0].local_date == date(2026, 12, 28)


def test_a_years_last_days_in_next_years_week_1_count_only_as_week_1():
    # 2029-12-31 (a Monday) is in ISO week 1 of 2030. Expanding 2029, its weeks are 2029's:
    # BYWEEKNO=1 takes that day, BYWEEKNO=-52 (2029's first week, of 52) does not, though
    # -52 is week 1 of 2030 too.
    assert [o.local_date for o in occ("FREQ=YEARLY;BYWEEKNO=1;BYYEARDAY=365", zone="UTC", start="2029-01-01",
                                      count=1, after=datetime(2029, 6, 1, tzinfo=UTC))] == [date(2029, 12, 31)]
    assert occ("FREQ=YEARLY;BYWEEKNO=-52;BYYEARDAY=365", zone="Europe/Berlin", start="2025-01-01", count=4,
               after=datetime(2025, 6, 1, tzinfo=UTC)) == []


def test_bysetpos_counts_the_start_week_from_the_start_date():
    # The series starts on Tuesday 2026-01-06: its first week is that Tuesday onwards, so the
    # first of (Monday, Tuesday) that week is the Tuesday; later weeks count from Monday.
    found = occ("FREQ=WEEKLY;INTERVAL=1;BYDAY=MO,TU;BYSETPOS=1", start="2026-01-06", count=3,
                after=datetime(2026, 1, 1, tzinfo=UTC))
    assert [o.local_date for o in found] == [date(2026, 1, 6), date(2026, 1, 12), date(2026, 1, 19)]


def test_nth_weekdays_of_the_year_and_negative_month_days():
    assert occ("FREQ=YEARLY;BYDAY=-1SU", zone="UTC", count=1)[0].local_date == date(2027, 12, 26)
    assert occ("FREQ=YEARLY;BYDAY=20MO", zone="UTC", count=1)[0].local_date == date(2027, 5, 17)
    assert occ("FREQ=MONTHLY;BYMONTHDAY=-2", zone="UTC", count=2)[1].local_date == date(2027, 2, 27)


def test_the_dst_policy_applies():
    # Berlin's gap: 2027-03-28 02:00 -> 03:00.
    found = occ("FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU;BYHOUR=2;BYMINUTE=30", count=1)
    assert found[0].shifted and found[0].at == datetime(2027, 3, 28, 1, 30, tzinfo=UTC)
    found = occ("FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU;BYHOUR=2;BYMINUTE=30", count=1)
    assert found[0].at == datetime(2027, 10, 31, 0, 30, tzinfo=UTC)  # the first 02:30 only


@pytest.mark.parametrize(("rrule", "field"), [
    ("FREQ=SECONDLY", "rrule.FREQ"),
    ("FREQ=MINUTELY", "rrule.FREQ"),
    ("FREQ=HOURLY", "rrule.FREQ"),
    ("FREQ=DAILY;BYSECOND=0", "rrule.BYSECOND"),
    ("FREQ=YEARLY;BYEASTER=0", "rrule.BYEASTER"),
    ("FREQ=DAILY;WKST=SU", "rrule.WKST"),
    ("FREQ=DAILY;FOO=1", "rrule.FOO"),
    ("BYDAY=MO", "rrule.FREQ"),
    ("FREQ=WEEKLY;BYDAY=1MO", "rrule.BYDAY"),
    ("FREQ=MONTHLY;BYDAY=MO,1TU", "rrule.BYDAY"),
    ("FREQ=MONTHLY;BYDAY=6MO", "rrule.BYDAY"),
    ("FREQ=MONTHLY;BYWEEKNO=1", "rrule.BYWEEKNO"),
    ("FREQ=MONTHLY;BYMONTHDAY=32", "rrule.BYMONTHDAY"),
    ("FREQ=DAILY;BYHOUR=24", "rrule.BYHOUR"),
    ("FREQ=DAILY;BYHOUR=9,17;BYSETPOS=1", "rrule.BYSETPOS"),
    ("FREQ=DAILY;COUNT=3;UNTIL=20271231", "rrule.COUNT"),
    ("FREQ=DAILY;COUNT=10001", "rrule.COUNT"),
    ("FREQ=DAILY;UNTIL=2027-12-31", "rrule.UNTIL"),
    ("FREQ=DAILY;INTERVAL=0", "rrule.INTERVAL"),
    ("FREQ=DAILY;;", "rrule"),
])
def test_refused_parts_are_named(rrule, field):
    with pytest.raises(InvalidRecurrence) as error:
        parse_rule({"rrule": rrule, "timezone": "UTC", "start": "2027-01-01"})
    assert error.value.field == field


def test_start_is_required_and_only_for_rrule():
    with pytest.raises(InvalidRecurrence) as error:
        parse_rule({"rrule": "FREQ=DAILY", "timezone": "UTC"})
    assert error.value.field == "start"
    with pytest.raises(InvalidRecurrence) as error:
        parse_rule({"cron": "0 9 * * *", "timezone": "UTC", "start": "2027-01-01"})
    assert error.value.field == "start"
    with pytest.raises(InvalidRecurrence) as error:
        parse_rule({"rrule": "FREQ=DAILY", "timezone": "UTC", "start": "2027-01-01", "exdate": ["2027-13-01"]})
    assert error.value.field == "exdate[0]"


def test_a_rule_that_selects_no_date_is_refused_when_saved():
    rule = parse_rule({"rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "timezone": "UTC", "start": "2027-01-01"})
    with pytest.raises(InvalidRecurrence) as error:
        rule.check_fires(AFTER)
    assert error.value.field == "rrule"


@pytest.mark.parametrize("dst", [{"overlap": "first"}, {"overlap": "second"}, {"overlap": "both"},
                                 {"gap": "end"}, {"gap": "skip"}])
def test_an_excluded_change_day_time_is_counted_out_as_the_dst_choice_runs_it(dst):
    """The backlog count drops each instant an excluded local date-time would have run at:
    two for a repeated time with overlap both (the count agrees with the walk)."""
    for text, exdate, after in [("FREQ=DAILY;BYHOUR=1;BYMINUTE=30", "2027-11-07T01:30", datetime(2027, 11, 5)),
                                ("FREQ=DAILY;BYHOUR=2;BYMINUTE=30", "2027-03-14T02:30", datetime(2027, 3, 12))]:
        rule = parse_rule({"rrule": text, "start": "2027-01-01", "timezone": "America/New_York",
                           "exdate": [exdate], "dst": dst})
        first, last = after.replace(tzinfo=timezone.utc), (after + timedelta(days=5)).replace(tzinfo=timezone.utc)
        walked = [o for o in rule.occurrences_after(first) if o.at <= last]
        assert len(walked) == 4 and rule.count_between(first, last) == (4, True)


@pytest.mark.parametrize(("overlap", "expected"), [
    ("first", ["2027-11-06T05:30", "2027-11-07T05:30"]),
    ("second", ["2027-11-06T05:30", "2027-11-07T06:30"]),
    ("both", ["2027-11-06T05:30", "2027-11-07T05:30", "2027-11-07T06:30"]),
])
def test_a_floating_until_on_a_repeated_time_ends_after_the_instant_the_overlap_choice_runs(overlap, expected):
    """UNTIL=2027-11-07 01:30 New York is inclusive; that wall time happens twice (EDT 05:30Z,
    then EST 06:30Z): the series includes the instants the overlap choice runs it at."""
    rule = parse_rule({"rrule": "FREQ=DAILY;BYHOUR=1;BYMINUTE=30;UNTIL=20271107T013000", "start": "2027-11-06",
                       "timezone": "America/New_York", "dst": {"overlap": overlap}})
    after = datetime(2027, 11, 5, tzinfo=timezone.utc)
    got = [o.at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M") for o in rule.occurrences_after(after)]
    assert got == expected
