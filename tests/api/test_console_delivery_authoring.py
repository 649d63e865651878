"""Making and changing a delivery in the console, without JavaScript, against the real API
resolver and database: "New delivery" only for people who may write queries; the source
picked by name and version; recipients added one by one, each checked against the access
rule (who may not read the source is refused, named, on the field); the rule and the
message previewed; create with the form's Idempotency-Key; edit (only the changed fields
are sent, the history shows them); delete with what is kept said."""

from __future__ import annotations

import html as html_lib
import json
import re

from tests.api.conftest import Caller
from tests.api.test_console import Browser, _header

ROLES = ("queries:read", "queries:write")
TOKEN = "queries:read,queries:write"


def person(console, ws, user="ana", roles=ROLES, workspace="a"):
    browser = Browser(console)
    browser.sign_in(Caller(user_id=user, workspace_id=ws[workspace], roles=TOKEN, enrol=False), roles)
    return browser


def _fields(page_html: str) -> dict[str, str]:
    """The form's current values as a browser would send them (hidden, text, selected,
    checked and textarea values)."""
    form = page_html.split('id="delivery-form"', 1)[1].split("</form>", 1)[0]
    out: dict[str, str] = {}
    for tag in re.finditer(r"<input([^>]*)>", form):
        attrs = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', tag.group(1)))
        if "name" not in attrs:
            continue
        kind = attrs.get("type", "text")
        if kind in ("checkbox", "radio") and " checked" not in tag.group(1):
            continue
        out[attrs["name"]] = html_lib.unescape(attrs.get("value", "on"))
    for sel in re.finditer(r'<select[^>]*name="([^"]+)"[^>]*>(.*?)</select>', form, re.S):
        options = [(value[8:-1] if value else text, " selected" in rest)
                   for value, rest, text in re.findall(r'<option( value="[^"]*")?([^>]*)>([^<]*)', sel.group(2))]
        if options:
            out[sel.group(1)] = html_lib.unescape(next((v for v, chosen in options if chosen), options[0][0]))
    for area in re.finditer(r'<textarea[^>]*name="([^"]+)"[^>]*>(.*?)</textarea>', form, re.S):
        out[area.group(1)] = html_lib.unescape(area.group(2))
    return out


def _post(browser, path, page, **changes):
    fields = {**_fields(page["body"]), **changes}
    return browser.request("POST", path, fields)


def test_a_viewer_sees_no_new_delivery_and_may_not_open_the_form(ws, console):
    viewer = person(console, ws, "rui", roles=("queries:read",))
    listing = viewer.request("GET", "/console/deliveries")
    assert listing["statusCode"] == 200 and "New delivery" not in listing["body"]
    assert viewer.request("GET", "/console/deliveries/new")["statusCode"] == 403
    writer = person(console, ws)
    assert 'href="/console/deliveries/new"' in writer.request("GET", "/console/deliveries")["body"]


def test_an_analyst_makes_a_weekly_xlsx_delivery_to_two_members_and_a_third_is_refused(ws, console, call):
    ana = person(console, ws)
    page = ana.request("GET", "/console/deliveries/new")
    assert page["statusCode"] == 200
    body = page["body"]
    # The source by name, the newest version first, and each version
    assert f'<option value="query:{ws["query"]}:">Query: Open invoices (newest, version 2)</option>' in body
    assert f'<option value="query:{ws["query"]}:1">Query: Open invoices, version 1</option>' in body
    # Members by display name and address; names escaped
    # (another workspace's member is not offered: by name and address, not the id "bea",
    # which a random query id in the page may contain)
    assert "Vic &lt;Viewer&gt; &lt;vic@x.test&gt;" in body
    assert "Bea Other" not in body and "bea@x.test" not in body
    path = "/console/deliveries/new"
    common = {"name": "Weekly invoices", "source": f"query:{ws['query']}:1", "format": "xlsx"}
    added = _post(ana, path, page, intent="add", candidate="rui", **common)
    assert added["statusCode"] == 200 and "Rui Reader was added" in added["body"]
    added = _post(ana, path, added, intent="add", candidate="ria")
    assert json.loads(_fields(added["body"])["recipients"]) == ["rui", "ria"]
    # A third who may not read the query is refused at add, named, on the field
    refused = _post(ana, path, added, intent="add", candidate="vic")
    assert refused["statusCode"] == 422
    text = html_lib.unescape(refused["body"])
    assert ("Vic <Viewer> (vic) may not read the query: their roles in this workspace do not include "
        "queries:read (a workspace admin can give it).") in text
    assert 'id="d-candidate" name="candidate" aria-invalid="true"' in refused["body"]
    assert json.loads(_fields(refused["body"])["recipients"]) == ["rui", "ria"]
    # Preview the rule (every Monday 09:00 by default) and the message
    rule = _post(ana, path, refused, intent="rule")
    assert rule["statusCode"] == 200 and "Monday" in html_lib.unescape(rule["body"])
    message = _post(ana, path, rule, intent="message", preview_user="ria",
                    subject_template="Invoices for {{ recipient_name }}")
    assert message["statusCode"] == 200
    assert "What <bdi>Ria Reader</bdi> would receive" in message["body"]
    assert "<bdi>Invoices for Ria Reader</bdi>" in message["body"]
    assert 'id="preview-heading"' in message["body"]  # the rule's preview stays beside the message's
    # The HTML part too, in a sandboxed frame (escaped into srcdoc: nothing of it runs in the page)
    srcdoc = re.search(r'<iframe class="message" sandbox srcdoc="([^"]*)"', message["body"]).group(1)
    assert "<" not in srcdoc and "<a href=" in html_lib.unescape(srcdoc)
    # A bad template is the API's reason on its field, what was typed kept
    bad = _post(ana, path, message, intent="save", subject_template="{{ password }}")
    assert bad["statusCode"] == 422
    assert 'id="d-subject" name="subject_template" value="{{ password }}"' in bad["body"]
    assert 'aria-invalid="true" aria-describedby="rf-problem d-templates-hint"' in bad["body"]
    # Create from the refused page, the subject corrected (twice with the same key: one delivery)
    assert _fields(bad["body"])["key"] != _fields(message["body"])["key"]
    fields = {**_fields(bad["body"]), "intent": "save", "subject_template": "Invoices for {{ recipient_name }}"}
    created = ana.request("POST", path, fields)
    assert created["statusCode"] == 303
    again = ana.request("POST", path, fields)
    assert _header(again, "Location") == _header(created, "Location")
    delivery_id = _header(created, "Location").split("/")[-1].split("?")[0]
    who = Caller(user_id="ana", workspace_id=ws["a"], roles=TOKEN, enrol=False)
    saved = call("GET", f"/query-schedules/{delivery_id}", as_=who).body
    assert (saved["format"], saved["source"]["query_version"], saved["recipients"]) == ("xlsx", 1, ["ria", "rui"])
    assert saved["recurrence"] == {"calendar": {"frequency": "weekly", "weekdays": ["MO"], "times": ["09:00"]},
                                   "timezone": "Europe/Berlin"}
    assert saved["subject_template"] == "Invoices for {{ recipient_name }}"
    assert len(call("GET", "/query-schedules", as_=who).body["items"]) == 1
    assert "The delivery was created." in ana.request("GET", _header(created, "Location"))["body"]


def _create(call, ws, **overrides):
    who = Caller(user_id="ana", workspace_id=ws["a"], roles=TOKEN, enrol=False)
    body = {"name": "Daily", "recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}, "format": "csv",
            "source": {"kind": "query", "query_id": ws["query"]}, "recipients": ["rui"],
            "subject_template": "{{ schedule_name }}", "body_template": "<a href='{{ link }}'>file</a>", **overrides}
    reply = call("POST", "/query-schedules", body, as_=who)
    assert reply.status == 201, reply.body
    return who, reply.body["id"]


def test_edit_sends_only_what_changed_and_the_history_shows_it(ws, console, call):
    who, delivery_id = _create(call, ws)
    ana = person(console, ws)
    path = f"/console/deliveries/{delivery_id}/edit"
    page = ana.request("GET", path)
    assert page["statusCode"] == 200
    assert "The source and the format stay as they were saved (query <bdi>Open invoices</bdi>" in page["body"]
    assert '<a href="/console/deliveries/new">make a new delivery</a>' in page["body"]
    # A cron rule is not one the fields show: the JSON editor holds it
    assert _fields(page["body"])["rule_mode"] == "json"
    saved = _post(ana, path, page, intent="save", subject_template="New: {{ schedule_name }}")
    assert saved["statusCode"] == 303
    after = call("GET", f"/query-schedules/{delivery_id}", as_=who).body
    assert after["subject_template"] == "New: {{ schedule_name }}"
    assert after["recurrence"]["cron"] == "0 7 * * *"
    history = call("GET", f"/query-schedules/{delivery_id}/history", as_=who).body["items"]
    assert [sorted(e["detail"]["changes"]) for e in history if e.get("detail") and "changes" in e["detail"]] == [
        ["subject_template"]]
    shown = ana.request("GET", f"/console/deliveries/{delivery_id}?done=updated")["body"]
    assert "The delivery was updated." in shown and "subject_template" in shown
    # A recipient who may not read the source is refused on edit too
    refused = _post(ana, path, ana.request("GET", path), intent="add", candidate="vic")
    assert refused["statusCode"] == 422 and "may not read the query" in refused["body"]


def test_delete_says_what_is_kept_and_another_workspace_sees_nothing(ws, console, call):
    who, delivery_id = _create(call, ws)
    bea = person(console, ws, "bea", workspace="b")
    for target in (f"/console/deliveries/{delivery_id}/edit", f"/console/deliveries/{delivery_id}/delete"):
        assert bea.request("GET", target)["statusCode"] == 404, target
    token = bea.csrf("/console/deliveries")
    assert bea.request("POST", f"/console/deliveries/{delivery_id}/delete", {"csrf": token})["statusCode"] == 404
    ana = person(console, ws)
    confirm = ana.request("GET", f"/console/deliveries/{delivery_id}/delete")
    assert confirm["statusCode"] == 200 and "What is kept, for audit" in confirm["body"]
    assert '<button type="submit" class="danger">Delete this delivery</button>' in confirm["body"]
    page = ana.request("GET", f"/console/deliveries/{delivery_id}")["body"]
    assert f'<a href="/console/deliveries/{delivery_id}/delete" class="danger-link">Delete</a>' in page
    # the rule in words beside the next delivery; what an empty result does, in words
    assert "<dt>Delivered</dt><dd>At 07:00, every day, Europe/Berlin</dd>" in page
    assert call("GET", f"/query-schedules/{delivery_id}", as_=who).body["description"] == (
        "At 07:00, every day, Europe/Berlin")
    assert "<dt>When the source has no rows</dt>" in page and "Empty results" not in page
    token = ana.csrf(f"/console/deliveries/{delivery_id}/delete")
    assert ana.request("POST", f"/console/deliveries/{delivery_id}/delete", {})["statusCode"] == 403  # no CSRF
    gone = ana.request("POST", f"/console/deliveries/{delivery_id}/delete", {"csrf": token})
    assert gone["statusCode"] == 303 and _header(gone, "Location").endswith("/console/deliveries?done=deleted")
    assert call("GET", f"/query-schedules/{delivery_id}", as_=who).status == 410
    assert "runs, outcomes and history are kept" in ana.request("GET", "/console/deliveries?done=deleted")["body"]
