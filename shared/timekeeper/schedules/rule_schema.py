"""The recurrence rule's schema as the OpenAPI document publishes it: the schema generated
from the rule models (:func:`timekeeper.schedules.recurrence.rule_json_schema`) with the
constraints the parser checks and JSON Schema can say added, so that a client generated
from the document sends rules the parser accepts:

* every ``timezone`` is an enum of :func:`timekeeper.schedules.zones.canonical_zones`;
* ``calendar`` is one form per frequency, each with exactly the fields that frequency
  takes: ``daily`` (times only), ``weekly`` (``weekdays``), ``monthly`` (``month_day``,
  ``nth_weekday`` or ``business_day`` with its business week ``weekdays`` and ``holidays``,
  one of the three, required) and ``yearly`` (``month`` and one of
  ``month_day`` / ``nth_weekday``);
* an interval's ``interval`` is one form each for ``minutes`` and ``hours``;
* the wall-time forms' ``dst`` is one named object, ``DstChoice``.

What JSON Schema cannot say stays with :func:`~timekeeper.schedules.recurrence.parse_rule`
(a documented 422 naming the field): the cron grammar and a cron that never fires, a rule
with no occurrence within ten years, a yearly ``month_day`` beyond its month's length, a
``business_day`` beyond the business week's most business days in a month, and an unknown
holiday calendar.
"""

from __future__ import annotations

import copy
from typing import Any

from timekeeper.schedules.recurrence import rule_json_schema
from timekeeper.schedules.zones import zone_json_schema

#: The calendar fields each form takes besides frequency, interval, start_date and times,
#: and which of them it requires: (title, frequency, fields, required).
_CALENDAR_FORMS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("DailyCalendar", "daily", (), ()),
    ("WeeklyCalendar", "weekly", ("weekdays",), ()),
    ("MonthlyCalendarByDay", "monthly", ("month_day",), ("month_day",)),
    ("MonthlyCalendarByWeekday", "monthly", ("nth_weekday",), ("nth_weekday",)),
    ("MonthlyCalendarByBusinessDay", "monthly", ("business_day", "weekdays", "holidays"), ("business_day",)),
    ("YearlyCalendarByDay", "yearly", ("month", "month_day"), ("month", "month_day")),
    ("YearlyCalendarByWeekday", "yearly", ("month", "nth_weekday"), ("month", "nth_weekday")),
)
_COMMON = ("frequency", "interval", "start_date", "times")


def published_rule_schema() -> dict[str, Any]:
    """The rule's JSON schema for the OpenAPI document (``oneOf`` CronRule, CalendarRule,
    IntervalRule, self-contained), tightened as this module's docstring says."""
    schema = copy.deepcopy(rule_json_schema())
    for form in schema["oneOf"]:
        if "timezone" in form["properties"]:
            described = form["properties"]["timezone"].get("description")
            form["properties"]["timezone"] = dict(zone_json_schema(), **({"description": described}
                                                                         if described else {}))
        if "calendar" in form["properties"]:
            form["properties"]["calendar"] = _calendar_forms(form["properties"]["calendar"])
        if "dst" in form["properties"]:  # one named model of the choice for the three wall-time forms
            form["properties"]["dst"] = {"title": "DstChoice", **form["properties"]["dst"]}
        if form.get("title") == "IntervalRule":
            form["properties"]["interval"] = _interval_forms(form["properties"]["interval"])
    return schema


def _interval_forms(interval: dict[str, Any]) -> dict[str, Any]:
    """An interval is minutes or hours, exactly one: one whole form each (a client
    generated from the document has a model per form, with its field)."""
    return {"oneOf": [{"title": f"Interval{name.title()}", "type": "object", "additionalProperties": False,
                       "properties": {name: interval["properties"][name]}, "required": [name]}
                      for name in ("minutes", "hours")],
            "description": interval.get("description", "the period: minutes or hours, exactly one")}


def _calendar_forms(calendar: dict[str, Any]) -> dict[str, Any]:
    properties = calendar["properties"]
    forms = []
    for title, frequency, fields, required in _CALENDAR_FORMS:
        props = {name: properties[name] for name in (*_COMMON, *fields)}
        props["frequency"] = {"type": "string", "const": frequency}
        forms.append({"title": title, "type": "object", "additionalProperties": False, "properties": props,
                      "required": ["frequency", "times", *required]})
    return {"oneOf": forms, "description": "the calendar: one form per frequency"}
