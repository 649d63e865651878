"""The local stack's concurrent consumers (``serve``, the benchmarks): a mapping invokes the
REAL consumer handler with up to its maximum concurrency at once, so one workspace's report
delivery waiting for its render holds one of the queries pipeline's consumers, not all of
them: another workspace's delivery starts and settles meanwhile. The real PostgreSQL, moto,
the real dispatcher, consumer and renderer handlers; the render's slowness made by the
renderer hook the benchmarks use, held until the other run has settled (no time bound)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, date, datetime
from uuid import UUID, uuid4

from timekeeper.db.connection import connect
from timekeeper.edge import adapters
from timekeeper.topology import QUERIES

OWNER = "owner"
#: The longest a render waits for the other workspace's run to start (a guard against a
#: hang when the consumers run one after the other; never reached when they run at once).
GUARD_S = 30


def _workspace(conn, *, report: bool, due: datetime) -> UUID:
    """A workspace with its owner, a saved query of open invoices and one delivery of it
    (``report``: of a one-section report over it, as PDF; else the query as CSV), due at ``due``."""
    from timekeeper.platform import directory
    from timekeeper.reporting import reports, store
    from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule

    ws = uuid4()
    with conn.transaction():
        directory.create_workspace(conn, workspace_id=ws, name="ws", timezone="UTC", now=due)
        directory.upsert_user(conn, user_id=OWNER, display_name="Owner", email="owner@example.test", now=due)
        directory.add_member(conn, workspace_id=ws, user_id=OWNER, roles=["queries:admin"], now=due)
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', 'Member', %s) RETURNING id", (ws, date(2026, 1, 1))).fetchone()["id"]
        conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor,"
                     " currency, status) VALUES (%s, %s, 'INV-1', %s, %s, 100, 'EUR', 'open')",
                     (ws, member, date(2026, 11, 1), date(2026, 12, 1)))
        query, _ = store.create_query(conn, workspace_id=ws, name="Invoices", actor=OWNER, now=due,
                                      definition={"entity": "invoices", "columns": ["number", "amount_minor"]})
        source = Source(kind="query", query_id=query.id)
        if report:
            made, _ = reports.create_report(conn, workspace_id=ws, name="Pack", actor=OWNER, now=due, definition={
                "title": "Pack", "sections": [{"heading": "Invoices", "query_id": str(query.id)}]})
            source = Source(kind="report", report_id=made.id)
        create_query_schedule(conn, workspace_id=ws, actor=OWNER, now=due, new=NewQuerySchedule(
            name="Delivery", recurrence={"cron": f"{due.minute} {due.hour} * * *", "timezone": "UTC"},
            source=source, format="pdf" if report else "csv", recipients=[OWNER],
            subject_template="{{ schedule_name }}", body_template="<p><a href='{{ link }}'>file</a></p>"))
        conn.execute("UPDATE schedules SET next_due_at = %s WHERE workspace_id = %s", (due, ws))
    return ws


def _run(conn, workspace: UUID):
    return conn.execute("SELECT state, started_at, finished_at FROM schedule_runs WHERE workspace_id = %s",
                        (workspace,)).fetchone()


class RenderAfterSettle:
    """A renderer client that starts the real render once ``workspace``'s run has settled
    (or after :data:`GUARD_S`): a render slow for as long as the other run takes. It keeps
    what that run was when the render was asked for."""

    def __init__(self, inner, db_url: str) -> None:
        self.inner, self.db_url = inner, db_url
        self.workspace: UUID | None = None
        self.other_run_then: list[dict | None] = []

    def request(self, *, workspace_id, render_id) -> None:
        def later():
            with connect(self.db_url) as own:
                deadline = time.monotonic() + GUARD_S
                run = None
                while time.monotonic() < deadline:
                    run = _run(own, self.workspace) if self.workspace else None
                    if run is not None and run["state"] == "succeeded":
                        break
                    time.sleep(0.05)
                self.other_run_then.append(dict(run) if run else None)
            self.inner.request(workspace_id=workspace_id, render_id=render_id)

        threading.Thread(target=later, daemon=True).start()


def test_a_report_delivery_waiting_for_its_render_does_not_hold_another_workspaces_delivery(db_url, conn):
    from timekeeper.local.stack import start_local_stack

    stack = start_local_stack(database="unused", reset=False, aws_server=False, database_url=db_url,
                              concurrent_consumers=True)
    try:
        due = datetime.now(UTC).replace(second=0, microsecond=0)
        # Given workspace A's report delivery, started by the real consumer and waiting for its render
        noisy = _workspace(conn, report=True, due=due)
        renderer = RenderAfterSettle(stack.renderer, db_url)
        adapters.install_renderer_client(renderer)
        assert stack.dispatch(QUERIES, datetime.now(UTC))["published"] == 1
        assert stack.poll(datetime.now(UTC), [QUERIES.name]) == 1
        # When workspace B's CSV delivery is due and published while A's holds its consumer
        quiet = _workspace(conn, report=False, due=due)
        renderer.workspace = quiet
        assert stack.dispatch(QUERIES, datetime.now(UTC))["published"] == 1
        assert stack.poll(datetime.now(UTC), [QUERIES.name]) == 1
        stack.wait()
        while stack.poll(datetime.now(UTC), [QUERIES.name]):
            stack.wait()
        stack.renderer.wait()
    finally:
        stack.stop()
    # Then B's run had started and settled before A's render was even asked for (A's
    # delivery held its consumer until the render was done), and then A's settled too
    (seen,) = renderer.other_run_then
    assert seen is not None and seen["state"] == "succeeded"
    a = _run(conn, noisy)
    assert a["state"] == "succeeded" and seen["started_at"] > a["started_at"]
