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
