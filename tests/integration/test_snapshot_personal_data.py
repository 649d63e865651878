"""Personal data in snapshot rows (real PostgreSQL, versions published by the real run
job): erasing a workspace's member pseudonymises their aging rows in every version, the
retention pass does the same for periods past the type's retention, and a published version
still adds up to the figures it published; any other change of its rows is still refused."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from uuid import uuid4

import psycopg
import pytest

from tests.integration.report_helpers import make_tenant
from tests.integration.snapshot_helpers import backdate, publish
from timekeeper.db.connection import connect
from timekeeper.db.retention import expire_snapshot_personal_data
from timekeeper.edge.registries import assemble_snapshot_types
from timekeeper.platform.erasure import erase_member
from timekeeper.platform.snapshots import AR_AGING_PERSONAL_DATA
from timekeeper.reporting.compiler import compile_query

JAN, FEB = date(2027, 1, 1), date(2027, 2, 1)
ERASED_AT = datetime(2027, 3, 2, 9, tzinfo=UTC)


def _tenant(conn):
    """A tenant with January's and February's aging published (and the member M1's id)."""
    tenant = make_tenant(conn, f"pd-{uuid4().hex[:8]}")
    backdate(conn, tenant.workspace_id)
    runs = {period: publish(conn, tenant.workspace_id, period) for period in (JAN, FEB)}
    m1 = conn.execute("SELECT id FROM members WHERE workspace_id = %s AND member_number = 'M1'",
                      (tenant.workspace_id,)).fetchone()["id"]
    return tenant, runs, m1


def _figures(conn, run_id) -> dict:
    """What a published version shows in aggregate: rows, total, and per bucket."""
    rows = conn.execute("SELECT bucket, count(*) AS n, sum(outstanding_minor) AS total FROM snapshot_ar_aging "
                        "WHERE run_id = %s GROUP BY bucket ORDER BY bucket", (run_id,)).fetchall()
    return {r["bucket"]: (r["n"], r["total"]) for r in rows}


def _read(conn, workspace_id) -> list[dict]:
    """The aging rows as a saved query, an export or a report section reads them (every
    period's current version), through the catalogue's compiler."""
    compiled = compile_query({"entity": "snapshot.platform.ar_aging",
                              "columns": ["period", "version", "member_id", "bucket", "outstanding_minor"]},
                             workspace_id=workspace_id)
    return conn.execute(compiled.statement, compiled.params).fetchall()


def _named(conn, workspace_id, member_id) -> int:
    """Aging rows of the workspace that still lead to the member: by member id, or by one of
    the member's invoices."""
    return conn.execute(
        "SELECT count(*) AS n FROM snapshot_ar_aging a WHERE a.workspace_id = %(w)s AND (a.member_id = %(m)s OR "
        "a.invoice_id IN (SELECT id FROM invoices WHERE workspace_id = %(w)s AND member_id = %(m)s))",
        {"w": workspace_id, "m": member_id}).fetchone()["n"]


def test_an_erased_member_no_longer_appears_in_any_snapshot_row(db_url):
    with connect(db_url) as conn:
        tenant, runs, m1 = _tenant(conn)
        before = {period: _figures(conn, run.id) for period, run in runs.items()}
        assert _named(conn, tenant.workspace_id, m1) > 0
        read_before = _read(conn, tenant.workspace_id)
        with conn.transaction():
            changed = erase_member(conn, workspace_id=tenant.workspace_id, member_id=m1, now=ERASED_AT)
        # Then no row of any version leads to the member any more
        assert changed > 0
        assert _named(conn, tenant.workspace_id, m1) == 0
        erased = conn.execute("SELECT count(*) AS n FROM snapshot_ar_aging WHERE workspace_id = %s "
                              "AND personal_data_erased_at = %s AND member_id IS NULL",
                              (tenant.workspace_id,  ERASED_AT)).fetchone()["n"]
        assert erased == changed
        # And every published version still shows the same figures, its row count included
        for period, run in runs.items():
            assert _figures(conn, run.id) == before[period]
            state = conn.execute("SELECT state, is_current, rows_written FROM snapshot_runs WHERE id = %s",
                                 (run.id,)).fetchone()
            assert (state["state"], state["is_current"]) == ("published", True)
            assert state["rows_written"] == sum(n for n, _ in before[period].values())
        # And readers (queries, exports, report sections) get the same rows and figures, without the member
        read_after = _read(conn, tenant.workspace_id)
        assert len(read_after) == len(read_before)
        assert sum(r["outstanding_minor"] for r in read_after) == sum(r["outstanding_minor"] for r in read_before)
        assert m1 not in {r["member_id"] for r in read_after} and None in {r["member_id"] for r in read_after}
        # The other members are untouched; a repeat changes nothing
        assert conn.execute("SELECT count(*) AS n FROM snapshot_ar_aging WHERE workspace_id = %s "
                            "AND member_id IS NOT NULL", (tenant.workspace_id,)).fetchone()["n"] > 0
        with conn.transaction():
            assert erase_member(conn, workspace_id=tenant.workspace_id, member_id=m1, now=ERASED_AT) == 0


def test_a_published_versions_rows_still_refuse_any_other_change(db_url):
    with connect(db_url) as conn:
        tenant, runs, m1 = _tenant(conn)
        # Pseudonymising without the erasure's say-so is refused, as any change of a published version
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation), conn.transaction():
            conn.execute("UPDATE snapshot_ar_aging SET member_id = NULL, personal_data_erased_at = now() "
                         "WHERE workspace_id = %s AND member_id = %s", (tenant.workspace_id, m1))
        # And with it, a change of a figure is refused all the same
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation), conn.transaction():
            conn.execute("SELECT set_config('timekeeper.personal_data_erasure', 'on', true)")
            conn.execute("UPDATE snapshot_ar_aging SET member_id = NULL, personal_data_erased_at = now(), "
                         "outstanding_minor = outstanding_minor + 1 WHERE workspace_id = %s AND member_id = %s",
                         (tenant.workspace_id, m1))
        assert _named(conn, tenant.workspace_id, m1) > 0


def test_the_retention_pass_pseudonymises_the_periods_past_the_types_retention(db_url):
    with connect(db_url) as conn:
        tenant, runs, m1 = _tenant(conn)
        before = {period: _figures(conn, run.id) for period, run in runs.items()}
        days = AR_AGING_PERSONAL_DATA.retention_days
        # When the pass runs mid-February, 400 days on: January's month ended more than 400 days ago, February's not
        now = datetime(2027, 2, 15, 12, tzinfo=UTC) + timedelta(days=days)
        retention = {t.rows.table: t.personal_data.retention_days
                     for t in assemble_snapshot_types("production").enabled() if t.personal_data is not None}
        assert retention == {"snapshot_ar_aging": days}
        pruned = expire_snapshot_personal_data(conn, now=now, retention_days=retention, batch_rows=2, max_batches=50,
                                               time_budget_s=60)
        assert pruned.rows["snapshot_rows_pseudonymised"] >= sum(n for n, _ in before[JAN].values())
        assert pruned.total == 0  # nothing deleted
        left = {period: conn.execute("SELECT count(*) AS n FROM snapshot_ar_aging WHERE run_id = %s "
                                     "AND member_id IS NOT NULL", (run.id,)).fetchone()["n"]
                for period, run in runs.items()}
        # Then January's rows name no one, February's are as they were, and both add up as published
        assert left == {JAN: 0, FEB: sum(n for n, _ in before[FEB].values())}
        for period, run in runs.items():
            assert _figures(conn, run.id) == before[period]
        # A second pass finds nothing of January's
        again = expire_snapshot_personal_data(conn, now=now, retention_days=retention, batch_rows=1000,
                                              max_batches=5, time_budget_s=60)
        assert left[JAN] == 0 and not again.more


def test_only_the_aging_rows_carry_personal_data():
    types = {t.name: t for t in assemble_snapshot_types("development").enabled()}
    assert {name for name, t in types.items() if t.personal_data is not None} == {"ar_aging"}
    assert set(AR_AGING_PERSONAL_DATA.columns) <= {c.name for c in types["ar_aging"].rows.columns}
