"""The deliveries list people scan: filtered by name, source kind, owner and status on the
server (``GET /query-schedules``, a bad filter 422 naming it, cursor paging kept), each
delivery naming its source, pinned version and owner; the console's list keeps its
filters in a GET form; a delivery's page names its source and warns of a recipient
without an address. Against the real API resolver and database."""

from __future__ import annotations

import re
from datetime import timedelta

from tests.api.conftest import NOW, Caller
from tests.api.test_console import Browser
from timekeeper.db.connection import connect
from timekeeper.platform.directory import add_member, upsert_user

TOKEN = "queries:read,queries:write"


def _ana(ws) -> Caller:
    return Caller(user_id="ana", workspace_id=ws["a"], roles=TOKEN, enrol=False)


def _make(call, ws, name, *, version=None, recipients=("rui",)):
    body = {"name": name, "recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}, "format": "csv",
            "source": {"kind": "query", "query_id": ws["query"], **({"query_version": version} if version else {})},
            "recipients": list(recipients), "subject_template": "{{ schedule_name }}",
            "body_template": "<a href='{{ link }}'>file</a>"}
    reply = call("POST", "/query-schedules", body, as_=_ana(ws))
    assert reply.status == 201, reply.body
    return reply.body["id"]


def _names(call, ws, query: str) -> list[str]:
    reply = call("GET", f"/query-schedules?{query}", as_=_ana(ws))
    assert reply.status == 200, reply.body
    return sorted(item["name"] for item in reply.body["items"])


def test_the_list_filters_by_name_source_owner_and_status_and_names_each_source(call, ws):
    daily = _make(call, ws, "Daily invoices", version=1)
    weekly = _make(call, ws, "Weekly INVOICES")
    _make(call, ws, "Monthly board pack")
    assert call("POST", f"/query-schedules/{weekly}/pause", as_=_ana(ws)).status == 200
    assert _names(call, ws, "name=invoices") == ["Daily invoices", "Weekly INVOICES"]
    assert _names(call, ws, "name=invoices&status=paused") == ["Weekly INVOICES"]
    assert _names(call, ws, "status=active") == ["Daily invoices", "Monthly board pack"]
    assert _names(call, ws, "source=report") == []
    assert _names(call, ws, "source=query&owner=ana") == ["Daily invoices", "Monthly board pack", "Weekly INVOICES"]
    assert _names(call, ws, "owner=rui") == []
    # Paging keeps the filters
    first = call("GET", "/query-schedules?name=invoices&limit=1", as_=_ana(ws)).body
    rest = call("GET", f"/query-schedules?name=invoices&limit=1&cursor={first['next_cursor']}", as_=_ana(ws)).body
    assert sorted(i["name"] for i in first["items"] + rest["items"]) == ["Daily invoices", "Weekly INVOICES"]
    assert rest["next_cursor"] is None
    # Each names its source, its pinned version and its owner
    item = call("GET", "/query-schedules?name=daily", as_=_ana(ws)).body["items"][0]
    assert item["id"] == daily
    assert (item["source"]["name"], item["source"]["query_version"]) == ("Open invoices", 1)
    assert (item["owner_name"], item["owner_email"]) == ("Ana Analyst", "ana@x.test")
    # Another workspace's member sees none of them
    bea = Caller(user_id="bea", workspace_id=ws["b"], roles=TOKEN, enrol=False)
    assert call("GET", "/query-schedules?name=invoices", as_=bea).body["items"] == []


def test_a_bad_filter_is_a_422_naming_it(call, ws):
    for query, field in (("status=gone", "status"), ("source=table", "source"), ("name=", "name"),
                         ("owner=" + "a" * 201, "owner"), ("name=a\u202eb", "name")):
        reply = call("GET", f"/query-schedules?{query}", as_=_ana(ws))
        assert (reply.status, reply.body.get("field")) == (422, field), query


def _browser(console, ws) -> Browser:
    browser = Browser(console)
    browser.sign_in(_ana(ws), ("queries:read", "queries:write"))
    return browser


def test_the_console_list_keeps_its_filters_and_names_source_and_owner(call, ws, console):
    _make(call, ws, "Daily <invoices>", version=1)
    _make(call, ws, "Board pack")
    browser = _browser(console, ws)
    page = browser.get_decoded("/console/deliveries?name=invoices&status=active&owner=ana")
    assert page["statusCode"] == 200
    html = page["body"]
    assert 'id="filter-name" name="name" value="invoices"' in html
    assert '<option value="active" selected>' in html and '<option value="ana" selected>' in html
    assert "Board pack" not in html and "<bdi>Daily &lt;invoices&gt;</bdi>" in html
    assert "Query <bdi>Open invoices</bdi>, version 1" in html
    assert '<span title="ana"><bdi>Ana Analyst</bdi> <small>&lt;<bdi>ana@x.test</bdi>&gt;</small></span>' in html
    # Nothing matches: said so, the filters kept
    none = browser.get_decoded("/console/deliveries?name=nothing")
    assert "No deliveries match these filters." in none["body"] and 'value="nothing"' in none["body"]
    # A bad filter: 422 on its field, what was typed kept
    bad = browser.get_decoded("/console/deliveries?status=gone&name=x")
    assert bad["statusCode"] == 422
    assert re.search(r'<select id="filter-status" name="status" aria-invalid="true"', bad["body"])
    assert 'id="filter-problem" role="alert"' in bad["body"] and 'value="x"' in bad["body"]


def test_a_deliverys_page_names_its_source_and_warns_of_a_recipient_without_an_address(call, ws, console, db_url):
    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id="noa", display_name="Noa Noaddress", email=None, now=NOW)
        add_member(conn, workspace_id=ws["a"], user_id="noa", roles=["queries:read"], now=NOW - timedelta(days=1))
    delivery = _make(call, ws, "Daily", version=2, recipients=("rui", "noa"))
    html = _browser(console, ws).request("GET", f"/console/deliveries/{delivery}")["body"]
    assert (f'Query <a href="/console/queries/{ws["query"]}"><bdi>Open invoices</bdi></a>, version 2') in html
    assert '<span title="rui"><bdi>Rui Reader</bdi> <small>&lt;<bdi>rui@x.test</bdi>&gt;</small></span>' in html
    warning = re.search(r'<dd class="problem" role="status">(.*?)</dd>', html, re.S).group(1)
    assert "Noa Noaddress" in warning and "no e-mail address" in warning and "Rui" not in warning


def test_a_deliverys_runs_stay_live_while_a_run_is_under_way(call, ws, console, db_url):
    delivery = _make(call, ws, "Daily")
    page = f"/console/deliveries/{delivery}"
    browser = _browser(console, ws)
    idle = browser.request("GET", page)["body"]
    assert '<div id="delivery-runs">' in idle and "data-live" not in idle and "No runs yet." in idle
    run = call("POST", f"/query-schedules/{delivery}/run", as_=_ana(ws))
    assert run.status == 202, run.body
    shown = browser.request("GET", page)["body"]
    live = f"{page}/live"
    assert f'<div id="delivery-runs" data-live="{live}" data-live-every="3">' in shown
    assert f'<a href="{page}">Refresh the status</a>' in shown
    fragment = browser.request("GET", live)
    assert fragment["statusCode"] == 200 and fragment["body"].lstrip().startswith('<div id="delivery-runs" data-live=')
    assert "<html" not in fragment["body"] and "queued" in fragment["body"].lower()
    with connect(db_url) as conn:
        conn.execute("UPDATE schedule_runs SET state = 'failed', outcome_code = 'source_access_lost', "
                     "finished_at = now() WHERE id = %s", (run.body["run_id"],))
    done = browser.request("GET", live)["body"]
    assert '<div id="delivery-runs">' in done and "data-live" not in done and "Refresh the status" not in done
    # Who asked for the run: by name and address, the id in a title
    assert 'by <span title="ana"><bdi>Ana Analyst</bdi> <small>&lt;<bdi>ana@x.test</bdi>&gt;</small></span>' in done
    bea = Browser(console)
    bea.sign_in(Caller(user_id="bea", workspace_id=ws["b"], roles=TOKEN, enrol=False), ("queries:read",))
    assert bea.request("GET", live)["statusCode"] == 404


def test_adding_a_recipient_without_an_address_warns(ws, console, db_url):
    from tests.api.test_console_delivery_authoring import _post

    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id="noa", display_name="Noa Noaddress", email=None, now=NOW)
        add_member(conn, workspace_id=ws["a"], user_id="noa", roles=["queries:read"], now=NOW - timedelta(days=1))
    browser = _browser(console, ws)
    path = "/console/deliveries/new"
    page = browser.request("GET", path)
    common = {"name": "Daily", "source": f"query:{ws['query']}:", "format": "csv"}
    added = _post(browser, path, page, intent="add", candidate="noa", **common)
    assert added["statusCode"] == 200
    assert "Noa Noaddress was added: they may read the source, but they have no e-mail address" in added["body"]
    other = _post(browser, path, page, intent="add", candidate="rui", **common)
    assert "Rui Reader was added: they may read the source." in other["body"]
    assert "no e-mail address" not in other["body"]
