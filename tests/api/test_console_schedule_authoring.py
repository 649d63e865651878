"""Making and changing schedules in the console, without JavaScript, against the real API
resolver and database: "New schedule" (work kind, subject by name, the rule, Preview
before Create, one schedule per form), rename, change subject, delete with its
confirmation; a reader is offered none of it."""

from __future__ import annotations

import html as html_lib
import re
import uuid

from tests.api.conftest import Caller, new_schedule
from tests.api.test_console import Browser, _header

SECOND_SUNDAY_0230 = {"frequency": "monthly_nth", "nth": "2", "nth_day": "SU", "times": "02:30",
                      "timezone": "America/New_York"}


def signed_in(console, caller, roles=("schedules:read", "schedules:write")) -> Browser:
    browser = Browser(console)
    browser.sign_in(caller, roles)
    return browser


def form(token: str, key: str = "form-key-1", **fields: str) -> dict[str, str]:
    return {"csrf": token, "key": key, "name": "Second Sunday", "kind": "accounting/reconciliation.sweep",
            **SECOND_SUNDAY_0230, **fields}


def test_a_reader_is_offered_no_new_schedule(console, call, caller):
    browser = signed_in(console, caller, roles=("schedules:read",))
    assert "New schedule" not in browser.request("GET", "/console/schedules")["body"]
    assert browser.request("GET", "/console/schedules/new")["statusCode"] == 403
    writer = signed_in(console, caller)
    assert 'href="/console/schedules/new"' in writer.request("GET", "/console/schedules")["body"]


def test_the_form_offers_the_kinds_and_their_subjects_by_name(console, call, caller, batches):
    page = signed_in(console, caller).request("GET", "/console/schedules/new")
    assert page["statusCode"] == 200
    body = page["body"]
    assert 'value="accounting/batch.roll"' in body and 'value="accounting/reconciliation.sweep"' in body
    assert f'value="{batches["daily"]}"' in body and "Daily sales" in body and "Cash book" in body
    assert batches["theirs"] not in body and "Their batch" not in body


def test_preview_shows_the_march_shift_and_keeps_what_was_typed(console, call, caller):
    browser = signed_in(console, caller)
    token = browser.csrf("/console/schedules/new")
    reply = browser.request("POST", "/console/schedules/new", {**form(token), "intent": "preview"})
    assert reply["statusCode"] == 200
    body = reply["body"]
    preview = body.split('id="preview-heading"', 1)[1]
    assert re.search(r"2027-03-14 03:30 EDT</time> <small>\(intended 2027-03-14 02:30\)</small></td>\s*"
                     r"<td>2027-03-14 07:30 UTC</td>\s*<td><span class=\"mark\"[^>]*>DST shift</span>", preview)
    assert 'value="Second Sunday"' in body and 'value="form-key-1"' in body
    assert re.search(r'<option value="monthly_nth" selected>', body)
    assert call("GET", "/schedules").body["items"] == []


def test_create_twice_with_one_form_makes_one_schedule(console, call, caller, batches):
    browser = signed_in(console, caller)
    token = browser.csrf("/console/schedules/new")
    sent = {**form(token, kind="accounting/batch.roll"), "subject:accounting/batch.roll": batches["cash"],
            "intent": "create"}
    first = browser.request("POST", "/console/schedules/new", sent)
    second = browser.request("POST", "/console/schedules/new", sent)
    assert first["statusCode"] == second["statusCode"] == 303
    items = call("GET", "/schedules").body["items"]
    assert len(items) == 1
    made = items[0]
    assert (made["name"], made["work_kind"], made["subject_id"]) == ("Second Sunday", "batch.roll", batches["cash"])
    assert made["recurrence"]["calendar"]["nth_weekday"] == [2, "SU"]
    page = browser.request("GET", f"/console/schedules/{made['id']}?done=create")["body"]
    assert "The schedule was created." in page and "Cash book" in page
    assert f"Made by</dt><dd><bdi>{caller.user_id}</bdi>" in page


def test_a_refusal_shows_the_apis_reason_on_its_field(console, call, caller, batches):
    browser = signed_in(console, caller)
    token = browser.csrf("/console/schedules/new")
    # a kind that needs a subject, sent without one
    reply = browser.request("POST", "/console/schedules/new",
                            {**form(token, kind="accounting/batch.roll"), "intent": "create"})
    assert reply["statusCode"] == 422
    body = reply["body"]
    assert "subject_id: batch.roll needs the id of a recurring batch of this workspace" in body
    assert re.search(r'id="sn-subject-accounting/batch.roll" name="subject:accounting/batch.roll" '
                     r'aria-invalid="true"', body)
    # the corrected form is a new request: the page gives it a new key
    key = re.search(r'name="key" value="([^"]+)"', body).group(1)
    assert key != "form-key-1"
    # a rule the API refuses names the rule's field and keeps the name
    bad = browser.request("POST", "/console/schedules/new", {**form(token, key, times="25:00"), "intent": "create"})
    assert bad["statusCode"] == 422 and 'id="rf-times"' in bad["body"]
    assert re.search(r'id="rf-times" name="times" value="25:00"[^>]*aria-invalid="true"', bad["body"])
    assert 'value="Second Sunday"' in bad["body"]
    # the JSON editor, chosen, is the rule
    broken = browser.request("POST", "/console/schedules/new", {**form(token), "editor": "json",
                                                                "recurrence": "{", "intent": "preview"})
    assert broken["statusCode"] == 422 and "recurrence: is not valid JSON" in broken["body"]
    assert call("GET", "/schedules").body["items"] == []
    # and once corrected, it is created
    key = re.search(r'name="key" value="([^"]+)"', bad["body"]).group(1)
    fixed = browser.request("POST", "/console/schedules/new",
                            {**form(token, key, kind="accounting/batch.roll"),
                             "subject:accounting/batch.roll": batches["daily"], "intent": "create"})
    assert fixed["statusCode"] == 303 and len(call("GET", "/schedules").body["items"]) == 1


def test_rename_change_subject_then_delete(console, call, caller, batches):
    made = call("POST", "/schedules", new_schedule(work_kind="batch.roll", subject_id=batches["daily"])).body
    browser = signed_in(console, caller)
    path = f"/console/schedules/{made['id']}"
    token = browser.csrf(path)
    changed = browser.request("POST", f"{path}/definition",
                              {"csrf": token, "name": "Cash roll", "subject_id": batches["cash"]})
    assert changed["statusCode"] == 303
    # the page lands on its confirmation, not on the form's anchor below it
    assert _header(changed, "Location") == f"{path}?done=update#done"
    assert '<p class="done" id="done" role="status">The schedule was updated.</p>' in browser.request(
        "GET", f"{path}?done=update")["body"]
    now = call("GET", f"/schedules/{made['id']}").body["schedule"]
    assert (now["name"], now["subject_id"]) == ("Cash roll", batches["cash"])
    # another workspace's subject is refused on the field, keeping what was typed
    refused = browser.request("POST", f"{path}/definition",
                              {"csrf": token, "name": "Other", "subject_id": batches["theirs"]})
    assert refused["statusCode"] == 422
    assert "subject_id: no recurring batch with this id in this workspace" in refused["body"]
    assert 'value="Other"' in refused["body"]
    # the confirmation says what is kept
    confirm = browser.request("GET", f"{path}/delete")
    assert confirm["statusCode"] == 200
    assert "its runs (0) and its history" in html_lib.unescape(confirm["body"])
    assert '<button type="submit" class="danger">Delete the schedule</button>' in confirm["body"]
    assert "its address says it was deleted, when and by whom" in html_lib.unescape(confirm["body"])
    admin = signed_in(console, caller, roles=("schedules:read", "schedules:write", "workspace:admin"))
    assert 'href="/console/audit?kind=schedule"' in admin.request("GET", f"{path}/delete")["body"]
    deleted = browser.request("POST", f"{path}/delete", {"csrf": token})
    assert deleted["statusCode"] == 303
    listed = browser.get_decoded("/console/schedules?done=delete")["body"]
    assert ("The schedule was deleted; its runs and history are kept in the workspace's audit log, which a "
            "workspace admin reads.") in listed
    assert call("GET", f"/schedules/{made['id']}").status == 410
    assert browser.request("POST", f"{path}/delete", {"csrf": token})["statusCode"] == 404


def test_another_workspaces_schedule_is_not_found(console, call, caller):
    theirs = Caller(workspace_id=uuid.uuid4())
    made = call("POST", "/schedules", new_schedule(), as_=theirs).body
    browser = signed_in(console, caller)
    token = browser.csrf("/console/schedules/new")
    path = f"/console/schedules/{made['id']}"
    assert browser.request("GET", f"{path}/delete")["statusCode"] == 404
    assert browser.request("POST", f"{path}/delete", {"csrf": token})["statusCode"] == 404
    assert browser.request("POST", f"{path}/definition", {"csrf": token, "name": "x"})["statusCode"] == 404
    assert call("GET", f"/schedules/{made['id']}", as_=theirs).body["schedule"]["name"] == "nightly sweep"


def test_a_reader_cannot_delete_or_rename(console, call, caller):
    made = call("POST", "/schedules", new_schedule()).body
    browser = signed_in(console, caller, roles=("schedules:read",))
    path = f"/console/schedules/{made['id']}"
    page = browser.request("GET", path)["body"]
    assert "/delete" not in page and "/definition" not in page
    token = browser.csrf(path)
    assert browser.request("POST", f"{path}/delete", {"csrf": token})["statusCode"] == 403
    assert call("GET", f"/schedules/{made['id']}").status == 200


def test_the_zone_picker_offers_the_places_not_their_aliases(console, caller):
    body = signed_in(console, caller).request("GET", "/console/schedules/new")["body"]
    zones = re.search(r'<select id="rf-timezone".*?</select>', body, re.S).group(0)
    assert "<option>Asia/Kolkata</option>" in zones and "<option>Europe/Berlin</option>" in zones
    assert re.search(r"<option( selected)?>UTC</option>", zones)
    for alias in ("Asia/Calcutta", "Africa/Asmera", "America/Buenos_Aires", "US/Eastern", "America/Knox_IN"):
        assert f"<option>{alias}</option>" not in zones


def test_the_schedule_page_names_its_people_with_the_id_in_a_title(console, call, db_url):
    from tests.api.conftest import seed_member

    roles = "schedules:read,schedules:write,queries:read,queries:write"
    writer = seed_member(db_url, roles=("queries:admin",), token_roles=roles)
    made = call("POST", "/schedules", new_schedule(name="Named sweep"), as_=writer).body
    browser = Browser(console)
    browser.sign_in(writer, tuple(roles.split(",")))
    page = browser.request("GET", f"/console/schedules/{made['id']}")["body"]
    assert f'<dt>Made by</dt><dd><span title="{writer.user_id}"><bdi>Member</bdi></span>' in page
    assert "<dt>Last changed by</dt>" in page
    # the zones in two short sentences (the rule's only when it differs from the workspace's)
    note = "<p class=\"note\">Times are Europe/Berlin time, UTC beside. The rule's occurrences are America/New_York"
    assert note in page.replace("&#39;", "'")
    assert f'by <span title="{writer.user_id}"><bdi>Member</bdi></span>' in page  # the history's entry
