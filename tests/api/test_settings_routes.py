"""The workspace's settings routes, over the API's walled login: the zone with its preview
and its effect on the schedules, the locale, who gets notices; admins only, each change
in the audit log."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from tests.api.conftest import NOW, Caller, seed_member
from timekeeper.db.connection import connect
from timekeeper.reporting import opt_outs

ADMIN_TOKEN = "workspace:admin,schedules:admin"
NINE_BERLIN = {"cron": "0 9 * * *", "timezone": "Europe/Berlin"}
NINE_TOKYO = {"cron": "0 9 * * *", "timezone": "Asia/Tokyo"}


def admin_of_workspace(db_url) -> Caller:
    """An admin (and schedules admin) of a fresh workspace in Europe/Berlin."""
    return seed_member(db_url, roles=("workspace:admin", "schedules:admin"), token_roles=ADMIN_TOKEN)


def schedule(call, admin, name, rule):
    reply = call("POST", "/schedules", {"owner": "accounting", "work_kind": "reconciliation.sweep",
                                        "recurrence": rule, "name": name}, as_=admin)
    assert reply.status == 201, reply.body
    return reply.body["id"]


def nine_local(zone: str, day: int) -> datetime:
    """09:00 on 2027-03-<day> in ``zone``, as a UTC instant (computed with zoneinfo alone)."""
    return datetime(2027, 3, day, 9, 0, tzinfo=ZoneInfo(zone)).astimezone(UTC)


def test_an_admin_reads_the_settings_with_each_members_notice_mail(db_url, call):
    admin = admin_of_workspace(db_url)
    other = seed_member(db_url, workspace_id=admin.workspace_id, roles=("queries:read",))
    reply = call("GET", "/settings", as_=admin)
    assert reply.status == 200
    assert (reply.body["timezone"], reply.body["locale"], reply.body["notify_admins"]) == ("Europe/Berlin", "en_US",
                                                                                           False)
    assert {m["user_id"]: m["mail"] for m in reply.body["members"]} == {admin.user_id: True, other.user_id: True}


def test_a_zone_change_is_previewed_then_moves_the_schedules_in_the_old_zone(db_url, call):
    admin = admin_of_workspace(db_url)
    berlin = schedule(call, admin, "Berlin nine", NINE_BERLIN)
    tokyo = schedule(call, admin, "Tokyo nine", NINE_TOKYO)
    assert call("GET", f"/schedules/{berlin}", as_=admin).body["schedule"]["next_due_at"] == \
        nine_local("Europe/Berlin", 2).isoformat().replace("+00:00", "Z")
    # The preview counts the schedules in the workspace's zone and shows them before and after
    preview = call("POST", "/settings/zone-preview", {"timezone": "America/New_York"}, as_=admin)
    assert preview.status == 200, preview.body
    assert (preview.body["old"], preview.body["new"], preview.body["affected"]) == ("Europe/Berlin",
                                                                                    "America/New_York", 1)
    [shown] = preview.body["schedules"]
    assert shown["id"] == berlin
    assert [o["at"] for o in shown["before"]] == [nine_local("Europe/Berlin", d).isoformat().replace("+00:00", "Z")
                                                  for d in (2, 3, 4)]
    assert [o["at"] for o in shown["after"]] == [nine_local("America/New_York", d).isoformat().replace("+00:00", "Z")
                                                 for d in (1, 2, 3)]
    assert shown["next_due_after"] == nine_local("America/New_York", 1).isoformat().replace("+00:00", "Z")
    # Nothing changed yet
    assert call("GET", "/settings", as_=admin).body["timezone"] == "Europe/Berlin"
    # The change moves the Berlin schedule, computed from now as an update of its rule; Tokyo's stays
    changed = call("PATCH", "/settings", {"timezone": "America/New_York", "move_schedules": True}, as_=admin)
    assert changed.status == 200, changed.body
    assert (changed.body["timezone"], changed.body["schedules_moved"]) == ("America/New_York", 1)
    moved = call("GET", f"/schedules/{berlin}", as_=admin).body["schedule"]
    assert moved["timezone"] == "America/New_York" and moved["definition_version"] == 2
    assert moved["next_due_at"] == nine_local("America/New_York", 1).isoformat().replace("+00:00", "Z")
    kept = call("GET", f"/schedules/{tokyo}", as_=admin).body["schedule"]
    assert (kept["timezone"], kept["definition_version"]) == ("Asia/Tokyo", 1)
    # Both changes are in the audit log
    log = call("GET", "/audit-events", as_=admin).body["items"]
    assert [(e["kind"], e["subject_id"]) for e in log[:2]] == [("settings.updated", str(admin.workspace_id)),
                                                               ("schedule.updated", berlin)]
    assert log[0]["before"] == {"timezone": "Europe/Berlin"}
    assert log[0]["after"] == {"timezone": "America/New_York", "schedules_moved": 1}
    assert log[1]["before"]["recurrence"] == NINE_BERLIN
    assert log[1]["after"]["recurrence"] == {**NINE_BERLIN, "timezone": "America/New_York"}


def test_a_zone_change_without_moving_keeps_every_schedule(db_url, call):
    admin = admin_of_workspace(db_url)
    berlin = schedule(call, admin, "Berlin nine", NINE_BERLIN)
    changed = call("PATCH", "/settings", {"timezone": "Asia/Tokyo"}, as_=admin)
    assert (changed.status, changed.body["schedules_moved"]) == (200, 0)
    kept = call("GET", f"/schedules/{berlin}", as_=admin).body["schedule"]
    assert (kept["timezone"], kept["definition_version"]) == ("Europe/Berlin", 1)


def test_a_zone_change_moving_more_schedules_than_one_request_moves_is_refused_whole(db_url, call, monkeypatch):
    from timekeeper.platform import workspace_settings

    admin = admin_of_workspace(db_url)
    for name in ("One", "Two"):
        schedule(call, admin, name, NINE_BERLIN)
    monkeypatch.setattr(workspace_settings, "MAX_MOVED_SCHEDULES", 1)
    refused = call("PATCH", "/settings", {"timezone": "Asia/Tokyo", "move_schedules": True, "locale": "de_DE"},
                   as_=admin)
    assert (refused.status, refused.body["field"]) == (422, "move_schedules")
    assert refused.body["message"].startswith("2 schedules have their rule in the current zone")
    after = call("GET", "/settings", as_=admin).body
    assert (after["timezone"], after["locale"]) == ("Europe/Berlin", "en_US")
    assert [e["kind"] for e in call("GET", "/audit-events?kind=settings", as_=admin).body["items"]] == []


#: Daily at 23:30 local until tonight: at NOW (13:00 in Berlin) it still runs tonight in Berlin,
#: but in Kiritimati (UTC+14, already 02:00 on 03-02) its last 23:30 has passed.
ENDS_TONIGHT = {"rrule": "FREQ=DAILY;BYHOUR=23;BYMINUTE=30;UNTIL=20270301T233000", "start": "2027-02-25",
                "timezone": "Europe/Berlin"}


def test_the_zone_preview_lists_a_schedule_that_would_not_run_and_the_change_names_it(db_url, call, monkeypatch):
    from timekeeper.platform import workspace_settings

    admin = admin_of_workspace(db_url)
    schedule(call, admin, "Berlin nine", NINE_BERLIN)
    ending = schedule(call, admin, "Ends tonight", ENDS_TONIGHT)
    # When the preview shows one schedule only (the first by name), and the other would not run in the new zone
    monkeypatch.setattr(workspace_settings, "PREVIEW_SCHEDULES", 1)
    preview = call("POST", "/settings/zone-preview", {"timezone": "Pacific/Kiritimati"}, as_=admin)
    assert preview.status == 200, preview.body
    # Then it is listed all the same, with why, and the one shown runs there
    assert preview.body["affected"] == 2
    assert [(s["name"], s["would_not_run"]) for s in preview.body["schedules"]] == [("Berlin nine", None)]
    assert preview.body["would_not_run"] == [{"id": ending, "name": "Ends tonight", "reason": (
        "rrule: the rule has no occurrence in the next 10 years")}]
    # And shown among the first, it is marked, with no occurrence after the move
    monkeypatch.setattr(workspace_settings, "PREVIEW_SCHEDULES", 20)
    shown = call("POST", "/settings/zone-preview", {"timezone": "Pacific/Kiritimati"}, as_=admin).body["schedules"]
    marked = next(s for s in shown if s["id"] == ending)
    assert marked["would_not_run"].startswith("rrule: ") and marked["after"] == [] and len(marked["before"]) == 1
    assert marked["next_due_after"] is None
    # And the change that moves the schedules is refused naming the schedule (name and id); nothing changed
    refused = call("PATCH", "/settings", {"timezone": "Pacific/Kiritimati", "move_schedules": True}, as_=admin)
    assert (refused.status, refused.body["field"]) == (422, "timezone")
    assert refused.body["message"] == (f"the schedule 'Ends tonight' ({ending}) would not run in Pacific/Kiritimati: "
                                       "rrule: the rule has no occurrence in the next 10 years")
    assert call("GET", "/settings", as_=admin).body["timezone"] == "Europe/Berlin"
    assert call("GET", f"/schedules/{ending}", as_=admin).body["schedule"]["timezone"] == "Europe/Berlin"


def test_the_locale_and_notify_admins_change_and_are_audited(db_url, call):
    admin = admin_of_workspace(db_url)
    changed = call("PATCH", "/settings", {"locale": "de_DE", "notify_admins": True}, as_=admin)
    assert changed.status == 200, changed.body
    assert (changed.body["locale"], changed.body["notify_admins"]) == ("de_DE", True)
    [event] = call("GET", "/audit-events", as_=admin).body["items"]
    assert (event["kind"], event["actor"], event["before"], event["after"]) == (
        "settings.updated", admin.user_id, {"locale": "en_US", "notify_admins": False},
        {"locale": "de_DE", "notify_admins": True})
    assert event["at"] == NOW.isoformat().replace("+00:00", "Z")
    # Saving the same again changes nothing and records nothing
    assert call("PATCH", "/settings", {"locale": "de_DE"}, as_=admin).status == 200
    assert len(call("GET", "/audit-events", as_=admin).body["items"]) == 1


def test_bad_settings_are_422_naming_the_field(db_url, call):
    admin = admin_of_workspace(db_url)
    for body, field in [({"timezone": "Mars/Olympus"}, "timezone"), ({"timezone": "Europe/Atlantis"}, "timezone"),
                        ({"locale": "xx_YY"}, "locale"), ({"locale": "de-DE"}, "locale"),
                        ({"notify_admins": "sometimes"}, "notify_admins"), ({"colour": "red"}, "colour")]:
        reply = call("PATCH", "/settings", body, as_=admin)
        assert (reply.status, reply.body.get("field")) == (422, field), (body, reply.body)
    bad = call("POST", "/settings/zone-preview", {"timezone": "Nowhere/Land"}, as_=admin)
    assert (bad.status, bad.body["field"]) == (422, "timezone")
    assert call("GET", "/settings", as_=admin).body["timezone"] == "Europe/Berlin"


def test_only_admins_read_and_change_the_settings(db_url, call):
    admin = admin_of_workspace(db_url)
    # A token without the role, and a token with it whose membership does not grant it
    writer = seed_member(db_url, workspace_id=admin.workspace_id, roles=("schedules:admin",),
                         token_roles="schedules:admin")
    pretender = seed_member(db_url, workspace_id=admin.workspace_id, roles=("schedules:read",),
                            token_roles="workspace:admin")
    for who in (writer, pretender):
        assert call("GET", "/settings", as_=who).status == 403
        assert call("PATCH", "/settings", {"locale": "de_DE"}, as_=who).status == 403
        assert call("POST", "/settings/zone-preview", {"timezone": "Asia/Tokyo"}, as_=who).status == 403
        assert call("PUT", f"/settings/notice-mail/{admin.user_id}", {"mail": False}, as_=who).status == 403
        assert call("GET", "/audit-events", as_=who).status == 403
    assert call("GET", "/settings", as_=admin).body["locale"] == "en_US"


def test_notice_mail_per_member_and_tenancy(db_url, call):
    admin = admin_of_workspace(db_url)
    person = seed_member(db_url, workspace_id=admin.workspace_id, roles=("queries:read",))
    stranger = seed_member(db_url, roles=("queries:read",))
    # An admin turns a member's notice e-mails off, then back on
    off = call("PUT", f"/settings/notice-mail/{person.user_id}", {"mail": False}, as_=admin)
    assert (off.status, off.body["mail"], off.body["off_by_admin"]) == (200, False, True)
    with connect(db_url) as conn:
        assert opt_outs.notice_opted_out_at(conn, workspace_id=admin.workspace_id, user_id=person.user_id) == NOW
    on = call("PUT", f"/settings/notice-mail/{person.user_id}", {"mail": True}, as_=admin)
    assert (on.status, on.body["mail"]) == (200, True)
    kinds = [(e["kind"], e["subject_id"], e["after"]) for e in call("GET", "/audit-events", as_=admin).body["items"]]
    assert kinds == [("settings.notice_mail", person.user_id, {"mail": True}),
                     ("settings.notice_mail", person.user_id, {"mail": False})]
    # The person's own opt-out is theirs to undo
    with connect(db_url) as conn, conn.transaction():
        opt_outs.record_notice_opt_out(conn, opt_outs.NoticeOptOutLink(admin.workspace_id, person.user_id), now=NOW)
    own = call("PUT", f"/settings/notice-mail/{person.user_id}", {"mail": True}, as_=admin)
    assert (own.status, own.body["code"]) == (409, "persons_own_opt_out")
    # Another workspace's member is not found, and another workspace's admin sees none of this
    assert call("PUT", f"/settings/notice-mail/{stranger.user_id}", {"mail": False}, as_=admin).status == 404
    elsewhere = admin_of_workspace(db_url)
    assert call("GET", "/audit-events", as_=elsewhere).body["items"] == []
    assert call("PUT", f"/settings/notice-mail/{person.user_id}", {"mail": False}, as_=elsewhere).status == 404
    assert person.user_id not in [m["user_id"] for m in call("GET", "/settings", as_=elsewhere).body["members"]]


def test_two_admins_turning_a_persons_notice_mail_off_at_once_change_it_once(db_url, call):
    import threading

    from timekeeper.platform import workspace_settings

    admin = admin_of_workspace(db_url)
    person = seed_member(db_url, workspace_id=admin.workspace_id, roles=("queries:read",))
    errors: list[BaseException] = []
    with connect(db_url) as first, connect(db_url) as second:
        # The first admin's change is made and not yet committed ...
        with first.transaction():
            workspace_settings.set_notice_mail(first, workspace_id=admin.workspace_id, user_id=person.user_id,
                                               mail=False, actor="admin-a", now=NOW)

            def other_admin():
                try:
                    workspace_settings.set_notice_mail(second, workspace_id=admin.workspace_id,
                                                       user_id=person.user_id, mail=False, actor="admin-b", now=NOW)
                except BaseException as error:  # noqa: BLE001 - the test reports it below
                    errors.append(error)

            # ... when the second admin makes the same change at the same moment
            racer = threading.Thread(target=other_admin)
            racer.start()
            racer.join(timeout=1)
            assert racer.is_alive(), "the second change must wait for the first"
        racer.join(timeout=30)
    # Then the second finds it done: no error, and the audit log has one change
    assert errors == []
    kinds = [(e["kind"], e["actor"]) for e in call("GET", "/audit-events", as_=admin).body["items"]]
    assert kinds == [("settings.notice_mail", "admin-a")]


def test_a_locale_with_a_variant_and_an_actor_with_a_nul_are_422_naming_the_field(db_url, call):
    admin = admin_of_workspace(db_url)
    reply = call("PATCH", "/settings", {"locale": "en_US_POSIX"}, as_=admin)
    assert (reply.status, reply.body.get("field")) == (422, "locale"), reply.body
    reply = call("GET", "/audit-events?actor=\x00", as_=admin)  # API Gateway decodes %00 to NUL
    assert (reply.status, reply.body.get("field")) == (422, "actor"), reply.body
