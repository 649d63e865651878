"""Row-level security, the second tenant wall (migration 0003): under the
API's role a query sees only the workspace its transaction entered, and nothing without
one; the table owner (dispatchers, consumers) still reads across workspaces."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.db.connection import connect, login_url, set_tenant
from timekeeper.schedules import service
from timekeeper.schedules.dispatcher import dispatch

NOW = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
HOURLY = {"cron": "0 * * * *", "timezone": "UTC"}


@pytest.fixture
def two_workspaces(conn):
    """Two workspaces with one schedule each (created through the owner connection)."""
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    out = {}
    for label in ("a", "b"):
        ws = uuid.uuid4()
        row = service.create_schedule(conn, workspace_id=ws, owner="accounting", work_kind="reconciliation.sweep",
                                      recurrence=HOURLY, actor="t", now=NOW - timedelta(hours=2))
        out[label] = (ws, row.id)
    return out


def test_under_the_api_role_a_query_without_the_setting_sees_no_rows(db_url, two_workspaces):
    # Given two workspaces' schedules, visible to the owner
    with connect(db_url) as owner:
        assert owner.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 2
    # When the API role queries without entering a workspace
    with connect(db_url) as conn:
        conn.execute(f"SET ROLE {API_ROLE}")
        with conn.transaction():
            unscoped = conn.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"]
            runs = conn.execute("SELECT count(*) AS n FROM schedule_runs").fetchone()["n"]
    # Then it sees nothing at all
    assert unscoped == 0 and runs == 0


def test_under_the_api_role_a_transaction_sees_only_the_workspace_it_entered(db_url, two_workspaces):
    ws_a, schedule_a = two_workspaces["a"]
    ws_b, schedule_b = two_workspaces["b"]
    with connect(db_url) as conn:
        conn.execute(f"SET ROLE {API_ROLE}")
        with conn.transaction():
            set_tenant(conn, ws_a)
            # An unscoped query (no workspace filter) still sees A's schedule only
            ids = [r["id"] for r in conn.execute("SELECT id FROM schedules").fetchall()]
            # B's row cannot be changed either
            changed = conn.execute("UPDATE schedules SET name = 'x' WHERE id = %s", (schedule_b,)).rowcount
        # The setting is transaction-local: the next transaction sees nothing again
        with conn.transaction():
            after = conn.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"]
    assert ids == [schedule_a] and changed == 0 and after == 0


def test_under_the_api_role_a_row_of_another_workspace_cannot_be_written(db_url, two_workspaces):
    ws_a, _ = two_workspaces["a"]
    with connect(db_url) as conn:
        conn.execute(f"SET ROLE {API_ROLE}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            with conn.transaction():
                set_tenant(conn, ws_a)
                service.create_schedule(conn, workspace_id=uuid.uuid4(), owner="accounting",
                                        work_kind="reconciliation.sweep", recurrence=HOURLY, actor="t", now=NOW)


def test_the_api_role_cannot_delete_rows(db_url, two_workspaces):
    ws_a, schedule_a = two_workspaces["a"]
    with connect(db_url) as conn:
        conn.execute(f"SET ROLE {API_ROLE}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with conn.transaction():
                set_tenant(conn, ws_a)
                conn.execute("DELETE FROM schedule_events WHERE schedule_id = %s", (schedule_a,))


def test_the_api_connection_applies_the_entered_workspace_to_every_transaction(db_url, two_workspaces):
    ws_a, schedule_a = two_workspaces["a"]
    conn = connect_api(login_url(db_url, API_ROLE))
    try:
        # Outside a workspace: nothing, even with autocommit statements
        assert conn.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0
        assert conn.execute("SELECT current_user AS u").fetchone()["u"] == API_ROLE
        with conn.entered(ws_a):
            with conn.transaction():
                ids = [r["id"] for r in conn.execute("SELECT id FROM schedules").fetchall()]
            # A service call runs its own transaction: the connection enters the workspace in it
            page = service.list_schedules(conn, workspace_id=ws_a)
            with pytest.raises(RuntimeError):
                with conn.entered(uuid.uuid4()):
                    pass
        with conn.transaction():
            after = conn.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"]
    finally:
        conn.close()
    assert ids == [schedule_a] and [r.id for r in page.rows] == [schedule_a] and after == 0


def test_the_owner_connection_still_dispatches_every_workspace(db_url, two_workspaces):
    # The dispatcher claims across workspaces as the table owner: RLS must not stop it
    publisher = ListPublisher()
    with connect(db_url) as owner:
        report = dispatch(owner, dispatch_settings("accounting"), now=NOW, publisher=publisher)
    assert report.claimed == 2
    assert {m.workspace_id for m in publisher.sent} == {two_workspaces["a"][0], two_workspaces["b"][0]}


def test_every_table_with_a_workspace_id_has_the_tenant_policy(conn):
    # A later migration that adds a tenant table must call timekeeper_enable_tenant_rls(...)
    rows = conn.execute("""
        SELECT c.relname, c.relrowsecurity,
               EXISTS (SELECT FROM pg_policies p WHERE p.tablename = c.relname AND p.schemaname = n.nspname
                        AND %s = ANY (p.roles)) AS has_policy
          FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
          JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'workspace_id' AND NOT a.attisdropped
         WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()""", (API_ROLE,)).fetchall()
    assert rows, "no tenant tables found"
    missing = [r["relname"] for r in rows if not (r["relrowsecurity"] and r["has_policy"])]
    assert missing == []


def test_under_the_api_role_a_suppression_of_another_workspace_cannot_be_removed(db_url, two_workspaces):
    from timekeeper.reporting import message_states

    (ws_a, _), (ws_b, _) = two_workspaces["a"], two_workspaces["b"]
    with connect(db_url) as owner:
        owner.execute("INSERT INTO mail_suppressions (workspace_id, address, reason, provider_message_id, "
                      "suppressed_at) VALUES (%s, 'walled@x.test', 'bounced', 'm-walled', %s)", (ws_a, NOW))
        owner.commit()
    try:
        with connect(db_url) as conn:
            conn.execute(f"SET ROLE {API_ROLE}")
            with conn.transaction():
                set_tenant(conn, ws_b)
                # The statement names workspace A, but the wall shows the API only B's rows
                assert message_states.remove_suppression(conn, workspace_id=ws_a, address="walled@x.test",
                                                         actor="t", reason="not mine", now=NOW) is None
        with connect(db_url) as owner:
            assert owner.execute("SELECT count(*) AS n FROM mail_suppressions WHERE address = 'walled@x.test'"
                                 ).fetchone()["n"] == 1
    finally:
        with connect(db_url) as owner:
            owner.execute("DELETE FROM mail_suppressions WHERE address = 'walled@x.test'")
            owner.commit()
