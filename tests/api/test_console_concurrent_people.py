"""Console pages answered at once by ``serve`` (threads in one process, each execution
environment with its own console and API resolvers): each page is its own person's. The
console builds a request's context (its session, from the cookie) from the event its
resolver answers; Powertools kept that event on its router class, so without
request-scoped state a page could be rendered for another person's session, with another
workspace's schedules."""

from __future__ import annotations

import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
import requests

from tests.api.conftest import NOW, serving
from timekeeper.console.sessions import SESSION_COOKIE
from timekeeper.db.connection import connect
from timekeeper.platform import directory
from timekeeper.schedules import service

#: Workspaces whose people load pages at once, one person each.
WORKSPACES = 6
#: Pages in all, spread over the people, asked for by this many client threads.
REQUESTS, CLIENTS = 96, 16


@pytest.fixture(scope="module")
def people(db_url):
    """One person per workspace (a display name of their own) and one schedule per
    workspace named after it: ``[{"user_id", "name", "workspace_id", "schedule"}]``."""
    tag = uuid.uuid4().hex[:6]
    out = []
    with connect(db_url) as conn, conn.transaction():
        for i in range(WORKSPACES):
            workspace = directory.create_workspace(conn, name=f"Club {i} {tag}", timezone="Europe/Berlin", now=NOW)
            person = {"user_id": f"person-{i}-{tag}", "name": f"Person {i} {tag}", "workspace_id": str(workspace.id),
                      "schedule": f"Sweep of club {i} {tag}"}
            directory.upsert_user(conn, user_id=person["user_id"], display_name=person["name"], now=NOW)
            directory.add_member(conn, workspace_id=workspace.id, user_id=person["user_id"],
                                 roles=("schedules:read",), now=NOW)
            service.create_schedule(conn, workspace_id=workspace.id, owner="accounting",
                                    work_kind="reconciliation.sweep", actor=person["user_id"], now=NOW,
                                    name=person["schedule"], recurrence={"cron": "0 * * * *", "timezone": "UTC"})
            out.append(person)
    return out


def _signed_in(base_url: str, person: dict[str, str]) -> str:
    """The session cookie of ``person`` after the development sign-in."""
    browser = requests.Session()
    reply = browser.post(f"{base_url}/console/sign-in", timeout=60, data={
        "user_id": person["user_id"], "workspace_id": person["workspace_id"], "role:schedules:read": "on"})
    assert reply.status_code == 200 and person["schedule"] in reply.text, reply.text[:500]
    return browser.cookies.get(SESSION_COOKIE)


def test_pages_loaded_at_once_by_people_of_many_workspaces_are_each_their_own(db_url, people):
    with serving(db_url) as server:
        cookies = [_signed_in(server.base_url, p) for p in people]
        start = Barrier(CLIENTS)
        # (threads switch every few microseconds instead of every 5 ms, so requests overlap
        # everywhere, not only where one waits on the database)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)

        def load(i: int) -> tuple[int, int, str]:
            who = i % WORKSPACES
            if i < CLIENTS:
                start.wait(30)  # the first page of every client thread is asked for at once
            reply = requests.get(f"{server.base_url}/console/schedules", timeout=60, allow_redirects=False,
                                 headers={"Cookie": f"{SESSION_COOKIE}={cookies[who]}"})
            return who, reply.status_code, reply.text

        # When six people of six workspaces load their schedules page, sixteen at a time
        try:
            with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
                pages = list(pool.map(load, range(REQUESTS)))
        finally:
            sys.setswitchinterval(switch)
    # Then every page is answered, naming its own person and listing its own workspace's
    # schedule, never another person's name or another workspace's schedule
    assert [status for _, status, _ in pages] == [200] * REQUESTS
    wrong = []
    for who, _, html in pages:
        others = [p for i, p in enumerate(people) if i != who]
        if (f"<bdi>{people[who]['name']}</bdi>" not in html or people[who]["schedule"] not in html
                or any(p["name"] in html or p["schedule"] in html for p in others)):
            wrong.append(who)
    assert wrong == []
