"""Calendar rules on business days: the Nth business day of a month with public holidays.

The property tests compare the engine with an independent oracle: a plain day-by-day walk
of each month that asks the ``holidays`` library directly whether a day is a holiday, then
resolves the wall time by the documented DST policy (a gap shifts by its length, an
overlap runs at its first instant).
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import holidays
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timekeeper.schedules.recurrence import InvalidRecurrence, next_occurrences, parse_rule
from timekeeper.schedules.recurrence.business import HOLIDAYS_VERSION

UTC = timezone.utc
CODES = ["DE", "DE-BE", "DE-BY", "US", "US-NY", "GB", "FR", "AU-NSW", "JP", None]
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Europe/London", "Asia/Tokyo"]
CODE_ORDER = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


def rule(business_day: int, *, holidays_code: str | None = "DE-BE", times: tuple[str, ...] = ("09:00",),
         zone: str = "Europe/Berlin", weekdays: list[str] | None = None) -> dict:
    calendar: dict = {"frequency": "monthly", "business_day": business_day, "times": list(times)}
    if holidays_code is not None:
        calendar["holidays"] = holidays_code
    if weekdays is not None:
        calendar["weekdays"] = weekdays
    return {"calendar": calendar, "timezone": zone}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# ------------------------------------------------------------------------------ examples


def test_third_business_day_skips_new_year_and_the_weekend_in_berlin():
    # Given January 2027 in Berlin: Friday the 1st is New Year's Day, the 2nd and 3rd a weekend
    # When the third business day of each month is asked for
    occurrences = next_occurrences(rule(3), at("2026-12-31T00:00:00"), 2)
    # Then January's is Wednesday the 6th (4, 5, 6 are the first three business days) and
    # February's Wednesday the 3rd, both at 09:00 CET
    assert [o.at for o in occurrences] == [at("2027-01-06T08:00:00"), at("2027-02-03T08:00:00")]
    assert [o.local_date for o in occurrences] == [date(2027, 1, 6), date(2027, 2, 3)]


def test_the_subdivision_decides_a_regional_holiday():
    # Given Epiphany (6 January 2027) is a holiday in Bavaria and not in Berlin
    after = at("2026-12-31T00:00:00")
    # Then Berlin's third business day is the 6th and Bavaria's the 7th
    assert next_occurrences(rule(3, holidays_code="DE-BE"), after, 1)[0].local_date == date(2027, 1, 6)
    assert next_occurrences(rule(3, holidays_code="DE-BY"), after, 1)[0].local_date == date(2027, 1, 7)


def test_last_business_day_skips_a_holiday_at_the_month_end():
    # Given 31 May 2027 is Memorial Day in the United States (a Monday)
    occurrence = next_occurrences(rule(-1, holidays_code="US-NY", times=("18:00",), zone="America/New_York"),
                                  at("2027-05-01T00:00:00"), 1)[0]
    # Then May's last business day is Friday the 28th
    assert occurrence.local_date == date(2027, 5, 28)
    assert occurrence.at == at("2027-05-28T22:00:00")


def test_a_business_day_never_leaves_its_month_and_clamps_in_a_short_month():
    # Given a business week of Saturdays only: a month has four or five business days
    saturdays = rule(5, holidays_code=None, weekdays=["SA"])
    occurrences = next_occurrences(saturdays, at("2027-01-01T00:00:00"), 3)
    # Then January 2027 (five Saturdays) runs on the 30th, February (four) on its last
    # Saturday, the 27th, and March (four) on the 27th: each in its own month
    assert [o.local_date for o in occurrences] == [date(2027, 1, 30), date(2027, 2, 27), date(2027, 3, 27)]


def test_business_day_keeps_the_dst_policy_of_calendar_rules():
    # Given New York springs forward at 02:00 on Sunday 14 March 2027, and a business week
    # of Sundays only: the second Sunday of March is the change day
    sundays = rule(2, holidays_code=None, weekdays=["SU"], times=("02:30",), zone="America/New_York")
    occurrence = next_occurrences(sundays, at("2027-03-01T00:00:00"), 1)[0]
    # Then 02:30 does not exist and runs at 03:30 EDT, keeping its date, marked shifted
    assert occurrence.at == at("2027-03-14T07:30:00")
    assert occurrence.local_date == date(2027, 3, 14) and occurrence.local_time == time(2, 30)
    assert occurrence.shifted


def test_the_normalised_rule_names_its_business_week_and_the_holiday_data():
    compiled = parse_rule(rule(3))
    assert compiled.rule["calendar"]["weekdays"] == ["MO", "TU", "WE", "TH", "FR"]
    assert compiled.rule["calendar"]["holidays"] == "DE-BE"
    assert compiled.holiday_data == f"holidays {HOLIDAYS_VERSION}"


def test_workspace_closures_are_not_business_days():
    # Given a workspace closed on 4 January 2027
    compiled = parse_rule(rule(3)).with_closures(frozenset({date(2027, 1, 4)}))
    # Then the third business day moves from the 6th to the 7th, and the rule is a different key
    assert compiled.next_after(at("2026-12-31T00:00:00")).local_date == date(2027, 1, 7)
    assert compiled.key != parse_rule(rule(3)).key


@pytest.mark.parametrize(("calendar", "field", "words"), [
    ({"business_day": 24}, "calendar.business_day", "1 to 23"),
    ({"business_day": -24}, "calendar.business_day", "1 to 23"),
    ({"business_day": 0}, "calendar.business_day", "1 to 23"),
    ({"business_day": 32}, "calendar.business_day", "less than or equal to 31"),
    ({"business_day": 6, "weekdays": ["SA"]}, "calendar.business_day", "1 to 5"),
    ({"business_day": 3, "holidays": "XX"}, "calendar.holidays", "no holiday calendar"),
    ({"business_day": 3, "holidays": "DE-ZZ"}, "calendar.holidays", "no subdivision"),
    ({"business_day": 3, "holidays": "de-be"}, "calendar.holidays", "ISO 3166"),
    ({"business_day": 3, "holidays": 49}, "calendar.holidays", "string"),
    ({"month_day": 3, "holidays": "DE"}, "calendar.holidays", "only allowed with business_day"),
    ({"business_day": 3, "month_day": 3}, "calendar.business_day", "not month_day and business_day"),
    ({"business_day": "3"}, "calendar.business_day", "integer"),
])
def test_invalid_business_day_rules_name_the_field(calendar, field, words):
    with pytest.raises(InvalidRecurrence) as raised:
        parse_rule({"calendar": {"frequency": "monthly", "times": ["09:00"], **calendar}, "timezone": "Europe/Berlin"})
    assert raised.value.field == field
    assert words in raised.value.reason


@pytest.mark.parametrize("frequency", ["daily", "weekly", "yearly"])
def test_business_day_is_monthly_only(frequency):
    extra = {"month": 1} if frequency == "yearly" else {}
    with pytest.raises(InvalidRecurrence) as raised:
        parse_rule({"calendar": {"frequency": frequency, "business_day": 1, "times": ["09:00"], **extra},
                    "timezone": "Europe/Berlin"})
    assert raised.value.field == "calendar.business_day"


def test_backlog_count_and_latest_agree_with_iteration():
    compiled = parse_rule(rule(-2, holidays_code="GB", times=("09:00", "17:30"), zone="Europe/London"))
    first, last = at("2026-01-01T00:00:00"), at("2029-01-01T00:00:00")
    listed = [o for o in compiled.occurrences_after(first - timedelta(microseconds=1)) if o.at <= last]
    assert compiled.count_between(first, last) == (len(listed), True)
    assert compiled.latest_at_or_before(last) == listed[-1]


# ------------------------------------------------------------------------------- oracle


def oracle(business_day: int, code: str | None, week: list[str], times: list[str], zone_name: str,
           after: datetime, count: int) -> list[datetime]:
    """The next ``count`` instants by a day-by-day walk of each month from ``after``'s."""
    zone = ZoneInfo(zone_name)
    weekdays = {CODE_ORDER.index(w) for w in week}
    local_after = after.astimezone(zone)
    year, month = local_after.year, local_after.month - 1
    if month == 0:
        year, month = year - 1, 12
    out: list[datetime] = []
    while len(out) < count:
        calendar = (holidays.country_holidays(code.split("-")[0], subdiv=(code.split("-") + [None])[1], years=year)
                    if code else {})
        day, open_days = date(year, month, 1), []
        while day.month == month:
            if day.weekday() in weekdays and day not in calendar:
                open_days.append(day)
            day += timedelta(days=1)
        if open_days:
            n = len(open_days)
            chosen = open_days[min(business_day, n) - 1] if business_day > 0 else open_days[max(business_day, -n)]
            for hhmm in sorted(times):
                wall = datetime.combine(chosen, time.fromisoformat(hhmm))
                first = wall.replace(tzinfo=zone)
                if first.utcoffset() < first.replace(fold=1).utcoffset():  # a gap: shift by its length
                    instant = (wall - first.utcoffset()).replace(tzinfo=UTC)
                else:
                    instant = first.astimezone(UTC)
                if instant > after:
                    out.append(instant)
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return sorted(out)[:count]


PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(
    business_day=st.integers(-23, 23).filter(bool),
    code=st.sampled_from(CODES),
    week=st.sampled_from([["MO", "TU", "WE", "TH", "FR"], ["SU", "MO", "TU", "WE", "TH"], ["MO", "WE", "FR"],
                          ["SA", "SU"], ["MO", "TU", "WE", "TH", "FR", "SA"]]),
    times=st.lists(st.sampled_from(["00:00", "01:30", "02:30", "09:00", "17:45", "23:59"]), min_size=1, max_size=3,
                   unique=True),
    zone=st.sampled_from(ZONES),
    after=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2031, 12, 31)).map(
        lambda d: d.replace(tzinfo=UTC)),
)
def test_business_days_match_a_day_by_day_walk(business_day, code, week, times, zone, after):
    most = 4 * len(week) + min(3, len(week))
    business_day = max(-most, min(most, business_day))
    compiled = rule(business_day, holidays_code=code, times=tuple(times), zone=zone, weekdays=week)
    got = [o.at for o in next_occurrences(compiled, after, 6)]
    assert got == oracle(business_day, code, week, times, zone, after, 6)
