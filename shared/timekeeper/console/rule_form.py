"""The structured rule editor of a schedule's page: the form's fields, the rule they
compose and the form a saved rule fills.

The form composes exactly the rule JSON the API takes (``POST /rules/preview``,
``PATCH /schedules/{id}``): a ``calendar`` rule (daily, weekly with chosen weekdays,
monthly on a day of the month, on the Nth weekday or on the Nth business day) or an
``interval`` rule (every N minutes or hours from a local start). It checks nothing the
API checks: a value it cannot read as a number is sent as typed, so the API's 422 names
the field and says why. A calendar rule's DST choice (what a time the clock skips or
shows twice does) is two choices of the form; the default ones add nothing to the rule.
Its flexible window ("any time within N minutes") is one field; empty adds nothing.
Rules the form cannot show (cron, RRULE, yearly, every Nth day
or month, a start date, another business week) stay with the JSON editor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from timekeeper import clock

#: How often, as the form offers it: (value, words).
FREQUENCIES = (
    ("daily", "Every day"),
    ("weekly", "On chosen weekdays"),
    ("monthly_day", "Monthly, on a day of the month"),
    ("monthly_nth", "Monthly, on the Nth weekday"),
    ("monthly_business", "Monthly, on the Nth business day"),
    ("interval", "Every N minutes or hours"),
)
#: The frequencies that take times of day (a calendar rule's ``times``).
CALENDAR_FREQUENCIES = ("daily", "weekly", "monthly_day", "monthly_nth", "monthly_business")
#: The API's weekday codes with their names, Monday first.
WEEKDAYS = (("MO", "Monday"), ("TU", "Tuesday"), ("WE", "Wednesday"), ("TH", "Thursday"), ("FR", "Friday"),
            ("SA", "Saturday"), ("SU", "Sunday"))
#: The days of the month the form offers (``"last"`` the month's last day).
MONTH_DAYS = (*((str(d), str(d)) for d in range(1, 32)), ("last", "the last day"))
#: Which weekday of the month (``nth_weekday``'s n).
NTH = (("1", "first"), ("2", "second"), ("3", "third"), ("4", "fourth"), ("5", "fifth"), ("-1", "last"))
#: The units of an interval rule.
INTERVAL_UNITS = (("minutes", "minutes"), ("hours", "hours"))
#: What a time in a spring-forward gap does (the rule's ``dst.gap``), the default first.
DST_GAPS = (("shift", "Later by the gap"), ("end", "When the clock resumes"), ("skip", "Skip that day"))
#: What a fixed time in a fall-back overlap does (the rule's ``dst.overlap``), the default first.
DST_OVERLAPS = (("first", "At the first"), ("second", "At the second"), ("both", "At both"))
#: The business week a business-day rule has when it names none.
DEFAULT_BUSINESS_WEEK = ("MO", "TU", "WE", "TH", "FR")
#: The longest text any field keeps.
MAX_FIELD = 200

_INTEGER = re.compile(r"[+-]?[0-9]{1,9}")
_LOCAL_MINUTE = "%Y-%m-%dT%H:%M"
#: Which form control an API field path names (the longest prefix wins).
_CONTROLS = (
    ("recurrence.calendar.times", "rf-times"),
    ("recurrence.calendar.weekdays", "rf-weekday-MO"),
    ("recurrence.calendar.month_day", "rf-month-day"),
    ("recurrence.calendar.nth_weekday", "rf-nth"),
    ("recurrence.calendar.business_day", "rf-business-day"),
    ("recurrence.calendar.holidays", "rf-holidays"),
    ("recurrence.calendar.frequency", "rf-frequency"),
    ("recurrence.interval", "rf-interval-amount"),
    ("recurrence.anchor", "rf-start"),
    ("recurrence.timezone", "rf-timezone"),
    ("recurrence.dst.overlap", "rf-dst-overlap"),
    ("recurrence.dst", "rf-dst-gap"),
    ("recurrence.window_minutes", "rf-window"),
    ("frequency", "rf-frequency"),
)


@dataclass(frozen=True)
class RuleForm:
    """The structured editor's values, as its fields hold them (text, as typed)."""

    frequency: str = "daily"
    times: str = "09:00"
    weekdays: tuple[str, ...] = DEFAULT_BUSINESS_WEEK
    month_day: str = "1"
    nth: str = "1"
    nth_day: str = "MO"
    business_day: str = "1"
    holidays: str = ""
    interval_amount: str = "15"
    interval_unit: str = "minutes"
    start: str = ""
    timezone: str = "UTC"
    dst_gap: str = "shift"
    dst_overlap: str = "first"
    #: A flexible window in minutes as typed (empty: none).
    window_minutes: str = ""
    #: Why the schedule's saved rule is not shown in the form (None when it is).
    unsupported: str | None = field(default=None, compare=False)


class FormProblem(Exception):
    """The form's values cannot make a rule at all (a forged ``frequency``): the field and
    why, shown as the API's reasons are."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field, self.message = field_name, message


def control_for(api_field: str | None) -> str | None:
    """The id of the form control an API 422's ``field`` names (``recurrence.calendar.times[1]``
    -> ``rf-times``), or None when it names none of the form's."""
    if not api_field:
        return None
    for prefix, control in _CONTROLS:
        if api_field == prefix or api_field.startswith((prefix + ".", prefix + "[")):
            return control
    return None


def _midnight_today(zone: str) -> str:
    try:
        tz = ZoneInfo(zone)
    except (ValueError, ZoneInfoNotFoundError):
        tz = ZoneInfo("UTC")
    return clock.now().astimezone(tz).strftime("%Y-%m-%dT00:00")


def default_form(zone: str, unsupported: str | None = None) -> RuleForm:
    """The form's starting values: every day at 09:00 in ``zone`` (an interval would start
    at today's local midnight), with ``unsupported`` saying why the saved rule is not shown."""
    return RuleForm(timezone=zone, start=_midnight_today(zone), unsupported=unsupported)


def form_of(recurrence: dict[str, Any], zone: str) -> RuleForm:
    """The form showing a saved ``recurrence`` (the API's normalised rule) whose zone is
    ``zone``; when the form cannot show it, :func:`default_form` with the reason."""
    if "calendar" in recurrence:
        form = _calendar_form(recurrence["calendar"], recurrence.get("timezone") or zone)
        dst = recurrence.get("dst") or {}
        if form.unsupported is None and isinstance(dst, dict):
            form = replace(form, dst_gap=str(dst.get("gap", "shift")), dst_overlap=str(dst.get("overlap", "first")))
        if form.unsupported is None and recurrence.get("window_minutes") is not None:
            form = replace(form, window_minutes=str(recurrence["window_minutes"]))
        return form
    if "interval" in recurrence:
        return _interval_form(recurrence, recurrence.get("timezone") or zone)
    if "cron" in recurrence:
        return default_form(zone, "a cron rule")
    if "rrule" in recurrence:
        return default_form(zone, "an RRULE")
    return default_form(zone, "this kind of rule")


def _calendar_form(cal: dict[str, Any], zone: str) -> RuleForm:
    base = default_form(zone)
    frequency = cal.get("frequency")
    if frequency == "yearly":
        return replace(base, unsupported="a yearly rule")
    if cal.get("interval", 1) != 1:
        unit = {"daily": "days", "weekly": "weeks", "monthly": "months"}.get(frequency, "periods")
        return replace(base, unsupported=f"a rule for every {cal['interval']} {unit}")
    if cal.get("start_date"):
        return replace(base, unsupported="a rule with a start date")
    times = cal.get("times") or []
    if not all(isinstance(t, str) for t in times):
        return replace(base, unsupported="this rule's times")
    form = replace(base, times=", ".join(times))
    if frequency == "daily":
        return replace(form, frequency="daily")
    if frequency == "weekly":
        if not cal.get("weekdays"):
            return replace(base, unsupported="a weekly rule without its weekdays")
        return replace(form, frequency="weekly", weekdays=tuple(cal["weekdays"]))
    if frequency != "monthly":
        return replace(base, unsupported="this rule")
    if cal.get("business_day") is not None:
        if tuple(cal.get("weekdays") or DEFAULT_BUSINESS_WEEK) != DEFAULT_BUSINESS_WEEK:
            return replace(base, unsupported="a business-day rule with its own business week")
        return replace(form, frequency="monthly_business", business_day=str(cal["business_day"]),
                       holidays=cal.get("holidays") or "")
    if cal.get("nth_weekday"):
        n, day = cal["nth_weekday"]
        return replace(form, frequency="monthly_nth", nth=str(n), nth_day=str(day))
    if cal.get("month_day") is not None:
        return replace(form, frequency="monthly_day", month_day=str(cal["month_day"]))
    return replace(base, unsupported="this rule")


def _interval_form(recurrence: dict[str, Any], zone: str) -> RuleForm:
    base = default_form(zone)
    ((unit, amount),) = recurrence["interval"].items()
    try:
        anchor = datetime.fromisoformat(recurrence["anchor"].replace("Z", "+00:00")).astimezone(ZoneInfo(zone))
    except (KeyError, ValueError, ZoneInfoNotFoundError):
        return replace(base, unsupported="this interval's anchor")
    if anchor.second or anchor.microsecond:
        return replace(base, unsupported="an interval anchored at seconds")
    return replace(base, frequency="interval", interval_amount=str(amount), interval_unit=unit,
                   start=anchor.strftime(_LOCAL_MINUTE))


def read_form(fields: dict[str, str]) -> RuleForm:
    """The form's values from a posted form (each text at most :data:`MAX_FIELD` characters;
    weekdays are the checked ``weekday:XX`` boxes)."""

    def text(name: str, default: str = "") -> str:
        return (fields.get(name) or default).strip()[:MAX_FIELD]

    return RuleForm(frequency=text("frequency"), times=text("times"),
                    weekdays=tuple(code for code, _ in WEEKDAYS if fields.get(f"weekday:{code}")),
                    month_day=text("month_day"), nth=text("nth"), nth_day=text("nth_day"),
                    business_day=text("business_day"), holidays=text("holidays"),
                    interval_amount=text("interval_amount"), interval_unit=text("interval_unit"),
                    start=text("start"), timezone=text("timezone"), dst_gap=text("dst_gap", "shift"),
                    dst_overlap=text("dst_overlap", "first"), window_minutes=text("window_minutes"))


def _number(value: str) -> int | str:
    """An integer when ``value`` is written as one, else the text as typed (the API names
    the field and says it wants a number)."""
    return int(value) if _INTEGER.fullmatch(value) else value


def _anchor(start: str, zone: str) -> str:
    """The local start ``YYYY-MM-DDTHH:MM`` (or with seconds) in ``zone`` as the UTC instant the API takes
    (``2027-03-01T07:00:00Z``; a time in a spring-forward gap takes the offset before it,
    as the engine does); text that is no local time is sent as typed, and with a zone this
    machine does not know the time is sent as UTC (the API names the zone)."""
    for written in (_LOCAL_MINUTE, _LOCAL_MINUTE + ":%S"):
        try:
            local = datetime.strptime(start, written)
            break
        except ValueError:
            continue
    else:
        return start
    try:
        at = local.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
    except (ValueError, ZoneInfoNotFoundError, OverflowError):
        at = local.replace(tzinfo=UTC)
    return at.isoformat().replace("+00:00", "Z")


def compose(form: RuleForm) -> dict[str, Any]:
    """The rule JSON the API takes for ``form``. Raises :class:`FormProblem` for a
    frequency the form does not offer (only a forged form sends one)."""
    if form.frequency == "interval":
        unit = form.interval_unit if form.interval_unit in dict(INTERVAL_UNITS) else "minutes"
        return {"interval": {unit: _number(form.interval_amount)}, "anchor": _anchor(form.start, form.timezone),
                "timezone": form.timezone}
    times = [t for t in re.split(r"[,\s]+", form.times) if t]
    if form.frequency == "daily":
        calendar: dict[str, Any] = {"frequency": "daily"}
    elif form.frequency == "weekly":
        calendar = {"frequency": "weekly", "weekdays": list(form.weekdays)}
    elif form.frequency == "monthly_day":
        calendar = {"frequency": "monthly", "month_day": "last" if form.month_day == "last"
                    else _number(form.month_day)}
    elif form.frequency == "monthly_nth":
        calendar = {"frequency": "monthly", "nth_weekday": [_number(form.nth), form.nth_day]}
    elif form.frequency == "monthly_business":
        calendar = {"frequency": "monthly", "business_day": _number(form.business_day)}
        if form.holidays:
            calendar["holidays"] = form.holidays
    else:
        raise FormProblem("frequency", "choose how often the schedule runs")
    rule: dict[str, Any] = {"calendar": {**calendar, "times": times}, "timezone": form.timezone}
    # A choice the form does not offer (a forged one) is sent as chosen: the API's 422 names it.
    dst = {name: value for name, value, default in (("gap", form.dst_gap, "shift"),
                                                    ("overlap", form.dst_overlap, "first")) if value != default}
    if dst:
        rule["dst"] = dst
    if form.window_minutes.strip():
        rule["window_minutes"] = _number(form.window_minutes)
    return rule
