"""The schedules list people scan: filtered by name, work kind, owner module and status on
the server (``GET /schedules``, a bad filter 422 naming it, paging kept), and the
console's list keeping its filters in a GET form. Against the real API and database."""

from __future__ import annotations

import re

from tests.api.conftest import new_schedule
from tests.api.test_console import Browser


def _names(call, query: str) -> list[str]:
    reply = call("GET", f"/schedules?{query}")
    assert reply.status == 200, reply.body
    return sorted(item["name"] for item in reply.body["items"])


def _seed(call, batches):
    call("POST", "/schedules", new_schedule(name="Nightly sweep"))
    call("POST", "/schedules", new_schedule(name="Hourly SWEEP", active=False))
    made = call("POST", "/schedules", new_schedule(name="Cash roll", work_kind="batch.roll",
                                                   subject_id=batches["cash"]))
    assert made.status == 201, made.body


def test_the_list_filters_by_name_kind_owner_and_status(call, batches):
    _seed(call, batches)
    assert _names(call, "name=sweep") == ["Hourly SWEEP", "Nightly sweep"]
    assert _names(call, "kind=batch.roll") == ["Cash roll"]
    assert _names(call, "kind=reconciliation.sweep&status=paused") == ["Hourly SWEEP"]
    assert _names(call, "owner=accounting&name=roll") == ["Cash roll"]
    assert _names(call, "name=nothing") == []
    first = call("GET", "/schedules?name=sweep&limit=1").body
    rest = call("GET", f"/schedules?name=sweep&limit=1&cursor={first['next_cursor']}").body
    assert sorted(i["name"] for i in first["items"] + rest["items"]) == ["Hourly SWEEP", "Nightly sweep"]
    assert rest["next_cursor"] is None


def test_a_bad_filter_is_a_422_naming_it(call):
    for query, field in (("status=gone", "status"), ("owner=nobody", "owner"), ("name=", "name"),
                         ("kind=" + "k" * 101, "kind"), ("name=a\u202eb", "name")):
        reply = call("GET", f"/schedules?{query}")
        assert (reply.status, reply.body.get("field")) == (422, field), query


def test_the_console_list_keeps_its_filters(call, caller, console, batches):
    _seed(call, batches)
    browser = Browser(console)
    browser.sign_in(caller)
    page = browser.get_decoded("/console/schedules?name=sweep&kind=reconciliation.sweep&status=paused")
    assert page["statusCode"] == 200
    html = page["body"]
    assert 'id="filter-name" name="name" value="sweep"' in html
    assert '<option value="reconciliation.sweep" selected>' in html and '<option value="paused" selected>' in html
    assert "<bdi>Hourly SWEEP</bdi>" in html and "Nightly sweep" not in html and "Cash roll" not in html
    assert 'role="search" aria-label="Filter the schedules"' in html
    assert "No schedules match these filters." in browser.get_decoded("/console/schedules?name=zzz")["body"]
    bad = browser.get_decoded("/console/schedules?status=gone&name=x")
    assert bad["statusCode"] == 422
    assert re.search(r'<select id="filter-status" name="status" aria-invalid="true"', bad["body"])
    assert 'value="x"' in bad["body"] and 'id="filter-problem" role="alert"' in bad["body"]


def test_the_history_says_what_a_change_changed(call, caller, console):
    made = call("POST", "/schedules", new_schedule(name="Nightly <sweep>")).body
    renamed = call("PATCH", f"/schedules/{made['id']}", {"name": "Nightly sweep (books)"})
    assert renamed.status == 200, renamed.body
    events = call("GET", f"/schedules/{made['id']}").body["history"]["events"]
    assert events[0]["detail"]["changes"] == {"name": {"from": "Nightly <sweep>", "to": "Nightly sweep (books)"}}
    browser = Browser(console)
    browser.sign_in(caller)
    html = browser.request("GET", f"/console/schedules/{made['id']}")["body"]
    assert "<li>Name: <bdi>Nightly &lt;sweep&gt;</bdi> → <bdi>Nightly sweep (books)</bdi></li>" in html


def test_a_schedules_runs_stay_live_while_a_run_is_under_way(call, caller, console, db_url):
    from tests.api.conftest import Caller
    from timekeeper.db.connection import connect

    made = call("POST", "/schedules", new_schedule(name="Sweep")).body
    page = f"/console/schedules/{made['id']}"
    browser = Browser(console)
    browser.sign_in(caller)
    idle = browser.request("GET", page)["body"]
    assert '<div id="schedule-runs">' in idle and "data-live" not in idle
    run = call("POST", f"/schedules/{made['id']}/run", headers={"Idempotency-Key": "live-1"})
    assert run.status == 202, run.body
    live = f"{page}/live"
    shown = browser.request("GET", page)["body"]
    assert f'<div id="schedule-runs" data-live="{live}" data-live-every="3">' in shown
    assert f'<a href="{page}">Refresh the status</a>' in shown
    fragment = browser.request("GET", live)
    assert fragment["statusCode"] == 200 and fragment["body"].lstrip().startswith('<div id="schedule-runs" data-live=')
    assert "<html" not in fragment["body"]
    with connect(db_url) as conn:
        conn.execute("UPDATE schedule_runs SET state = 'succeeded', outcome_code = 'succeeded', finished_at = now() "
                     "WHERE schedule_id = %s", (made["id"],))
    done = browser.request("GET", live)["body"]
    assert '<div id="schedule-runs">' in done and "data-live" not in done
    other = Browser(console)
    other.sign_in(Caller(user_id="someone-else"))
    assert other.request("GET", live)["statusCode"] == 404
