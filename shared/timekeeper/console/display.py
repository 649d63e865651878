"""How the console shows the API's values to people: instants in the workspace's zone with
UTC beside them, occurrences with their DST marks, and rules in one line."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def when(instant: str | None, zone: str) -> dict[str, str] | None:
    """An API instant (ISO 8601 UTC) shown for people: ``local`` in ``zone`` with its
    abbreviation, and ``utc`` beside it. None for None."""
    if not instant:
        return None
    at = datetime.fromisoformat(instant.replace("Z", "+00:00"))
    local = at.astimezone(ZoneInfo(zone))
    return {"local": local.strftime("%Y-%m-%d %H:%M %Z"), "utc": at.strftime("%Y-%m-%d %H:%M UTC"),
            "iso": at.isoformat()}


def zone_of(body: Any) -> str:
    """The workspace's IANA zone an API page names (its ``timezone``), ``"UTC"`` when it
    names none or one this machine's zone database does not know."""
    zone = body.get("timezone") if isinstance(body, dict) else None
    if not isinstance(zone, str) or not zone:
        return "UTC"
    try:
        ZoneInfo(zone)
    except (ValueError, ZoneInfoNotFoundError):
        return "UTC"
    return zone


def zone_enum(document: Any) -> list[str]:
    """The zones the API's OpenAPI ``document`` lets a rule name: its ``TimeZone``
    component's enum (the one list every rule's ``timezone`` refers to), sorted; empty
    when the document has none."""
    try:
        names = document["components"]["schemas"]["TimeZone"]["enum"]
    except (KeyError, TypeError):
        return []
    return sorted(name for name in names if isinstance(name, str)) if isinstance(names, list) else []


@cache
def _place_zones() -> frozenset[str]:
    """The zones of the pinned ``tzdata`` package's ``zone.tab`` (one per country's place,
    ``"Europe/Berlin"``, ``"Asia/Kolkata"``), plus ``"UTC"``: the names without the
    backward-compatible aliases (``"Asia/Calcutta"``, ``"US/Eastern"``). Empty when the
    package has no such file."""
    try:
        text = resources.files("tzdata.zoneinfo").joinpath("zone.tab").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        return frozenset()
    names = {line.split("\t")[2] for line in text.splitlines() if line and not line.startswith("#")
             and line.count("\t") >= 2}
    return frozenset({*names, "UTC"})


def offered_zones(zones: list[str]) -> list[str]:
    """The zones a zone picker offers out of ``zones`` (the API's enum, sorted): only the
    places' own names, not the aliases the API still accepts for rules written with
    them (a page adds a rule's current zone itself). ``zones`` unchanged when the
    places' list is not known."""
    places = _place_zones()
    return [z for z in zones if z in places] if places else list(zones)


def occurrence_rows(occurrences: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The API's next occurrences for a page: each with its local wall time (with the zone's
    abbreviation), its UTC instant, and its DST markers (``shifted``, ``repeated``); with a
    flexible window, ``given`` (the instant a saved schedule's run is given) or
    ``window_end`` (an unsaved rule's: the run is due before it), shown as :func:`when`."""
    rows = []
    for o in occurrences:
        local = datetime.fromisoformat(o["local"]).astimezone(ZoneInfo(o["timezone"]))
        at = datetime.fromisoformat(o["at"].replace("Z", "+00:00"))
        rows.append({**o, "when": {"local": local.strftime("%Y-%m-%d %H:%M %Z"),
                                   "utc": at.strftime("%Y-%m-%d %H:%M UTC"), "iso": at.isoformat()},
                     "given": when(o.get("due_at"), o["timezone"]),
                     "window_end": when(o.get("window_end"), o["timezone"])})
    return rows


def change_day_rows(days: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The API's ``change_days`` of a rule preview for a page: each day as given, its
    occurrences as :func:`occurrence_rows` (``rows``)."""
    return [{**d, "rows": occurrence_rows(d.get("occurrences") or [])} for d in days]


def rule_code(recurrence: dict[str, Any]) -> str | None:
    """The expression a rule was written in, shown beside its words: ``cron 30 2 * * *``,
    ``RRULE FREQ=... from <start>``; None for a calendar or interval rule (its words say
    all of it)."""
    if "cron" in recurrence or "rrule" in recurrence:
        return rule_text(recurrence)
    return None


def rule_text(recurrence: dict[str, Any]) -> str:
    """A schedule's rule as one line (``cron 30 2 * * *``, ``every 15 minutes``,
    ``daily at 09:00, 18:00``), without its zone (shown beside it)."""
    if "cron" in recurrence:
        return f"cron {recurrence['cron']}"
    if "rrule" in recurrence:
        return f"RRULE {recurrence['rrule']} from {recurrence.get('start', '?')}"
    if "interval" in recurrence:
        ((unit, amount),) = recurrence["interval"].items()
        return f"every {amount} {unit if amount != 1 else unit.rstrip('s')}"
    cal = recurrence.get("calendar") or {}
    parts = [cal.get("frequency", "")]
    if cal.get("interval", 1) != 1:
        parts.append(f"(every {cal['interval']})")
    if cal.get("weekdays"):
        parts.append("on " + ", ".join(cal["weekdays"]))
    if cal.get("month_day") == "last":
        parts.append("on the last day")
    elif cal.get("month_day"):
        parts.append(f"on day {cal['month_day']}")
    if cal.get("nth_weekday"):
        n, day = cal["nth_weekday"]
        parts.append(f"on the {'last' if n == -1 else f'#{n}'} {day}")
    if cal.get("month"):
        parts.append(f"in month {cal['month']}")
    parts.append("at " + ", ".join(cal.get("times", [])))
    return " ".join(parts)


def changed_fields(detail: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A history event's changed fields (``{"changes": {field: {"from", "to"}}}``) as
    ``[{"field", "from", "to"}]``, sorted by field; empty for any other detail."""
    changes = (detail or {}).get("changes") if isinstance(detail, dict) else None
    if not isinstance(changes, dict):
        return []
    return [{"field": name, "from": (change or {}).get("from") if isinstance(change, dict) else None,
             "to": (change or {}).get("to") if isinstance(change, dict) else change}
            for name, change in sorted(changes.items())]
