"""The query-schedule listing and a schedule's delivery history page with keyset cursors,
as the other listings do: every row exactly once across pages (also runs sharing one
occurrence instant), ``next_cursor`` null on the last page, a malformed cursor a 422
``invalid_cursor``. Real PostgreSQL through the API's own login."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.conftest import ALL_ROLES, NOW, seed_member
from timekeeper.db.connection import connect
from timekeeper.queries import store

DELIVERY = {"recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}, "format": "csv",
            "subject_template": "{{ schedule_name }}", "body_template": "<a href='{{ link }}'>file</a>"}


@pytest.fixture
def analyst(db_url):
    """A member of a fresh workspace who may read and write queries, and a saved query."""
    who = seed_member(db_url, roles=("queries:admin",), token_roles=f"queries:read,queries:write,{ALL_ROLES}")
    with connect(db_url) as conn, conn.transaction():
        query, _ = store.create_query(conn, workspace_id=who.workspace_id, name="Invoices", actor=who.user_id,
                                      now=NOW, definition={"entity": "invoices", "columns": ["number"]})
    return who, query.id


def _create(call, who, query_id, name):
    reply = call("POST", "/query-schedules", {**DELIVERY, "name": name, "recipients": [who.user_id],
                                              "source": {"kind": "query", "query_id": str(query_id)}}, as_=who)
    assert reply.status == 201, reply.body
    return reply.body["id"]


def _all_pages(call, who, target, limit):
    pages, cursor = [], None
    while True:
        reply = call("GET", f"{target}?limit={limit}" + (f"&cursor={cursor}" if cursor else ""), as_=who)
        assert reply.status == 200, reply.body
        pages.append(reply.body["items"])
        cursor = reply.body["next_cursor"]
        if cursor is None:
            return pages


def test_query_schedules_page_oldest_first_with_a_cursor(call, analyst, clock_now):
    who, query_id = analyst
    ids = []
    for i in range(5):
        clock_now["now"] = NOW + timedelta(minutes=i)
        ids.append(_create(call, who, query_id, f"s{i}"))
    pages = _all_pages(call, who, "/query-schedules", 2)
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [item["id"] for page in pages for item in page] == ids
    # One page holds them all when the limit allows; the page size is bounded
    whole = call("GET", "/query-schedules?limit=200", as_=who).body
    assert ([item["id"] for item in whole["items"]], whole["next_cursor"]) == (ids, None)
    assert call("GET", "/query-schedules?limit=201", as_=who).status == 422
    # A deleted schedule leaves the listing
    assert call("DELETE", f"/query-schedules/{ids[0]}", as_=who).status == 204
    assert [i["id"] for p in _all_pages(call, who, "/query-schedules", 2) for i in p] == ids[1:]


def test_delivery_history_pages_newest_first_and_ties_are_neither_lost_nor_repeated(call, analyst, clock_now):
    who, query_id = analyst
    schedule_id = _create(call, who, query_id, "daily")
    runs = []
    # Two runs at each of three instants (Run now's occurrence is the request's instant)
    for minute in range(3):
        clock_now["now"] = NOW + timedelta(minutes=minute)
        for key in ("a", "b"):
            reply = call("POST", f"/query-schedules/{schedule_id}/run", headers={"Idempotency-Key": f"{minute}{key}"},
                         as_=who)
            assert reply.status == 202
            runs.append((minute, reply.body["run_id"]))
    pages = _all_pages(call, who, f"/query-schedules/{schedule_id}/runs", 4)
    assert [len(p) for p in pages] == [4, 2]
    listed = [item["run_id"] for page in pages for item in page]
    assert sorted(listed) == sorted(run for _, run in runs)
    # Newest occurrence first
    minute_of = dict((run, minute) for minute, run in runs)
    assert [minute_of[r] for r in listed] == sorted((minute_of[r] for r in listed), reverse=True)
    # Page size 1 walks the same order
    assert [i["run_id"] for p in _all_pages(call, who, f"/query-schedules/{schedule_id}/runs", 1) for i in p] == listed
    # The default page is 20 runs: here all six, on the last page
    assert call("GET", f"/query-schedules/{schedule_id}/runs", as_=who).body["next_cursor"] is None


@pytest.mark.parametrize("target", ["/query-schedules", "/query-schedules/{id}/runs"])
def test_a_malformed_cursor_is_invalid_cursor(call, analyst, target):
    who, query_id = analyst
    schedule_id = _create(call, who, query_id, "daily")
    reply = call("GET", target.format(id=schedule_id) + "?cursor=not-a-cursor", as_=who)
    assert (reply.status, reply.body["code"], reply.body["field"]) == (422, "invalid_cursor", "cursor")
