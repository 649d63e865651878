"""The rule preview's DST change days: the zone's spring-forward and fall-back days within
the coming year, each with what the rule's DST choice makes of it, checked against offset
changes and instants computed here with plain zoneinfo arithmetic."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from tests.api.conftest import NOW, Caller, new_schedule

NY, LORD_HOWE = "America/New_York", "Australia/Lord_Howe"


def _changes(zone_name: str) -> list[tuple[date, str, datetime]]:
    """``(local date, kind, instant)`` of each offset change in the year after NOW, found
    minute by minute inside each hour whose offset differs from the previous hour's."""
    zone = ZoneInfo(zone_name)
    out = []
    at = NOW.replace(minute=0, second=0)
    for _ in range(366 * 24):
        following = at + timedelta(hours=1)
        before, after = at.astimezone(zone).utcoffset(), following.astimezone(zone).utcoffset()
        if before != after:
            minute = next(at + timedelta(minutes=m) for m in range(1, 61)
                          if (at + timedelta(minutes=m)).astimezone(zone).utcoffset() == after)
            wall_before = (minute + before).replace(tzinfo=None)
            wall_after = (minute + after).replace(tzinfo=None)
            out.append((min(wall_before, wall_after).date(), "gap" if after > before else "overlap", minute))
        at = following
    return out


def _instant(zone_name: str, day: date, hour: int, minute: int, fold: int) -> str:
    wall = datetime(day.year, day.month, day.day, hour, minute, tzinfo=ZoneInfo(zone_name), fold=fold)
    return wall.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _preview(call, rule: dict) -> dict:
    reply = call("POST", "/rules/preview", {"recurrence": rule, "count": 3})
    assert reply.status == 200, reply.body
    return reply.body


def _day(body: dict, kind: str) -> dict:
    (day,) = [d for d in body["change_days"] if d["kind"] == kind]
    return day


def test_new_york_change_days_show_a_skipped_gap_time_and_both_overlap_instants(call):
    expected = _changes(NY)
    assert [(d, k) for d, k, _ in expected] == [(date(2027, 3, 14), "gap"), (date(2027, 11, 7), "overlap")]
    # A rule at 02:30 that skips the gap: the spring day lists 02:30 skipped with its reason
    skip = _preview(call, {"cron": "30 2 * * *", "timezone": NY, "dst": {"gap": "skip"}})
    assert [(d["local_date"], d["kind"], d["at"]) for d in skip["change_days"]] == [
        (d.isoformat(), k, at.strftime("%Y-%m-%dT%H:%M:%SZ")) for d, k, at in expected]
    spring = _day(skip, "gap")
    assert (spring["wall_from"], spring["wall_to"], spring["affected"]) == ("02:00", "03:00", True)
    (skipped,) = spring["occurrences"]
    assert (skipped["at"], skipped["local_time"], skipped["skipped"]) == (
        _instant(NY, date(2027, 3, 14), 2, 30, 0), "02:30", True)
    assert "02:30 is skipped" in spring["summary"] and "recorded as a skipped run" in spring["summary"]
    assert _day(skip, "overlap")["affected"] is False  # 02:30 is not repeated
    assert "does not affect it" in _day(skip, "overlap")["summary"]
    # A rule at 01:30 that runs both instants of the repeated hour: two instants an hour apart
    both = _preview(call, {"cron": "30 1 * * *", "timezone": NY, "dst": {"overlap": "both"}})
    fall = _day(both, "overlap")
    assert (fall["local_date"], fall["wall_from"], fall["wall_to"]) == ("2027-11-07", "01:00", "02:00")
    assert [(o["at"], o["local_time"], o["repeated"]) for o in fall["occurrences"]] == [
        (_instant(NY, date(2027, 11, 7), 1, 30, 0), "01:30", True),
        (_instant(NY, date(2027, 11, 7), 1, 30, 1), "01:30", True)]
    first, second = (datetime.fromisoformat(o["at"].replace("Z", "+00:00")) for o in fall["occurrences"])
    assert second - first == timedelta(hours=1)
    assert "both instants" in fall["summary"]
    assert _day(both, "gap")["affected"] is False


def test_lord_howe_half_hour_changes_shift_and_take_the_second_instant(call):
    expected = _changes(LORD_HOWE)
    assert [(d, k) for d, k, _ in expected] == [(date(2027, 4, 4), "overlap"), (date(2027, 10, 3), "gap")]
    # 02:15 in the half-hour gap is shifted by the gap (the default): 02:45 local
    shifted = _preview(call, {"cron": "15 2 * * *", "timezone": LORD_HOWE})
    gap = _day(shifted, "gap")
    assert (gap["local_date"], gap["wall_from"], gap["wall_to"]) == ("2027-10-03", "02:00", "02:30")
    (occurrence,) = gap["occurrences"]
    assert occurrence["at"] == _instant(LORD_HOWE, date(2027, 10, 3), 2, 15, 0)  # the earlier offset: +30 min
    assert occurrence["shifted"] is True and occurrence["local"].startswith("2027-10-03T02:45:00")
    # 01:45 in the half-hour overlap with overlap "second": once, at the later instant
    second = _preview(call, {"cron": "45 1 * * *", "timezone": LORD_HOWE, "dst": {"overlap": "second"}})
    overlap = _day(second, "overlap")
    assert (overlap["wall_from"], overlap["wall_to"]) == ("01:30", "02:00")
    assert [o["at"] for o in overlap["occurrences"]] == [_instant(LORD_HOWE, date(2027, 4, 4), 1, 45, 1)]
    assert "second instant" in overlap["summary"]


def test_a_rule_the_change_days_do_not_touch_says_so_and_a_zone_without_changes_has_none(call):
    noon = _preview(call, {"cron": "0 12 * * *", "timezone": NY})
    assert [d["affected"] for d in noon["change_days"]] == [False, False]
    assert all(d["occurrences"] == [] and "does not affect it" in d["summary"] for d in noon["change_days"])
    assert _preview(call, {"cron": "0 12 * * *", "timezone": "Asia/Tokyo"})["change_days"] == []


def test_a_preview_for_a_saved_schedule_gives_its_window_instants_and_404s_for_another_workspace(call):
    rule = {"cron": "30 1 * * *", "timezone": NY, "window_minutes": 30, "dst": {"overlap": "both"}}
    created = call("POST", "/schedules", new_schedule(recurrence=rule)).body
    saved = call("GET", f"/schedules/{created['id']}?upcoming=3").body["next_occurrences"]
    # The schedule's own rule previewed for it: the instants the saved schedule has
    body = call("POST", "/rules/preview", {"recurrence": rule, "count": 3, "schedule_id": created["id"]}).body
    assert [o["due_at"] for o in body["next_occurrences"]] == [o["due_at"] for o in saved]
    assert all(o["due_at"] is not None for o in saved)
    fall = _day(body, "overlap")
    assert len(fall["occurrences"]) == 2 and all(o["due_at"] is not None for o in fall["occurrences"])
    # The saved schedule's page lists the same change days with the same instants
    detail = call("GET", f"/schedules/{created['id']}").body
    assert detail["change_days"] == body["change_days"]
    # Without the schedule: no instant yet (it depends on the schedule), only the window's end
    unsaved = _preview(call, rule)
    assert all(o["due_at"] is None and o["window_end"] for o in unsaved["next_occurrences"])
    # Another workspace's schedule id is not found
    stranger = Caller(workspace_id=uuid.uuid4())
    reply = call("POST", "/rules/preview", {"recurrence": rule, "schedule_id": created["id"]}, as_=stranger)
    assert reply.status == 404, reply.body
