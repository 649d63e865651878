"""A delivered report read from a published snapshot period: the delivery records the
render's basis, flags ``snapshot_version_changed`` when a newer version of a period it
showed was published since the schedule's previous delivery, and marks every version it
used ``captured``, so the ledger's protection of captured history applies (a staff re-run
of that period is refused). Real PostgreSQL, moto S3 and SES, the real renderer and run job."""

from __future__ import annotations

from datetime import date

import pytest

from tests.integration import test_delivery as base
from tests.integration.snapshot_helpers import backdate, drain, publish, request
from tests.integration.test_delivery import NOW, _deliveries, _manual_run, _process, _run, _schedule, _scheduled_run, _u
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import reports, store
from timekeeper.reporting.query_schedules import Source, list_delivery_runs
from timekeeper.snapshots import ledger

#: The delivery tests' fixtures: moto, the services and the tenant.
aws, env, tenant = base.aws, base.env, base.tenant
FEB = date(2027, 2, 1)


def _runs(conn, tenant, period=FEB) -> list[ledger.SnapshotRun]:
    return ledger.fetch_runs(conn, "SELECT * FROM snapshot_runs WHERE workspace_id = %(ws)s AND period = %(p)s "
                             "AND snapshot_type = 'ar_aging' ORDER BY version", {"ws": tenant.workspace_id, "p": FEB})


def _aging_report(conn, tenant, name: str, **period):
    query, _ = store.create_query(conn, workspace_id=tenant.workspace_id, name=f"{name} aging",
                                  actor=_u(tenant, "olga"), now=NOW, definition={"entity": "snapshot.platform.ar_aging",
                                                       "columns": ["period", "version", "bucket", "outstanding_minor"]})
    section = {"heading": "Receivables aging", "query_id": str(query.id), "display": "table"}
    if period:
        section["period"] = period
    report, _ = reports.create_report(conn, workspace_id=tenant.workspace_id, name=name, actor=_u(tenant, "olga"),
                                      now=NOW, definition={"title": name, "sections": [section]})
    return report


@pytest.fixture
def published(conn, tenant):
    """February's aging published (v1) in the tenant, once per module."""
    if not _runs(conn, tenant):
        backdate(conn, tenant.workspace_id)
        publish(conn, tenant.workspace_id, FEB)
    return _runs(conn, tenant)


def test_a_delivery_records_its_basis_captures_it_and_flags_a_newer_version_of_the_period(conn, env, tenant,
                                                                                          published):
    # Given a report of the latest published aging, scheduled, and a re-run of February requested by staff
    (v1,) = published
    report = _aging_report(conn, tenant, "Aging")
    schedule = _schedule(conn, tenant, source=Source("report", report_id=report.id), fmt="pdf",
                         recipients=("rita",), name="Aging report")
    request(conn, tenant.workspace_id, FEB)
    # When the first delivery runs
    first = _scheduled_run(conn, env, schedule)
    _process(conn, env, first)
    # Then it is sent, based on February's version 1, which is now captured; nothing changed
    assert _deliveries(conn, tenant, first.run_id) == {"rita": ("sent", None)}
    source = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=first.run_id)
    assert [(b["period"], b["version"], b["run_id"]) for b in source.snapshot_basis] == [
        ("2027-02-01", 1, str(v1.id))]
    assert source.snapshot_version_changed is False
    assert _run(conn, first.run_id)["detail"]["snapshot_version_changed"] is False
    assert [r.protection for r in _runs(conn, tenant)] == ["captured", None]
    # When the re-run already requested publishes version 2 and the next delivery runs
    drain(conn)
    second = _manual_run(conn, tenant, schedule, _u(tenant, "cleo"), key="aging-2")
    _process(conn, env, second)
    # Then it shows version 2 and flags the change of the period's version; version 2 is captured too
    changed = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=second.run_id)
    assert [(b["period"], b["version"]) for b in changed.snapshot_basis] == [("2027-02-01", 2)]
    assert changed.snapshot_version_changed is True and changed.version_changed is False
    detail = _run(conn, second.run_id)["detail"]
    assert detail["snapshot_version_changed"] is True and detail["source"]["snapshot_basis"][0]["version"] == 2
    assert [(r.version, r.is_current, r.protection) for r in _runs(conn, tenant)] == [
        (1, False, "captured"), (2, True, "captured")]
    # And the delivery history shows both runs' basis and the flag
    history = {r.run_id: r for r in list_delivery_runs(conn, workspace_id=tenant.workspace_id,
                                                       schedule_id=schedule.id)}
    assert (history[second.run_id].snapshot_version_changed, history[first.run_id].snapshot_version_changed) == (
        True, False)
    assert history[second.run_id].snapshot_basis[0]["version"] == 2
    # And the captured history is protected: staff can no longer re-run February
    with pytest.raises(ledger.RequestRefused) as refused:
        request(conn, tenant.workspace_id, FEB)
    assert refused.value.reason == "protected_history"


def test_a_pinned_version_never_flags_a_change(conn, env, tenant, published):
    report = _aging_report(conn, tenant, "Pinned aging", choice="version", month="2027-02", version=1)
    schedule = _schedule(conn, tenant, source=Source("report", report_id=report.id), fmt="pdf",
                         recipients=("rita",), name="Pinned aging report")
    runs = []
    for key in ("p1", "p2"):
        message = _manual_run(conn, tenant, schedule, _u(tenant, "cleo"), key=key)
        _process(conn, env, message)
        runs.append(dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id))
    assert [[b["version"] for b in s.snapshot_basis] for s in runs] == [[1], [1]]
    assert [s.snapshot_version_changed for s in runs] == [False, False]


def test_a_report_over_other_data_captures_nothing(conn, env, tenant, published):
    schedule = _schedule(conn, tenant, source=Source("report", report_id=tenant.report_id), fmt="pdf",
                         recipients=("rita",), name="Plain report")
    before = [(r.id, r.protection) for r in _runs(conn, tenant)]
    message = _scheduled_run(conn, env, schedule)
    _process(conn, env, message)
    source = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)
    assert source.snapshot_basis is None and source.snapshot_version_changed is False
    assert "snapshot_version_changed" not in _run(conn, message.run_id)["detail"]
    assert [(r.id, r.protection) for r in _runs(conn, tenant)] == before


def test_an_empty_snapshot_report_that_is_skipped_captures_nothing(conn, env, tenant, published):
    # Given a report of the latest aging's invoices over 90 days past due (there are none), skipping empty
    query, _ = store.create_query(conn, workspace_id=tenant.workspace_id, name="Long overdue",
                                  actor=_u(tenant, "olga"), now=NOW, definition={
                                      "entity": "snapshot.platform.ar_aging", "columns": ["bucket"],
                                      "filters": [{"column": "bucket", "op": "eq", "value": "over_90"}]})
    report, _ = reports.create_report(conn, workspace_id=tenant.workspace_id, name="Long overdue",
                                      actor=_u(tenant, "olga"), now=NOW, definition={"title": "Long overdue",
                                      "sections": [{"heading": "Over 90 days", "query_id": str(query.id)}]})
    schedule = _schedule(conn, tenant, source=Source("report", report_id=report.id), fmt="pdf",
                         recipients=("rita",), skip_when_empty=True, name="Long overdue report")
    conn.execute("UPDATE snapshot_runs SET protection = NULL WHERE workspace_id = %s AND is_current",
                 (tenant.workspace_id,))
    # When it runs
    message = _manual_run(conn, tenant, schedule, _u(tenant, "cleo"), key="empty-aging")
    _process(conn, env, message)
    # Then it is skipped as empty, with its basis recorded, and the version it read is not captured
    assert (_run(conn, message.run_id)["state"], _run(conn, message.run_id)["outcome_code"]) == (
        "skipped", "skipped_empty")
    source = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)
    current = [r for r in _runs(conn, tenant) if r.is_current][0]
    assert source.snapshot_basis[0]["run_id"] == str(current.id) and current.protection is None
