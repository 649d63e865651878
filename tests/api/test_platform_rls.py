"""Row-level security and grants of the Platform tables (migrations 0007 and 0008) under
the API's login: for every table, the entered workspace's rows only, no rows without a
workspace, users only through a membership of the entered workspace, and every write the
grants do not allow refused. The business tables (members, invoices, ...) are not
granted to the API at all; their policies are checked as a second wall by granting
SELECT inside a rolled-back transaction."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.db.connection import connect, login_url
from timekeeper.local.platform_data import load_sample

NOW = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)

#: The API's privileges on each Platform table, as the migrations grant them.
GRANTS: dict[str, frozenset[str]] = {
    "workspaces": frozenset({"SELECT"}),
    "users": frozenset({"SELECT"}),
    "workspace_memberships": frozenset({"SELECT"}),
    "membership_types": frozenset(),
    "members": frozenset(),
    "memberships": frozenset(),
    "invoices": frozenset(),
    "payments": frozenset(),
    "saved_queries": frozenset({"SELECT", "INSERT", "UPDATE"}),
    "saved_query_versions": frozenset({"SELECT", "INSERT"}),
    "reports": frozenset({"SELECT", "INSERT", "UPDATE"}),
    "report_versions": frozenset({"SELECT", "INSERT"}),
    "report_renders": frozenset({"SELECT", "INSERT", "UPDATE"}),
    "exports": frozenset({"SELECT", "INSERT", "UPDATE"}),
}
READABLE = [t for t, g in GRANTS.items() if "SELECT" in g]
UNREADABLE = [t for t, g in GRANTS.items() if "SELECT" not in g]

#: How each table's rows name their workspace (the workspace's own id for workspaces; a
#: user, who is global, by their id).
WORKSPACE_COLUMN = {t: "id" if t in ("workspaces", "users") else "workspace_id" for t in GRANTS}
#: Columns the API may UPDATE only to lock rows (``0010_snapshots_api.sql``: the tenant key,
#: which the policy pins to the entered workspace, so the one possible update is a no-op;
#: tests/api/test_snapshot_routes.py shows it changes nothing). A refused UPDATE of such a
#: table is tried on another column.
LOCK_ONLY = {"workspaces": "name"}
#: Who wrote a row, by table (the rows the API inserts name 'api').
AUTHOR_COLUMN = {"saved_queries": "created_by", "saved_query_versions": "created_by", "reports": "created_by",
                 "report_versions": "created_by", "report_renders": "requested_by", "exports": "requested_by"}


def _queries_and_reports(conn, workspace_id: uuid.UUID, label: str) -> dict[str, uuid.UUID]:
    """One saved query (version 1), one report (version 1), a render and an export in the
    workspace, inserted with SQL as the owner; returns their ids."""
    query_id, report_id = uuid.uuid4(), uuid.uuid4()
    definition = json.dumps({"entity": "invoices", "columns": ["number"]})
    conn.execute("INSERT INTO saved_queries (id, workspace_id, name, current_version, created_by, created_at, "
                  "updated_at) VALUES (%s, %s, %s, 1, 'owner', %s, %s)", (query_id, workspace_id, label, NOW, NOW))
    conn.execute("INSERT INTO saved_query_versions (workspace_id, query_id, version, definition, created_by, "
                 "created_at) VALUES (%s, %s, 1, %s, 'owner', %s)", (workspace_id, query_id, definition, NOW))
    conn.execute("INSERT INTO reports (id, workspace_id, name, current_version, created_by, created_at, updated_at) "
                 "VALUES (%s, %s, %s, 1, 'owner', %s, %s)", (report_id, workspace_id, label, NOW, NOW))
    conn.execute("INSERT INTO report_versions (workspace_id, report_id, version, definition, created_by, created_at) "
                 "VALUES (%s, %s, 1, %s, 'owner', %s)",
                 (workspace_id, report_id, json.dumps({"title": label, "sections": []}), NOW))
    conn.execute("INSERT INTO report_renders (workspace_id, idempotency_key, report_id, report_version, requested_by, "
                 "requested_at) VALUES (%s, %s, %s, 1, 'owner', %s)", (workspace_id, f"k-{label}", report_id, NOW))
    conn.execute("INSERT INTO exports (workspace_id, query_id, query_version, format, requested_by, created_at) "
                 "VALUES (%s, %s, 1, 'csv', 'owner', %s)", (workspace_id, query_id, NOW))
    return {"query": query_id, "report": report_id}


@pytest.fixture(scope="module")
def tenants(db_url):
    """The sample set plus saved queries, reports, renders and exports in berlin and new_york."""
    with connect(db_url) as conn:
        sample = load_sample(conn, now=NOW)
        with conn.transaction():
            objects = {key: _queries_and_reports(conn, sample.workspaces[key], key) for key in ("berlin", "new_york")}
    return sample, objects


@pytest.fixture
def api(db_url):
    conn = connect_api(login_url(db_url, API_ROLE))
    yield conn
    conn.close()


def _owner_counts(db_url, table: str) -> dict[uuid.UUID, int]:
    column = WORKSPACE_COLUMN[table]
    with connect(db_url) as owner:
        return {r["w"]: r["n"] for r in owner.execute(
            f"SELECT {column} AS w, count(*) AS n FROM {table} GROUP BY 1").fetchall()}


def test_the_api_privileges_on_the_platform_tables_are_exactly_the_granted_ones(conn):
    found = {t: frozenset(p for p in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
                          if conn.execute("SELECT has_table_privilege(%s, %s, %s) AS ok",
                                          (API_ROLE, t, p)).fetchone()["ok"])
             for t in GRANTS}
    assert found == GRANTS


def test_every_platform_table_has_row_level_security_for_the_api(conn):
    rows = conn.execute("""SELECT c.relname, c.relrowsecurity,
                                  EXISTS (SELECT FROM pg_policies p WHERE p.tablename = c.relname
                                           AND %s = ANY (p.roles)) AS has_policy
                             FROM pg_class c WHERE c.relname = ANY(%s)""", (API_ROLE, list(GRANTS))).fetchall()
    assert {r["relname"]: (r["relrowsecurity"], r["has_policy"]) for r in rows} == {t: (True, True) for t in GRANTS}


@pytest.mark.parametrize("table", READABLE)
def test_without_a_workspace_the_api_sees_no_rows(db_url, tenants, api, table):
    with connect(db_url) as owner:
        assert owner.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"] > 0
    with api.transaction():
        assert api.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"] == 0


@pytest.mark.parametrize("table", [t for t in READABLE if t != "users"])
def test_the_api_sees_only_the_entered_workspaces_rows(db_url, tenants, api, table):
    sample, _ = tenants
    counts = _owner_counts(db_url, table)
    column = WORKSPACE_COLUMN[table]
    for key in ("berlin", "new_york"):
        ws = sample.workspaces[key]
        with api.entered(ws), api.transaction():
            seen = api.execute(f"SELECT {column} AS w, count(*) AS n FROM {table} GROUP BY 1").fetchall()
        assert seen == [{"w": ws, "n": counts[ws]}]
    assert len(counts) > 1  # other workspaces' rows exist and stayed hidden


@pytest.mark.parametrize("table", UNREADABLE)
def test_the_business_tables_are_not_readable_by_the_api(tenants, api, table):
    sample, _ = tenants
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
        with api.entered(sample.workspaces["berlin"]), api.transaction():
            api.execute(f"SELECT count(*) FROM {table}")


@pytest.mark.parametrize("table", UNREADABLE)
def test_granted_anyway_a_business_table_shows_only_the_entered_workspace(db_url, tenants, table):
    # The policy is the second wall: a later grant would still show one workspace's rows
    sample, _ = tenants
    berlin = sample.workspaces["berlin"]
    counts = _owner_counts(db_url, table)
    with connect(db_url) as owner:
        with owner.transaction(force_rollback=True):
            owner.execute(f"GRANT SELECT ON {table} TO {API_ROLE}")
            owner.execute(f"SET LOCAL ROLE {API_ROLE}")
            nothing = owner.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]
            owner.execute("SELECT set_config('app.workspace_id', %s, true)", (str(berlin),))
            seen = owner.execute(f"SELECT workspace_id AS w, count(*) AS n FROM {table} GROUP BY 1").fetchall()
    assert nothing == 0 and seen == [{"w": berlin, "n": counts[berlin]}] and len(counts) > 1


def test_users_are_visible_only_through_a_membership_of_the_entered_workspace(tenants, api):
    sample, _ = tenants
    u = sample.users
    seen = {}
    for key in ("berlin", "new_york", "sydney"):
        with api.entered(sample.workspaces[key]), api.transaction():
            seen[key] = {r["id"] for r in api.execute("SELECT id FROM users").fetchall()}
    # berlin: its current members, the one who left (had a membership) and the two-workspace member
    assert seen["berlin"] == {u[p] for p in ("admin", "analyst", "viewer", "no_email", "deactivated", "left",
                                             "multi")}
    assert seen["new_york"] == {u["multi"]}
    assert seen["sydney"] == {u["sydney_admin"]}
    assert u["outsider"] not in set().union(*seen.values())
    # Asked for by id, another workspace's user is simply not there
    with api.entered(sample.workspaces["berlin"]), api.transaction():
        assert api.execute("SELECT id FROM users WHERE id = %s", (u["sydney_admin"],)).fetchall() == []


def _new_row(table: str, workspace_id: uuid.UUID, objects: dict[str, uuid.UUID]) -> tuple[str, tuple]:
    """An INSERT of a valid new row of ``table`` for ``workspace_id`` (``objects``: that
    workspace's saved query and report, or another workspace's to try a cross write)."""
    key = uuid.uuid4().hex
    statements = {
        "saved_queries": ("INSERT INTO saved_queries (workspace_id, name, current_version, created_by, created_at, "
                          "updated_at) VALUES (%s, 'new', 1, 'api', %s, %s)", (workspace_id, NOW, NOW)),
        "saved_query_versions": ("INSERT INTO saved_query_versions (workspace_id, query_id, version, definition, "
                                 "created_by, created_at) VALUES (%s, %s, 2, '{}', 'api', %s)",
                                 (workspace_id, objects["query"], NOW)),
        "reports": ("INSERT INTO reports (workspace_id, name, current_version, created_by, created_at, updated_at) "
                    "VALUES (%s, 'new', 1, 'api', %s, %s)", (workspace_id, NOW, NOW)),
        "report_versions": ("INSERT INTO report_versions (workspace_id, report_id, version, definition, created_by, "
                            "created_at) VALUES (%s, %s, 2, '{}', 'api', %s)", (workspace_id, objects["report"], NOW)),
        "report_renders": ("INSERT INTO report_renders (workspace_id, idempotency_key, report_id, report_version, "
                           "requested_by, requested_at) VALUES (%s, %s, %s, 1, 'api', %s)",
                           (workspace_id, key, objects["report"], NOW)),
        "exports": ("INSERT INTO exports (workspace_id, query_id, query_version, format, requested_by, created_at) "
                    "VALUES (%s, %s, 1, 'xlsx', 'api', %s)", (workspace_id, objects["query"], NOW)),
    }
    return statements[table]


INSERTABLE = [t for t, g in GRANTS.items() if "INSERT" in g]


@pytest.mark.parametrize("table", INSERTABLE)
def test_the_api_writes_rows_of_the_entered_workspace_only(db_url, tenants, api, table):
    sample, objects = tenants
    berlin, new_york = sample.workspaces["berlin"], sample.workspaces["new_york"]
    with api.entered(berlin):
        with api.transaction(force_rollback=True):
            api.execute(*_new_row(table, berlin, objects["berlin"]))
            if "UPDATE" in GRANTS[table]:
                column = "updated_at" if table in ("saved_queries", "reports") else "attempts"
                value = NOW if column == "updated_at" else 1
                mine = api.execute(f"UPDATE {table} SET {column} = %s", (value,)).rowcount
                theirs = api.execute(f"UPDATE {table} SET {column} = %s WHERE workspace_id = %s",
                                     (value, new_york)).rowcount
                assert mine >= 1 and theirs == 0
        # A row naming another workspace is refused by the policy's check
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            with api.transaction():
                api.execute(*_new_row(table, new_york, objects["new_york"]))
        # Moving one of its rows to another workspace is refused too
        if "UPDATE" in GRANTS[table]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                with api.transaction():
                    api.execute(f"UPDATE {table} SET workspace_id = %s", (new_york,))
    with connect(db_url) as owner:
        assert owner.execute(f"SELECT count(*) AS n FROM {table} WHERE {AUTHOR_COLUMN[table]} = 'api'"
                             ).fetchone()["n"] == 0  # the one allowed row was rolled back


def _refused_writes() -> list[tuple[str, str]]:
    """(table, statement) for every write the grants do not allow, on every Platform table."""
    out = []
    for table, granted in GRANTS.items():
        column = WORKSPACE_COLUMN[table]
        if "INSERT" not in granted:
            out.append((table, f"INSERT INTO {table} ({column}) VALUES (%(ws)s)"))
        if "UPDATE" not in granted:
            target = LOCK_ONLY.get(table, column)
            out.append((table, f"UPDATE {table} SET {target} = {target} WHERE {column} = %(ws)s"))
        out.append((table, f"DELETE FROM {table} WHERE {column} = %(ws)s"))
        out.append((table, f"TRUNCATE {table}"))
    return out


@pytest.mark.parametrize(("table", "statement"), _refused_writes(), ids=lambda v: v.split(" (")[0][:48])
def test_writes_the_grants_do_not_allow_are_refused(tenants, api, table, statement):
    sample, _ = tenants
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
        with api.entered(sample.workspaces["berlin"]), api.transaction():
            api.execute(statement, {"ws": sample.users["admin"] if table == "users" else sample.workspaces["berlin"]})


def test_updating_a_user_is_refused(tenants, api):
    sample, _ = tenants
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
        with api.entered(sample.workspaces["berlin"]), api.transaction():
            api.execute("UPDATE users SET status = 'active' WHERE id = %s", (sample.users["deactivated"],))
