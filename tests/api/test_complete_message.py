"""What recipients get, through the API and the real consumer: a body template without
the link placeholder is a 422 naming the field at create and update; a delivered message
names the workspace and the schedule, says why the recipient gets it, and gives the link's
expiry in the workspace's zone (Europe/Berlin) as people read it."""

from __future__ import annotations

from tests.api.conftest import Caller
from tests.api.test_delivery_routes import app, aws, body, deliver_run, olga, reading, tenants  # noqa: F401
from timekeeper.db.connection import connect


def test_a_body_without_the_link_is_a_422_naming_the_field_at_create_and_update(call, tenants):  # noqa: F811
    no_link = "<p>Hello {{ recipient_name }}, {{ schedule_name }} is ready.</p>"
    refused = call("POST", "/query-schedules", body(tenants, body_template=no_link), as_=olga(tenants))
    assert (refused.status, refused.body["field"]) == (422, "body_template")
    assert "{{ link }}" in refused.body["message"]
    schedule_id = call("POST", "/query-schedules", body(tenants), as_=olga(tenants)).body["id"]
    changed = call("PATCH", f"/query-schedules/{schedule_id}", {"body_template": no_link}, as_=olga(tenants))
    assert (changed.status, changed.body["field"]) == (422, "body_template")


def test_a_delivered_message_is_complete(call, tenants, publisher, aws, db_url):  # noqa: F811
    s3, ses = aws
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    call("POST", f"/query-schedules/{schedule_id}/run", headers={"Idempotency-Key": "m1"}, as_=olga(tenants))
    (message,) = publisher.sent
    (mail,) = deliver_run(db_url, message, s3, ses)
    for part in (mail["html"], mail["text"]):
        assert "Daily invoices" in part and "A" in part  # the schedule's and the workspace's names
        assert "because Olga added you to the recipients" in part
        # the run is at 2027-03-01 12:00 UTC, the link lives 168 h: 8 March, 13:00 in Berlin (CET)
        assert "works until Monday, 8 March 2027, 13:00 CET" in part
        assert "CSV file, 1 row" in part
    assert mail["html"].startswith("<!DOCTYPE html>") and "<p>" not in mail["text"]


def _with_stand_in_links(part: str, base: str) -> str:
    """A sent part with its personal links replaced by the preview's stand-ins."""
    import re

    from timekeeper.reporting.delivery_preview import PREVIEW_TOKEN

    return re.sub(r"https://api\.test/(downloads|opt-outs)/[A-Za-z0-9_.\-]+", rf"{base}\1/{PREVIEW_TOKEN}", part)


def test_the_preview_is_the_message_a_run_now_sends_but_its_links_and_row_count(
        call, tenants, publisher, aws, db_url):  # noqa: F811
    s3, ses = aws
    with reading(db_url, tenants["a"], "vic"):
        schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita", "vic"]),
                           as_=olga(tenants)).body["id"]
    # Given the preview of Rita's message (the first recipient by default)
    preview = call("GET", f"/query-schedules/{schedule_id}/message-preview", as_=olga(tenants))
    assert preview.status == 200
    assert (preview.body["user_id"], preview.body["skip_reason"]) == ("rita", None)
    assert preview.body["timezone"] == "Europe/Berlin"
    # When the schedule runs now and the real consumer sends through moto SES
    call("POST", f"/query-schedules/{schedule_id}/run", headers={"Idempotency-Key": "p1"}, as_=olga(tenants))
    (message,) = publisher.sent
    mail = next(m for m in deliver_run(db_url, message, s3, ses) if m["to"].startswith("rita"))
    # Then the message sent is the preview, but for the personal links (signed when sent)
    # and the file's row count (counted when it runs)
    base = "https://downloads.invalid/"
    assert preview.body["subject"] == mail["subject"]
    for part in ("html", "text"):
        sent = _with_stand_in_links(mail[part], base).replace("CSV file, 1 row", "CSV file")
        assert preview.body[part] == sent
    assert "works until Monday, 8 March 2027, 13:00 CET" in preview.body["text"]
    assert "https://api.test/" not in preview.body["html"]


def test_a_preview_names_why_a_recipient_would_be_skipped_and_refuses_a_stranger(call, tenants, db_url):  # noqa: F811
    with reading(db_url, tenants["a"], "vic"):
        schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita", "vic"]),
                           as_=olga(tenants)).body["id"]
    # Vic, a recipient, lost read access to the query since (reports:read only): a run would skip him
    vic = call("GET", f"/query-schedules/{schedule_id}/message-preview?user_id=vic", as_=olga(tenants)).body
    assert (vic["user_id"], vic["recipient_name"], vic["skip_reason"]) == ("vic", "Vic", "no_access")
    # A preview of anyone else, or of another workspace's schedule, is a 404
    bob = Caller(user_id="bob", workspace_id=tenants["b"], roles=("queries:read",))
    assert call("GET", f"/query-schedules/{schedule_id}/message-preview", as_=bob).status == 404
    stranger = call("GET", f"/query-schedules/{schedule_id}/message-preview?user_id=zed",
                    as_=olga(tenants))
    assert (stranger.status, stranger.body["message"]) == (404, "no such recipient of this schedule")
    spaced = call("GET", f"/query-schedules/{schedule_id}/message-preview?user_id=a b",
                  as_=olga(tenants))
    assert (spaced.status, spaced.body["field"]) == (422, "user_id")


def test_a_name_saved_with_a_bidirectional_control_is_isolated_on_pages_and_stripped_from_the_subject(
        call, tenants, db_url, console):  # noqa: F811
    # Given a delivery whose name holds U+202E (saved before the API refused it: set behind its back)
    from tests.api.test_console import Browser

    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE schedules SET name = %s WHERE id = %s", ("Invoices \u202efdp.exe", schedule_id))
    # Then the message's subject has no bidirectional control (the text after the name reads as typed)
    preview = call("GET", f"/query-schedules/{schedule_id}/message-preview", as_=olga(tenants)).body
    assert "\u202e" not in preview["subject"] and preview["subject"].startswith("Invoices fdp.exe 2027-03-01")
    # And the console isolates the name wherever it shows it
    browser = Browser(console)
    browser.sign_in(olga(tenants), roles=("queries:read", "queries:write"))
    for path in ("/console/deliveries", f"/console/deliveries/{schedule_id}",
                 f"/console/deliveries/{schedule_id}/preview"):
        html = browser.request("GET", path)["body"]
        assert "<bdi>Invoices \u202efdp.exe</bdi>" in html, path
