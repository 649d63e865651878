"""The cron day tokens: ``d#n``, ``dL``, ``nW``, ``LW``, ``L-n`` (unit cases; the
differential test against cronsim covers ``#``, ``dL`` and ``LW`` over random rules)."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from timekeeper.schedules.recurrence import InvalidRecurrence, next_occurrences

UTC = timezone.utc
AFTER = datetime(2027, 1, 1, tzinfo=UTC)


def dates(cron: str, zone: str = "Europe/Berlin", count: int = 6, after: datetime = AFTER) -> list[date]:
    return [o.local_date for o in next_occurrences({"cron": cron, "timezone": zone}, after, count)]


def test_nth_weekday_of_the_month():
    assert dates("0 9 * * 1#3", count=3) == [date(2027, 1, 18), date(2027, 2, 15), date(2027, 3, 15)]


def test_a_fifth_weekday_skips_the_months_without_one():
    # Fridays: January 2027 has five, February to March do not, April has five.
    assert dates("0 9 * * 5#5", count=2) == [date(2027, 1, 29), date(2027, 4, 30)]


def test_last_weekday_of_the_month():
    assert dates("0 9 * * 5L", count=3) == [date(2027, 1, 29), date(2027, 2, 26), date(2027, 3, 26)]
    assert dates("0 9 * * 0L", count=1) == dates("0 9 * * SUNL", count=1) == [date(2027, 1, 31)]


def test_last_weekday_mon_to_fri():
    # 2027-01-31 is a Sunday, 2027-07-31 a Saturday.
    assert dates("0 18 LW * *", count=7) == [date(2027, 1, 29), date(2027, 2, 26), date(2027, 3, 31),
                                             date(2027, 4, 30), date(2027, 5, 31), date(2027, 6, 30),
                                             date(2027, 7, 30)]


def test_days_before_the_last():
    assert dates("0 9 L-2 * *", count=3) == [date(2027, 1, 29), date(2027, 2, 26), date(2027, 3, 29)]
    assert dates("0 9 L-1 2 *", count=2) == [date(2027, 2, 27), date(2028, 2, 28)]  # 2028 is a leap year


def test_nearest_weekday_never_crosses_the_month():
    # 2027-05-01 is a Saturday: the nearest weekday inside May is Monday the 3rd.
    assert dates("0 9 1W 5 *", count=1) == [date(2027, 5, 3)]
    # 2027-01-31 is a Sunday: the nearest inside January is Friday the 29th.
    assert dates("0 9 31W 1 *", count=1) == [date(2027, 1, 29)]
    # A Saturday 15th runs on Friday the 14th; a Sunday 15th on Monday the 16th.
    assert dates("0 9 15W 5 *", count=1) == [date(2027, 5, 14)]
    assert dates("0 9 15W 8 *", count=1) == [date(2027, 8, 16)]
    # A day the month does not have selects nothing that month (like a plain day of month).
    assert dates("0 9 30W 1-3 *", count=2) == [date(2027, 1, 29), date(2027, 3, 30)]


def test_day_tokens_follow_the_either_rule_when_both_day_fields_are_restricted():
    assert dates("0 9 LW * 1#1", count=4) == [date(2027, 1, 4), date(2027, 1, 29), date(2027, 2, 1),
                                              date(2027, 2, 26)]


def test_day_tokens_keep_the_dst_policy():
    # The last Sunday of March 2027 in New York is not a change; Berlin's is 2027-03-28.
    occ = next_occurrences({"cron": "30 2 * * 0L", "timezone": "Europe/Berlin"}, datetime(2027, 3, 1, tzinfo=UTC), 1)
    assert occ[0].local_date == date(2027, 3, 28) and occ[0].shifted
    assert occ[0].at == datetime(2027, 3, 28, 1, 30, tzinfo=UTC)  # 03:30 CEST
    occ = next_occurrences({"cron": "30 2 * * 0L", "timezone": "Europe/Berlin"}, datetime(2027, 10, 1, tzinfo=UTC), 1)
    assert occ[0].at == datetime(2027, 10, 31, 0, 30, tzinfo=UTC) and not occ[0].shifted  # the first 02:30


@pytest.mark.parametrize(("cron", "message"), [
    ("0 9 * * 1#6", "day-of-week field: 1#6"),
    ("0 9 * * 1#0", "day-of-week field: 1#0"),
    ("0 9 32W * *", "day-of-month field: 32W"),
    ("0 9 L-31 * *", "day-of-month field: L-31"),
    ("0 L * * *", "hour field"),
    ("0 9 * 3W *", "month field"),
    ("0 9 * * 8L", "day-of-week field"),
    ("0 9 L#2 * *", "day-of-month field"),
])
def test_bad_day_tokens_are_refused_naming_the_cron_field(cron, message):
    with pytest.raises(InvalidRecurrence) as error:
        next_occurrences({"cron": cron, "timezone": "UTC"}, AFTER, 1)
    assert error.value.field == "cron"
    assert message in error.value.reason


def test_day_tokens_mix_with_plain_days_in_one_list():
    # The documented mixes: the weekday nearest the 15th and the 16th (March 2027: the
    # 15th is a Monday); every Friday and the third Saturday (March 2027: the 20th).
    assert dates("0 9 15W,16 * *", count=4) == [date(2027, 1, 15), date(2027, 1, 16),
                                                date(2027, 2, 15), date(2027, 2, 16)]
    march = datetime(2027, 3, 1, tzinfo=UTC)
    assert dates("0 9 * * 5,6#3", count=5, after=march) == [date(2027, 3, 5), date(2027, 3, 12),
                                                          date(2027, 3, 19), date(2027, 3, 20),
                                                          date(2027, 3, 26)]


def test_a_weekday_name_before_l_is_that_weekdays_last_occurrence():
    # MONL is the last Monday, as 1L is: 2027-01-25, 2027-02-22, 2027-03-29.
    assert dates("0 9 * * MONL", count=3) == dates("0 9 * * 1L", count=3) == [
        date(2027, 1, 25), date(2027, 2, 22), date(2027, 3, 29)]
