"""What making a delivery in the console asks the API: the workspace's members to pick
recipients from (paged, by display name), the access rule for a candidate recipient
(who may not read the source is named), and the message a draft would send. Each
refuses another workspace's source (422 naming it), a person without ``queries:write``
(403) and a bad field (422 naming it). Real PostgreSQL through the API's own login."""

from __future__ import annotations

from tests.api.conftest import Caller

WRITE = "queries:write,queries:read"
BODY = "<p>Hi {{ recipient_name }}: <a href='{{ link }}'>file</a></p>"


def ana(ws, roles=WRITE) -> Caller:
    return Caller(user_id="ana", workspace_id=ws["a"], roles=roles, enrol=False)


def source(ws, key="query"):
    return {"kind": "query", "query_id": ws[key]}


def test_members_are_the_current_active_members_by_display_name_in_pages(call, ws):
    reply = call("GET", "/members", as_=ana(ws))
    assert reply.status == 200, reply.body
    assert [(m["user_id"], m["display_name"], m["email"]) for m in reply.body["items"]] == [
        ("ana", "Ana Analyst", "ana@x.test"), ("ria", "Ria Reader", "ria@x.test"), ("rui", "Rui Reader", "rui@x.test"),
        ("vic", "Vic <Viewer>", "vic@x.test")]
    pages, cursor = [], None
    while True:
        page = call("GET", "/members?limit=2" + (f"&cursor={cursor}" if cursor else ""), as_=ana(ws)).body
        pages.append([m["user_id"] for m in page["items"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [["ana", "ria"], ["rui", "vic"]]
    bad = call("GET", "/members?cursor=bm90LWpzb24", as_=ana(ws))
    assert (bad.status, bad.body["field"]) == (422, "cursor")
    assert call("GET", "/members?limit=201", as_=ana(ws)).body["field"] == "limit"


def test_members_need_queries_write(call, ws):
    assert call("GET", "/members", as_=ana(ws, roles="queries:read")).status == 403
    # The token's role is not enough: the access rule asks the membership (rui reads only)
    rui = Caller(user_id="rui", workspace_id=ws["a"], roles=WRITE, enrol=False)
    assert call("GET", "/members", as_=rui).status == 403


def test_recipient_check_names_who_may_not_read_the_source(call, ws):
    def check(user_id):
        reply = call("POST", "/query-schedules/recipient-check", {"source": source(ws), "user_id": user_id},
                     as_=ana(ws))
        assert reply.status == 200, reply.body
        return reply.body

    assert check("rui") == {"user_id": "rui", "display_name": "Rui Reader", "email": "rui@x.test", "allowed": True,
                            "reason": None, "message": None}
    refused = check("vic")
    assert (refused["allowed"], refused["reason"]) == (False, "missing_role")
    assert refused["message"] == ("Vic <Viewer> (vic) may not read the query: their roles in this workspace do not "
                                  "include queries:read (a workspace admin can give it).")
    assert check("zed")["reason"] == "left_workspace"
    assert check("bea")["reason"] == "not_a_member"  # a member of another workspace only
    assert check("nobody")["message"] == "nobody may not read the query: they are not a member of this workspace."


def test_recipient_check_refuses_another_workspaces_source_a_bad_field_and_a_reader(call, ws):
    other = call("POST", "/query-schedules/recipient-check", {"source": source(ws, "other"), "user_id": "rui"},
                 as_=ana(ws))
    assert (other.status, other.body["field"]) == (422, "source.query_id")
    missing = call("POST", "/query-schedules/recipient-check", {"source": source(ws)}, as_=ana(ws))
    assert (missing.status, missing.body["field"]) == (422, "user_id")
    reader = call("POST", "/query-schedules/recipient-check", {"source": source(ws), "user_id": "rui"},
                  as_=ana(ws, roles="queries:read"))
    assert reader.status == 403


def draft(ws, **overrides):
    return {"source": source(ws), "format": "xlsx", "name": "Weekly invoices",
            "subject_template": "{{ schedule_name }} for {{ recipient_name }}", "body_template": BODY,
            "user_id": "rui", **overrides}


def test_a_drafts_message_is_composed_as_the_delivery_composes_it(call, ws):
    reply = call("POST", "/query-schedules/message-preview", draft(ws), as_=ana(ws))
    assert reply.status == 200, reply.body
    p = reply.body
    assert (p["user_id"], p["recipient_name"], p["skip_reason"]) == ("rui", "Rui Reader", None)
    assert p["subject"] == "Weekly invoices for Rui Reader"
    assert "Hi Rui Reader" in p["html"] and "personal-link-made-when-sent" in p["html"]
    assert p["timezone"] == "Europe/Berlin" and p["link_expires_at"].startswith("2027-03-08T12:00:00")
    # A member the run would skip is previewed with the reason
    assert call("POST", "/query-schedules/message-preview", draft(ws, user_id="vic"),
                as_=ana(ws)).body["skip_reason"] == "no_access"


def test_a_drafts_preview_names_the_field_it_refuses_and_another_workspaces_source(call, ws):
    for overrides, field in (({"subject_template": "{{ password }}"}, "subject_template"),
                             ({"body_template": "<p>no link</p>"}, "body_template"),
                             ({"format": "pdf"}, "format"),
                             ({"link_ttl_hours": 0}, "link_ttl_hours"),
                             ({"name": " "}, "name"),
                             ({"source": source(ws, "other")}, "source.query_id")):
        refused = call("POST", "/query-schedules/message-preview", draft(ws, **overrides), as_=ana(ws))
        assert (refused.status, refused.body.get("field")) == (422, field), (overrides, refused.body)
    assert call("POST", "/query-schedules/message-preview", draft(ws), as_=ana(ws, roles="queries:read")).status == 403


def test_a_deliverys_rule_is_previewed_for_people_who_make_deliveries(call, ws):
    rule = {"calendar": {"frequency": "weekly", "weekdays": ["MO"], "times": ["09:00"]}, "timezone": "Europe/Berlin"}
    # ana holds no schedules role: the schedules' preview refuses her, the deliveries' does not
    assert call("POST", "/rules/preview", {"recurrence": rule, "count": 3}, as_=ana(ws)).status == 403
    reply = call("POST", "/query-schedules/rule-preview", {"recurrence": rule, "count": 3}, as_=ana(ws))
    assert reply.status == 200, reply.body
    assert len(reply.body["next_occurrences"]) == 3 and "Monday" in reply.body["description"]
    bad = call("POST", "/query-schedules/rule-preview", {"recurrence": {**rule, "timezone": "Mars/Base"}},
               as_=ana(ws))
    assert (bad.status, bad.body["field"]) == (422, "recurrence.timezone")
    assert call("POST", "/query-schedules/rule-preview", {"recurrence": rule},
                as_=ana(ws, roles="queries:read")).status == 403
