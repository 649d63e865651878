"""The pydantic schema rules are validated with, its published JSON schema and the
translation of validation errors into :class:`InvalidRecurrence` naming the field."""

from __future__ import annotations

import re
from datetime import date, time
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from timekeeper.schedules.recurrence.base import (
    _TIMES,
    _WEEKDAY_CODES,
    DEFAULT_DST,
    MAX_CALENDAR_INTERVAL,
    InvalidRecurrence,
)
from timekeeper.schedules.zones import is_canonical_zone
from timekeeper.strict_input import JSON_INTEGER

# ------------------------------------------------------------------------- validation

_WeekdayCode = Literal["MO", "TU", "WE", "TH", "FR", "SA", "SU"]
_HHMM = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _parse_hhmm(value: str) -> time:
    match = _HHMM.fullmatch(value)
    if match is None:
        raise ValueError("must be a 24-hour time 'HH:MM' (00:00-23:59)")
    return _TIMES[int(match[1]) * 60 + int(match[2])]


def _parse_date(value: str) -> date:
    try:
        if _ISO_DATE.fullmatch(value) is None:
            raise ValueError
        return date.fromisoformat(value)
    except ValueError:
        raise ValueError("must be a date 'YYYY-MM-DD'") from None


_WEEKDAY_SCHEMA = {"type": "string", "enum": list(_WEEKDAY_CODES)}
_ZONE_SCHEMA = {"type": "string", "minLength": 1, "description": "an IANA timezone",
                "examples": ["America/New_York", "Europe/London", "Asia/Kolkata"]}
#: A timezone field: its name is checked against the IANA database by :func:`_check_zone`.
_Zone = Annotated[StrictStr, WithJsonSchema(_ZONE_SCHEMA)]


class _CalendarModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, title="Calendar")

    frequency: Literal["daily", "weekly", "monthly", "yearly"]
    interval: Annotated[int, Field(ge=1, le=MAX_CALENDAR_INTERVAL), JSON_INTEGER] = Field(1,
                                description="every Nth day, week, month or year from start_date")
    start_date: Annotated[StrictStr, AfterValidator(_parse_date),
                          WithJsonSchema({"type": "string", "format": "date"})] | None = Field(
        None, description="the first local date the rule may select (default 2000-01-01)")
    weekdays: list[_WeekdayCode] | None = Field(None, min_length=1,
                                                description="weekly: the days (default: start_date's)")
    month_day: Annotated[Any, WithJsonSchema({"oneOf": [{"type": "integer", "minimum": 1, "maximum": 31},
                                                        {"type": "string", "const": "last"}]})] = Field(
        None, description="monthly/yearly: the day (clamped to shorter months) or last")
    nth_weekday: Annotated[Any, WithJsonSchema({
        "type": "array", "minItems": 2, "maxItems": 2,
        "prefixItems": [{"type": "integer", "enum": [1, 2, 3, 4, 5, -1]}, _WEEKDAY_SCHEMA]})] = Field(
        None, description="monthly/yearly: [n, weekday], n = -1 for the last")
    month: Annotated[int, Field(ge=1, le=12), JSON_INTEGER] | None = Field(None, description="yearly: the month")
    business_day: Annotated[int, Field(ge=-31, le=31), JSON_INTEGER,
                            WithJsonSchema({"type": "integer", "minimum": -31, "maximum": 31,
                                            "not": {"const": 0}})] | None = Field(
        None, description="monthly: the Nth business day from the month's start (1, 2, ...) or end (-1 the last); "
                          "business days are the weekdays of the business week (weekdays, default MO-FR) "
                          "that are not public holidays")
    holidays: Annotated[StrictStr, WithJsonSchema({"type": "string",
                                                    "pattern": "^[A-Z]{2}(-[A-Z0-9]{1,4})?$"})] | None = Field(
        None, description="with business_day: the public holiday calendar, an ISO 3166 country code with an "
                          "optional subdivision", examples=["DE", "DE-BE", "US-NY"])
    times: list[Annotated[StrictStr, AfterValidator(_parse_hhmm),
                          WithJsonSchema({"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"})]] = Field(
        min_length=1, description="local times of day, HH:MM")

    @field_validator("month_day", mode="plain")
    @classmethod
    def _check_month_day(cls, value: Any) -> int | str | None:
        if value is None or value == "last":
            return value
        if type(value) is int and 1 <= value <= 31:
            return value
        raise ValueError('must be an integer 1-31 or "last"')

    @field_validator("nth_weekday", mode="plain")
    @classmethod
    def _check_nth_weekday(cls, value: Any) -> tuple[int, str] | None:
        if value is None:
            return None
        if (isinstance(value, list | tuple) and len(value) == 2 and type(value[0]) is int
                and value[0] in (1, 2, 3, 4, 5, -1) and value[1] in _WEEKDAY_CODES):
            return (value[0], value[1])
        raise ValueError('must be [n, "MO".."SU"] with n in 1..5 or -1 (last)')


class DstChoice(BaseModel):
    """What a wall-time rule does on the days its zone changes its UTC offset."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="DstChoice")

    gap: Literal["shift", "end", "skip"] = Field(
        "shift", description="a local time the clock skips when it springs forward: shift (run shifted by the "
                             "gap's length), end (run at the gap's end, the first instant after it) or skip (no run "
                             "that day; recorded as a skipped run, outcome skipped_dst_gap)")
    overlap: Literal["first", "second", "both"] = Field(
        "first", description="a fixed local time the clock shows twice when it falls back: run at the first "
                             "instant, the second, or both (two runs, one per instant); a rule with a time in "
                             "every hour of the day always runs at each real instant")


_DST_FIELD = Field(None, description="the DST choice (default: gap shift, overlap first)")

#: The longest flexible window, in minutes (EventBridge Scheduler's ``FlexibleTimeWindow`` bound).
MAX_WINDOW_MINUTES = 240
_WindowMinutes = Annotated[int, Field(ge=1, le=MAX_WINDOW_MINUTES), JSON_INTEGER]
_WINDOW_FIELD = Field(None, description="a flexible window: each run is due at a stable instant within this many "
                                        "minutes (1-240) after its occurrence, chosen per schedule and occurrence "
                                        "(cut to the time until the next occurrence)")


def dst_choice(model: Any) -> tuple[str, str] | None:
    """``(gap, overlap)`` of a validated rule model's ``dst``, or None for the default."""
    dst = model.dst
    if dst is None or (dst.gap, dst.overlap) == DEFAULT_DST:
        return None
    return dst.gap, dst.overlap


class _IntervalModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, title="Interval",
                              json_schema_extra={"oneOf": [{"required": ["minutes"]}, {"required": ["hours"]}]})

    minutes: Annotated[int, Field(ge=1, le=366 * 24 * 60), JSON_INTEGER] | None = None
    hours: Annotated[int, Field(ge=1, le=366 * 24), JSON_INTEGER] | None = None


class _RuleModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # The union of the three forms' fields (CronRule, CalendarRule, IntervalRule): one
    # pass reports unknown keys and wrong types; _compile then checks the form.
    cron: StrictStr | None = None
    calendar: _CalendarModel | None = None
    interval: _IntervalModel | None = None
    rrule: StrictStr | None = None
    anchor: StrictStr | None = None
    start: Annotated[StrictStr, AfterValidator(_parse_date)] | None = None
    exdate: list[StrictStr] | None = None
    timezone: StrictStr | None = None
    dst: DstChoice | None = None
    window_minutes: _WindowMinutes | None = None


class CronRule(BaseModel):
    """A cron rule: five POSIX cron fields evaluated in the local wall time of the zone."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="CronRule")

    cron: StrictStr = Field(description="five cron fields: minute hour day-of-month month day-of-week "
                                        "(day-of-month: L = last day, LW = last weekday, L-n = n days before the last, "
                                        "nW = the weekday nearest day n; day-of-week: d#n = the nth weekday d, "
                                        "dL = the last weekday d)",
                      examples=["30 2 * * *", "0 18 L * *", "0 9 * * 1#3", "0 18 LW * *"])
    timezone: _Zone
    dst: DstChoice | None = _DST_FIELD
    window_minutes: _WindowMinutes | None = _WINDOW_FIELD


class CalendarRule(BaseModel):
    """A calendar rule: daily, weekly, monthly or yearly local times of day in the zone."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="CalendarRule")

    calendar: _CalendarModel
    timezone: _Zone
    dst: DstChoice | None = _DST_FIELD
    window_minutes: _WindowMinutes | None = _WINDOW_FIELD


class IntervalRule(BaseModel):
    """An interval rule: a fixed step of minutes or hours in absolute time, aligned to the
    anchor instant; the zone, if given, only names the local date shown with each run."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="IntervalRule")

    interval: _IntervalModel
    anchor: StrictStr = Field(description="an instant the steps align to",
                              json_schema_extra={"format": "date-time"})
    timezone: _Zone | None = Field(None, description="an IANA timezone, for the local date shown with each run")


_EXDATE_SCHEMA = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}(T([01][0-9]|2[0-3]):[0-5][0-9])?$"}


class RRuleRule(BaseModel):
    """An RFC 5545 recurrence rule evaluated in the local wall time of the zone, from the
    local date ``start`` (its DTSTART at local midnight), without the listed dates."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="RRuleRule")

    rrule: StrictStr = Field(
        description="RFC 5545 RRULE: FREQ=DAILY|WEEKLY|MONTHLY|YEARLY, INTERVAL, COUNT or UNTIL, BYDAY "
                    "(ordinals with MONTHLY/YEARLY), BYMONTHDAY (negative from the end), BYMONTH, BYSETPOS, "
                    "BYWEEKNO (YEARLY, ISO weeks), BYYEARDAY, BYHOUR, BYMINUTE, WKST=MO",
        examples=["FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18;BYMINUTE=0"])
    timezone: _Zone
    start: Annotated[StrictStr, WithJsonSchema({"type": "string", "format": "date",
                                                "pattern": r"^(19|[2-9][0-9])[0-9]{2}-"})] = Field(
        description="the series' first local date, 1900-01-01 or later (INTERVAL and COUNT count from it)")
    exdate: list[Annotated[StrictStr, WithJsonSchema(_EXDATE_SCHEMA)]] | None = Field(
        None, description="excluded local dates 'YYYY-MM-DD' or local date-times 'YYYY-MM-DDTHH:MM'")
    dst: DstChoice | None = _DST_FIELD
    window_minutes: _WindowMinutes | None = _WINDOW_FIELD


RULE_DESCRIPTION = (
    "A recurrence rule, one of four forms: "
    '{"cron": "m h dom mon dow", "timezone": IANA zone} (POSIX cron in local wall time; '
    "L, LW, L-n, nW in day-of-month, d#n, dL in day-of-week); "
    '{"calendar": {"frequency": "daily|weekly|monthly|yearly", "interval", "start_date", "weekdays", '
    '"month_day": 1-31 | "last", "nth_weekday": [n, "MO"], "business_day": N | -N, "holidays": "DE-BE", '
    '"month", "times": ["HH:MM", ...]}, '
    '"timezone": IANA zone}; {"interval": {"minutes": N} | {"hours": N}, "anchor": RFC 3339 instant} '
    '(absolute time); {"rrule": RFC 5545 RRULE, "timezone": IANA zone, "start": "YYYY-MM-DD", '
    '"exdate": [...]} (local wall time). '
    "A local time in a spring-forward gap runs shifted by the gap and keeps its date; "
    "a fixed time in a fall-back overlap runs once, at the first instant; "
    '"dst": {"gap": "shift|end|skip", "overlap": "first|second|both"} chooses otherwise (wall-time rules). '
    '"window_minutes": N (1-240) lets each run be due any time within N minutes after its occurrence '
    "(cron, calendar and rrule rules). "
    "A rule must have an occurrence within ten years."
)
RULE_EXAMPLES = [
    {"cron": "30 2 * * *", "timezone": "America/New_York"},
    {"cron": "30 1 * * *", "timezone": "America/New_York", "dst": {"gap": "end", "overlap": "both"}},
    {"calendar": {"frequency": "monthly", "month_day": "last", "times": ["18:00"]}, "timezone": "Asia/Kolkata"},
    {"calendar": {"frequency": "monthly", "business_day": 3, "times": ["09:00"], "holidays": "DE-BE"},
     "timezone": "Europe/Berlin"},
    {"interval": {"hours": 6}, "anchor": "2027-01-01T00:00:00Z"},
    {"rrule": "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18;BYMINUTE=0", "timezone": "Europe/Berlin",
     "start": "2027-01-01"},
]


def rule_json_schema() -> dict[str, Any]:
    """The JSON schema of a rule: ``oneOf`` :class:`CronRule`, :class:`CalendarRule`,
    :class:`IntervalRule`, :class:`RRuleRule`, generated from the models the rule is validated with, made
    self-contained (no ``$ref``) and without ``null`` (a field is left out instead).
    The schema describes; :func:`parse_rule` decides (an unknown zone, a cron that never
    matches or a rule that never fires within ten years pass the schema but not the parse)."""
    forms = []
    for model in (CronRule, CalendarRule, IntervalRule, RRuleRule):
        schema = model.model_json_schema()
        forms.append(_documented(schema, schema.pop("$defs", {})))
    return {"oneOf": forms, "description": RULE_DESCRIPTION, "examples": RULE_EXAMPLES}


def _documented(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with ``$ref``s to ``defs`` inlined, ``null`` alternatives and ``null``
    defaults dropped, and field titles (pydantic's, not the models') removed."""
    if isinstance(node, list):
        return [_documented(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _documented({**defs[node["$ref"].rsplit("/", 1)[-1]], **extra}, defs)
    branches = node.get("anyOf")
    if branches is not None and {"type": "null"} in branches and len(branches) == 2:
        (kept,) = [b for b in branches if b != {"type": "null"}]
        node = {**kept, **{k: v for k, v in node.items() if k != "anyOf"}}
        if "$ref" in node:  # an optional model field: inline the model
            return _documented(node, defs)
    out = {}
    for key, value in node.items():
        if key == "default" and value is None:
            continue
        if key == "properties":
            out[key] = {name: {k: v for k, v in _documented(prop, defs).items() if k != "title"}
                        for name, prop in value.items()}
        else:
            out[key] = _documented(value, defs)
    return out


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "rule"


def _translate(error: ValidationError) -> InvalidRecurrence:
    first = error.errors(include_url=False)[0]
    reason = first["msg"]
    if first["type"] == "extra_forbidden":
        reason = "unknown field"
    elif first["type"] == "missing":
        reason = "required"
    elif first["type"] in ("model_type", "model_attributes_type", "dict_type"):
        reason = "must be a JSON object"
    elif reason.startswith("Value error, "):
        reason = reason[len("Value error, "):]
    return InvalidRecurrence(_dotted(first["loc"]), reason)


def _check_zone(name: str) -> str:
    if not is_canonical_zone(name):  # the one zone rule: timekeeper.schedules.zones
        raise InvalidRecurrence("timezone", f"unknown IANA timezone {name!r}")
    return name
