"""A rule in words (English): what an owner reads beside the rule and its next occurrences.

Cron rules are put in words by the ``cron-descriptor`` library (24-hour clock, every
field named: ``"At 02:30, every day"``); the calendar, interval and rrule forms by this
module. Every description ends with the zone the rule is evaluated in and, for a
business-day rule, its holiday calendar:
``"At 09:00 on the third business day of every month, Europe/Berlin, public holidays of Germany (Berlin)"``;
a flexible window then says it applies to every run, and a rule with its own DST choice says
that last: ``"At 02:30, every day, America/New_York, each run at some time within 30 minutes
after its scheduled time; on DST gap days at 03:00 (the gap's end)"``.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any

from cron_descriptor import CasingTypeEnum, DescriptionTypeEnum, ExpressionDescriptor, Options

from timekeeper import clock
from timekeeper.schedules.recurrence.base import _MONTH_NAMES, Recurrence
from timekeeper.schedules.recurrence.business import holiday_calendar_name
from timekeeper.schedules.recurrence.transitions import offset_changes

_DAY_NAMES = {"MO": "Monday", "TU": "Tuesday", "WE": "Wednesday", "TH": "Thursday", "FR": "Friday",
              "SA": "Saturday", "SU": "Sunday"}
_WEEK_ORDER = list(_DAY_NAMES)
_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh",
             8: "eighth", 9: "ninth", 10: "tenth"}
_UNITS = {"daily": "day", "weekly": "week", "monthly": "month", "yearly": "year"}


def describe_rule(rule: Recurrence) -> str:
    """The compiled ``rule`` in English words, ending with its zone (and holiday calendar).

    Examples: ``"At 02:30, every day, America/New_York"`` (cron),
    ``"Every 6 hours from 2027-01-01 00:00 UTC"`` (interval),
    ``"At 09:00 on the third business day of every month, Europe/Berlin, public holidays of
    Germany (Berlin)"`` (calendar). A rule with a DST choice other than the default adds
    what it does on the zone's change days (:func:`_dst_words`) at the end; a flexible window
    comes before it, worded for every run: ``", each run at some time within 30 minutes after
    its scheduled time"``. Never raises for a rule
    :func:`parse_rule` accepted.
    """
    normalised = rule.rule
    dst = normalised.pop("dst", None)
    window = normalised.pop("window_minutes", None)
    text = _rule_words(normalised)
    if window:
        text += f", each run at some time within {window} minute{'s' if window != 1 else ''} after its scheduled time"
    if dst:
        text += _dst_words(dst, normalised["timezone"])
    return text


def _rule_words(normalised: dict[str, Any]) -> str:
    if "cron" in normalised:
        return f"{_cron_words(normalised['cron'])}, {normalised['timezone']}"
    if "interval" in normalised:
        return _interval_words(normalised)
    if "calendar" in normalised:
        calendar = normalised["calendar"]
        text = f"{_calendar_words(calendar)}, {normalised['timezone']}"
        if calendar.get("holidays"):
            text += f", {holiday_calendar_name(calendar['holidays'])}"
        return text
    return f"{_rrule_words(normalised)}, {normalised['timezone']}"


def _dst_words(dst: dict[str, str], zone_name: str) -> str:
    """The DST choice in words: ``"; on DST gap days at 03:00 (the gap's end)"`` (the
    wall time the zone's next spring-forward gap ends at, within two years of now),
    ``"; on DST gap days a time the clock skips does not run (recorded as skipped)"``,
    ``"; when the clock falls back, a repeated time runs at its second instant"``."""
    parts = []
    if dst["gap"] == "end":
        resume = _next_gap_end(zone_name)
        parts.append(f"on DST gap days at {resume} (the gap's end)" if resume
                     else "on DST gap days at the gap's end")
    elif dst["gap"] == "skip":
        parts.append("on DST gap days a time the clock skips does not run (recorded as skipped)")
    if dst["overlap"] == "second":
        parts.append("when the clock falls back, a repeated time runs at its second instant")
    elif dst["overlap"] == "both":
        parts.append("when the clock falls back, a repeated time runs at both instants")
    return "".join(f"; {part}" for part in parts)


def _next_gap_end(zone_name: str) -> str | None:
    """The local wall time ``HH:MM`` the zone's next spring-forward gap ends at (within two
    years of now), or None when it has none."""
    return _gap_end_after(zone_name, clock.now().date())


@lru_cache(maxsize=1024)
def _gap_end_after(zone_name: str, day: date) -> str | None:
    """:func:`_next_gap_end` from the start of the UTC date ``day`` (cached: a list of
    schedules says it once per zone and day)."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    for change in offset_changes(zone_name, start, start + timedelta(days=731)):
        if change.gap:
            return change.wall_to.strftime("%H:%M")
    return None


def _cron_words(expression: str) -> str:
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = True
    options.casing_type = CasingTypeEnum.Sentence
    try:
        text = ExpressionDescriptor(expression, options).get_description(DescriptionTypeEnum.FULL)
    except Exception:  # noqa: BLE001 - a form the library does not know: the expression itself
        return f"On the cron schedule {expression!r}"
    if text.startswith("Every "):
        # A step ("Every 15 minutes") already says how often: the library's verbose
        # "every hour" / "every day" after it add nothing ("Every 15 minutes, Monday through Friday").
        parts = text.split(", ")
        text = ", ".join([parts[0], *(p for p in parts[1:] if p not in ("every hour", "every day"))])
    return text


def _ordinal(n: int) -> str:
    if n == -1:
        return "last"
    if n < 0:
        return f"{_ordinal(-n)} last" if -n in _ORDINALS else f"{-n}th last"
    if n in _ORDINALS:
        return _ORDINALS[n]
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _join(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _days(codes: list[str]) -> str:
    """Weekdays in words: a run of three or more (also across the week's end) as ``"Sunday to Thursday"``."""
    indexes = sorted({_WEEK_ORDER.index(c) for c in codes})
    if 2 < len(indexes) < 7:
        for first in indexes:
            run = [(first + k) % 7 for k in range(len(indexes))]
            if sorted(run) == indexes:
                return f"{_DAY_NAMES[_WEEK_ORDER[run[0]]]} to {_DAY_NAMES[_WEEK_ORDER[run[-1]]]}"
    return _join([_DAY_NAMES[_WEEK_ORDER[i]] for i in indexes])


def _at(times: list[str]) -> str:
    if len(times) > 6:
        return f"At {len(times)} times a day ({times[0]} to {times[-1]})"
    return f"At {_join(times)}"


def _every(unit: str, interval: int, start: str | None) -> str:
    if interval == 1:
        return f"every {unit}"
    return f"every {interval} {unit}s from {start}" if start else f"every {interval} {unit}s"


def _calendar_words(cal: dict[str, Any]) -> str:
    freq = cal["frequency"]
    interval = cal.get("interval", 1)
    start = cal.get("start_date") if interval > 1 else None
    every = _every(_UNITS[freq], interval, start)
    at = _at(cal["times"])
    if freq == "daily":
        return f"{at} {every}"
    if freq == "weekly":
        return f"{at} on {_days(cal['weekdays'])} {every}"
    if "business_day" in cal:
        words = f"{at} on the {_ordinal(cal['business_day'])} business day of {every}"
        if cal.get("weekdays") and cal["weekdays"] != ["MO", "TU", "WE", "TH", "FR"]:
            words += f" (business days {_days(cal['weekdays'])})"
        return words
    if "nth_weekday" in cal:
        n, code = cal["nth_weekday"]
        day = f"the {_ordinal(n)} {_DAY_NAMES[code]}"
    elif cal.get("month_day") == "last":
        day = "the last day"
    else:
        day = f"day {cal['month_day']}"
    if freq == "monthly":
        return f"{at} on {day} of {every}"
    month = _MONTH_NAMES[cal["month"]]
    if "nth_weekday" in cal or cal.get("month_day") == "last":
        return f"{at} on {day} of {month} {every}"
    return f"{at} on {cal['month_day']} {month} {every}"


def _interval_words(rule: dict[str, Any]) -> str:
    step = rule["interval"]
    if "hours" in step:
        amount, unit = step["hours"], "hour"
    else:
        amount, unit = step["minutes"], "minute"
    every = f"Every {unit}" if amount == 1 else f"Every {amount} {unit}s"
    anchor = rule["anchor"].replace("T", " ").replace(":00Z", " UTC").replace("Z", " UTC")
    text = f"{every} from {anchor}"
    if rule.get("timezone"):
        text += f" (local dates in {rule['timezone']})"
    return text


def _rrule_words(rule: dict[str, Any]) -> str:
    parts = dict(part.split("=", 1) for part in rule["rrule"].split(";"))
    unit = _UNITS[parts["FREQ"].lower()]
    interval = int(parts.get("INTERVAL", "1"))
    hours = [int(h) for h in parts.get("BYHOUR", "0").split(",")]
    minutes = [int(m) for m in parts.get("BYMINUTE", "0").split(",")]
    times = sorted(f"{h:02d}:{m:02d}" for h in hours for m in minutes)
    words = [_at(times)]
    if "BYDAY" in parts:
        days = parts["BYDAY"].split(",")
        plain = [d for d in days if d in _DAY_NAMES]
        ordinal = [(int(d[:-2]), d[-2:]) for d in days if d not in _DAY_NAMES]
        if plain:
            if "BYSETPOS" in parts:
                positions = [_ordinal(int(p)) for p in parts["BYSETPOS"].split(",")]
                words.append(f"on the {_join(positions)} of the days {_days(plain)}")
            else:
                words.append(f"on {_days(plain)}")
        if ordinal:
            words.append("on the " + _join([f"{_ordinal(n)} {_DAY_NAMES[c]}" for n, c in ordinal]))
    elif "BYSETPOS" in parts:
        words.append(f"on the {_join([_ordinal(int(p)) for p in parts['BYSETPOS'].split(',')])} of the dates")
    if "BYMONTHDAY" in parts:
        words.append("on day " + _join([_month_day(int(d)) for d in parts["BYMONTHDAY"].split(",")]))
    if "BYYEARDAY" in parts:
        words.append("on day " + _join(parts["BYYEARDAY"].split(",")) + " of the year")
    if "BYWEEKNO" in parts:
        words.append("in ISO week " + _join(parts["BYWEEKNO"].split(",")))
    if "BYMONTH" in parts:
        words.append("in " + _join([_MONTH_NAMES[int(m)] for m in parts["BYMONTH"].split(",")]))
    words.append(f"{_every(unit, interval, None)} from {rule['start']}")
    if "COUNT" in parts:
        words.append(f"({parts['COUNT']} times)")
    if "UNTIL" in parts:
        words.append(f"until {parts['UNTIL']}")
    if rule.get("exdate"):
        count = len(rule["exdate"])
        words.append(f"except {count} excluded date{'s' if count > 1 else ''}")
    return " ".join(words)


def _month_day(day: int) -> str:
    return f"the {_ordinal(day)}" if day < 0 else str(day)
