"""What recipients get, through the API and the real consumer: a body template without
the link placeholder is a 422 naming the field at create and update; a delivered message
names the workspace and the schedule, says why the recipient gets it, and gives the link's
expiry in the workspace's zone (Europe/Berlin) as people read it."""

from __future__ import annotations

from tests.api.test_delivery_routes import app, aws, body, deliver_run, olga, tenants  # noqa: F401


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
