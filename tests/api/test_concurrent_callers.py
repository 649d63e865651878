"""Requests answered at once by ``serve``'s API execution environments (threads in one
process, each with its own resolver): each answer is its own caller's. Powertools keeps a
resolver's current event on its router class and hands each included router to the last
resolver built, so without request-scoped state one thread's request could be answered
with another's caller (another workspace's data) or lose its request context (a 500)."""

from __future__ import annotations

import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
import requests

from tests.api.conftest import seed_member, serving

#: Workspaces calling at once, each with one member.
WORKSPACES = 6
#: Requests in all, spread over the workspaces, sent by this many client threads.
REQUESTS, CLIENTS = 240, 16


@pytest.fixture(scope="module")
def callers(db_url):
    """One member per workspace, each with a token naming only their own workspace."""
    out = []
    for i in range(WORKSPACES):
        user = f"concurrent-{i}-{uuid.uuid4().hex[:6]}"
        caller = seed_member(db_url, user_id=user, token_roles="queries:read,queries:write")
        out.append(caller)
    return out


def test_requests_from_many_workspaces_at_once_are_each_answered_for_their_own_caller(db_url, callers):
    with serving(db_url) as server:
        start = Barrier(CLIENTS)
        # (threads switch every few microseconds instead of every 5 ms, so requests overlap
        # everywhere, not only where one waits on the database or the network)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)

        def call(i: int) -> tuple[str, int, list[str]]:
            caller = callers[i % WORKSPACES]
            if i < CLIENTS:
                start.wait(60)  # the first request of every client thread leaves at once
            token = f"dev:{caller.user_id}:{caller.workspace_id}:{caller.roles}"
            reply = requests.get(f"{server.base_url}/members", headers={"Authorization": f"Bearer {token}"},
                                 timeout=30)
            members = [m["user_id"] for m in reply.json().get("items", [])] if reply.status_code == 200 else []
            return caller.user_id, reply.status_code, members

        # When six workspaces' members list their members, sixteen requests at a time
        try:
            with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
                answers = list(pool.map(call, range(REQUESTS)))
        finally:
            sys.setswitchinterval(switch)
    # Then every request is answered (no 500 for a lost request context) with its own
    # workspace's one member: never another workspace's
    assert [status for _, status, _ in answers] == [200] * REQUESTS
    wrong = [(user, members) for user, _, members in answers if members != [user]]
    assert wrong == []


#: What each client thread sends between its good requests: refusals made at each stage of a
#: request (before routing, in a middleware, in validation, in an exception handler).
FAILING = (
    ("GET", "/members?bogus=1", None, {}),  # the parameters' middleware: 422
    ("GET", f"/queries/{uuid.uuid4()}", None, {}),  # the handler's not-found: 404
    ("POST", "/queries", "{not json", {"Content-Type": "application/json"}),  # validation: 422
    ("POST", "/queries", "a=b", {"Content-Type": "application/x-www-form-urlencoded"}),  # before routing: 415
    ("GET", "/no-such-route", None, {}),  # the not-found handler: 404
    ("DELETE", "/members", None, {}),  # 405
)


def test_refusals_at_every_stage_interleaved_at_once_leave_no_request_state_to_the_next(db_url, callers):
    with serving(db_url) as server:
        start = Barrier(CLIENTS)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)

        def client(c: int) -> list[tuple[str, int, list[str]]]:
            caller = callers[c % WORKSPACES]
            token = {"Authorization": f"Bearer dev:{caller.user_id}:{caller.workspace_id}:{caller.roles}"}
            start.wait(60)
            out = []
            for i in range(REQUESTS // CLIENTS):
                method, path, body, headers = FAILING[(c + i) % len(FAILING)]
                refused = requests.request(method, f"{server.base_url}{path}", data=body,
                                           headers={**token, **headers}, timeout=30)
                good = requests.get(f"{server.base_url}/members", headers=token, timeout=30)
                members = [m["user_id"] for m in good.json().get("items", [])] if good.status_code == 200 else []
                out.append((caller.user_id, refused.status_code, members))
            return out

        try:
            with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
                answers = [a for per_client in pool.map(client, range(CLIENTS)) for a in per_client]
        finally:
            sys.setswitchinterval(switch)
    # Every refusal is a 4xx (never a 500 from a request context another request cleared), and
    # the good request after it is answered for its own caller alone
    assert {status for _, status, _ in answers} <= {404, 405, 415, 422}
    assert [(user, members) for user, _, members in answers if members != [user]] == []
