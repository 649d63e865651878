"""Compile a rule dict (or its JSON text) into a :class:`Recurrence`, cached by its text."""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from itertools import islice
from typing import Any

from pydantic import (
    ValidationError,
)

from timekeeper.schedules.recurrence.base import InvalidRecurrence, Occurrence, Recurrence
from timekeeper.schedules.recurrence.calendars import _CalendarRecurrence
from timekeeper.schedules.recurrence.cron import _CronRecurrence
from timekeeper.schedules.recurrence.interval import _IntervalRecurrence
from timekeeper.schedules.recurrence.rrule import rrule_rule
from timekeeper.schedules.recurrence.schema import _check_zone, _RuleModel, _translate, dst_choice


def _compile(rule: Any) -> Recurrence:
    if not isinstance(rule, dict):
        raise InvalidRecurrence("rule", "must be a JSON object")
    try:
        model = _RuleModel.model_validate(rule)
    except ValidationError as error:
        raise _translate(error) from None
    forms = [name for name in ("cron", "calendar", "interval", "rrule") if getattr(model, name) is not None]
    if len(forms) != 1:
        given = " and ".join(forms) if forms else "none"
        raise InvalidRecurrence(
            "rule", f'exactly one of "cron", "calendar", "interval" or "rrule" is required (got {given})')
    for name in ("start", "exdate"):
        if getattr(model, name) is not None and forms[0] != "rrule":
            raise InvalidRecurrence(name, "only allowed with an rrule rule")
    dst = dst_choice(model)
    compiled = _compile_form(model, forms[0], dst)
    if dst is not None:
        compiled._normalised["dst"] = {"gap": dst[0], "overlap": dst[1]}
    if model.window_minutes is not None:
        if forms[0] == "interval":
            raise InvalidRecurrence("window_minutes", "only allowed with a cron, calendar or rrule rule (an interval "
                                                      "rule's runs are spread by its anchor: choose another anchor)")
        compiled._normalised["window_minutes"] = model.window_minutes
    return compiled


def _compile_form(model: _RuleModel, form: str, dst: tuple[str, str] | None) -> Recurrence:
    if form == "interval":
        if model.dst is not None:
            raise InvalidRecurrence("dst", "only allowed with a cron, calendar or rrule rule (an interval rule "
                                           "runs in absolute time: a DST change does not touch it)")
        if model.anchor is None:
            raise InvalidRecurrence("anchor", "required for an interval rule")
        zone = _check_zone(model.timezone) if model.timezone is not None else None
        return _IntervalRecurrence(model.interval, model.anchor, zone)
    if model.anchor is not None:
        raise InvalidRecurrence("anchor", "only allowed with an interval rule")
    if model.timezone is None:
        raise InvalidRecurrence("timezone", f"required for a {form} rule")
    zone = _check_zone(model.timezone)
    if model.cron is not None:
        return _CronRecurrence(model.cron, zone, dst)
    if model.rrule is not None:
        return rrule_rule(model, zone)
    return _CalendarRecurrence(model.calendar, zone, dst)


#: Compiled rules a process keeps, by rule text (least recently used dropped first). A warm
#: dispatcher meets each minute's due rules again in the passes that follow, so the cache
#: holds a minute's distinct rules of a busy pipeline: compiling one costs about 80 us of
#: Python, keeping it about 1.1 KiB (36 MB when full, of the dispatcher's 512 MB). A cache
#: smaller than the rules a minute meets would miss every time (the passes read them in the
#: same order), which is why it is not the 4,096 of the other caches.
COMPILED_RULES_KEPT = 32_768


@lru_cache(maxsize=COMPILED_RULES_KEPT)
def _compile_cached(raw: str) -> Recurrence:
    return _compile(json.loads(raw))


# ------------------------------------------------------------------------- public API


def parse_rule(rule: dict[str, Any]) -> Recurrence:
    """Validate and compile a rule dict (one of the four forms) into a :class:`Recurrence`.

    Compiled rules are immutable and cached by the rule's JSON text, so calling this for
    every evaluation is cheap. Raises :class:`InvalidRecurrence` (a ``ValueError``) naming
    the offending field for any invalid input: unknown keys, wrong types, unknown
    timezone, interval < 1, month_day outside 1-31, bad weekday codes, empty or malformed
    times, both or neither rule forms, cron syntax errors, a cron that never matches.
    """
    try:
        raw = json.dumps(rule, sort_keys=True)
    except (TypeError, ValueError):
        return _compile(rule)  # not JSON-ready: compile uncached (it will explain why)
    return _compile_cached(raw)


def parse_rule_text(text: str) -> Recurrence:
    """Compile a rule stored as JSON text (e.g. a ``jsonb`` column read as text), decoding
    it once; compiled rules are cached by the text. Raises :class:`InvalidRecurrence`
    naming the field for an invalid rule or text that is not JSON (``"rule"``)."""
    try:
        return _compile_cached(text)
    except (json.JSONDecodeError, RecursionError):
        raise InvalidRecurrence("rule", "is not valid JSON") from None


def next_occurrences(rule: dict[str, Any], after: datetime, count: int) -> list[Occurrence]:
    """The next ``count`` occurrences of ``rule`` strictly after the instant ``after``.

    ``rule`` is the JSON-ready dict the API takes; ``after`` must be aware (naive raises
    ``ValueError``); the result is strictly increasing in ``Occurrence.at`` (aware UTC)
    and shorter than ``count`` only if the rule runs out (past year 9999). Raises
    :class:`InvalidRecurrence` for an invalid rule and ``ValueError`` for a negative count.
    """
    if count < 0:
        raise ValueError("count must be >= 0")
    return list(islice(parse_rule(rule).occurrences_after(after), count))
