"""Twin staff requests sent at once with one Idempotency-Key (a double click on a range's
confirmation, a client retrying before the first answer came), each answered by an API
execution environment of its own (its resolver and connection, as ``serve``'s threads and
Lambda's environments): one range is planned, in one group, and every twin answers it."""

from __future__ import annotations

import json
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from threading import Barrier

from tests.api.conftest import NOW, proxy_event, seed_member
from tests.support import ListPublisher
from timekeeper.api import ApiAdapters, create_app
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.db.connection import connect, login_url
from timekeeper.edge import registries
from timekeeper.local.lambdas import LambdaContext
from timekeeper.platform.directory import create_workspace

#: Twins sent at once, and the workspaces and months of their one range.
TWINS, WORKSPACES, MONTHS = 8, 12, ("2026-12", "2027-02")


def _workspaces(db_url: str, count: int) -> list[uuid.UUID]:
    tag = uuid.uuid4().hex[:8]
    with connect(db_url) as conn, conn.transaction():
        return [create_workspace(conn, name=f"Twin {tag} {i}", timezone="Europe/Berlin", currency="EUR",
                                 now=datetime(2026, 12, 1, tzinfo=UTC)).id for i in range(count)]


def _twins(db_url: str, path: str, body: dict) -> list[tuple[int, dict]]:
    """``POST path`` with ``body`` and one new Idempotency-Key by one staff member, sent by
    :data:`TWINS` execution environments at once; their answers (status, body)."""
    staff = seed_member(db_url, roles=("queries:read",), token_roles="platform:staff")
    event = proxy_event("POST", path, body=body, headers={"Idempotency-Key": f"twin-{uuid.uuid4()}"},
                        claims={"principalId": staff.user_id, "workspace_id": str(staff.workspace_id),
                                "roles": staff.roles})
    # One execution environment per twin: its own resolver and API connection
    connections = [connect_api(login_url(db_url, API_ROLE)) for _ in range(TWINS)]
    apps = [create_app(ApiAdapters(connection=lambda c=c: c, publisher_for=lambda _: ListPublisher(),
                                   registry=registries.work_kinds, now=lambda: NOW,
                                   snapshot_registry=registries.snapshot_types)) for c in connections]
    start = Barrier(TWINS)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often: the twins overlap everywhere

    def twin(app) -> tuple[int, dict]:
        start.wait(60)
        reply = app.resolve(dict(event), LambdaContext(function_name="timekeeper-api"))
        return reply["statusCode"], json.loads(reply["body"])

    try:
        with ThreadPoolExecutor(max_workers=TWINS) as pool:
            return list(pool.map(twin, apps))
    finally:
        sys.setswitchinterval(switch)
        for c in connections:
            c.close()


def test_twin_run_requests_sent_at_once_request_the_month_once_and_all_answer_it(db_url):
    (target,) = _workspaces(db_url, 1)
    # When twins of one re-run request are sent at once
    answers = _twins(db_url, "/snapshots/runs", {
        "owner": "platform", "snapshot_type": "ar_aging", "workspace_id": str(target), "period": "2027-01",
        "mode": "backfill", "reason": "clicked twice"})
    # Then every twin answers the one request's 201 (none is refused for the work its first twin started)
    assert [status for status, _ in answers] == [201] * TWINS, answers
    assert len({answer["id"] for _, answer in answers}) == 1
    with connect(db_url) as conn:
        assert conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE workspace_id = %s",
                            (target,)).fetchone()["n"] == 1


def test_twin_range_requests_sent_at_once_plan_one_range_and_all_answer_it(db_url):
    targets = _workspaces(db_url, WORKSPACES)
    # When twins of one range request are sent at once
    answers = _twins(db_url, "/snapshots/ranges", {
        "owner": "platform", "snapshot_type": "ar_aging", "workspaces": [str(w) for w in targets],
        "first": MONTHS[0], "through": MONTHS[1], "mode": "backfill", "reason": "one range, clicked twice"})
    # Then every twin answers the one planned range: 201, one group, every month planned once
    assert [status for status, _ in answers] == [201] * TWINS, answers
    assert len({answer["group_id"] for _, answer in answers}) == 1
    assert {answer["planned"] for _, answer in answers} == {WORKSPACES * 3}
    with connect(db_url) as conn:
        runs = conn.execute("SELECT count(*) AS runs, count(DISTINCT request_group) AS groups FROM snapshot_runs "
                            "WHERE workspace_id = ANY(%s)", (targets,)).fetchone()
    assert (runs["runs"], runs["groups"]) == (WORKSPACES * 3, 1)
