"""A delivery's recipients are named as people: the API's read of a query schedule gives
their display names beside their ids, and the console's delivery page, its runs and its
message preview show the names with the id kept. Against the real API resolver and
database."""

from __future__ import annotations

from tests.api.conftest import NOW
from tests.api.test_console import Browser
from timekeeper.db.connection import connect
from timekeeper.platform.directory import upsert_user

DELIVERY = {"recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}, "format": "csv",
            "subject_template": "{{ schedule_name }}", "body_template": "<a href='{{ link }}'>file</a>"}


def test_recipients_are_named_by_their_display_names_with_the_id_kept(call, analyst, console, db_url):
    # Given a delivery to its owner, whom the directory calls Ada Analyst
    who, query_id = analyst
    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id=who.user_id, display_name="Ada Analyst", now=NOW)
    created = call("POST", "/query-schedules", {**DELIVERY, "name": "Daily", "recipients": [who.user_id],
                                                "source": {"kind": "query", "query_id": str(query_id)}}, as_=who)
    assert created.status == 201, created.body
    # Then the API's read names the recipient
    read = call("GET", f"/query-schedules/{created.body['id']}", as_=who).body
    assert read["recipient_names"] == {who.user_id: "Ada Analyst"}
    # And the console shows the name, the id kept beside it
    browser = Browser(console)
    browser.sign_in(who, ("queries:read", "queries:write"))
    page = browser.request("GET", f"/console/deliveries/{created.body['id']}")
    assert page["statusCode"] == 200
    assert f'<span title="{who.user_id}"><bdi>Ada Analyst</bdi>' in page["body"]  # the id in a title
    preview = browser.request("GET", f"/console/deliveries/{created.body['id']}/preview")
    assert preview["statusCode"] == 200
    assert f'<option value="{who.user_id}" selected>Ada Analyst ({who.user_id})</option>' in preview["body"]


def test_a_delivery_s_source_and_format_read_as_words(call, analyst, console):
    who, query_id = analyst
    created = call("POST", "/query-schedules", {**DELIVERY, "name": "Daily", "recipients": [who.user_id],
                                                "source": {"kind": "query", "query_id": str(query_id)}}, as_=who)
    browser = Browser(console)
    browser.sign_in(who, ("queries:read", "queries:write"))
    for path in (f"/console/deliveries/{created.body['id']}", "/console/deliveries"):
        html = browser.request("GET", path)["body"]
        assert "Query <a href=" in html or "Query <bdi>" in html, path  # the source's kind in words, then its name
        assert ">CSV</" in html and ">csv</" not in html, path
