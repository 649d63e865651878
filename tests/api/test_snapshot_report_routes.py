"""The report routes with snapshot sections, over the API's walled login: a period choice
that does not check is a 422 naming the field under ``definition``, a render's read
shows the snapshot version each section showed, and a render may pick the month its
snapshot sections show (the period picker)."""

from __future__ import annotations

from datetime import date
from uuid import UUID, uuid4

import pytest

from tests.api.test_report_routes import BUCKET, author, reader, renderer, s3, send  # noqa: F401 - fixtures
from tests.integration.report_helpers import NOW, make_tenant
from tests.integration.snapshot_helpers import backdate, publish
from timekeeper.db.connection import connect
from timekeeper.reporting import store
from timekeeper.reporting.rendering import render


@pytest.fixture(scope="module")
def tenants(db_url):
    with connect(db_url) as c:
        a = make_tenant(c, "snap-api")
        backdate(c, a.workspace_id)
        version = publish(c, a.workspace_id, date(2027, 2, 1))
        publish(c, a.workspace_id, date(2027, 1, 1))
        query, _ = store.create_query(c, workspace_id=a.workspace_id, name="Aging", actor=a.author, now=NOW,
                                      definition={"entity": "snapshot.platform.ar_aging",
                                                  "columns": ["bucket", "outstanding_minor"]})
    return a, version, query.id


def _definition(query_id, **period) -> dict:
    return {"title": "Aging", "sections": [{"heading": "Aging", "query_id": str(query_id), "period": period}]}


@pytest.mark.parametrize(("period", "field"), [
    ({"choice": "version", "month": "2027-02", "version": 7}, "definition.sections[0].period.version"),
    ({"choice": "month", "month": "Feb 2027"}, "definition.sections[0].period.month"),
    ({"choice": "month"}, "definition.sections[0].period.month"),
])
def test_a_period_choice_that_does_not_check_is_a_422_naming_the_field(send, tenants, period, field):  # noqa: F811
    a, _, query_id = tenants
    status, body = send("POST", "/reports", author(a), {"name": "r", "definition": _definition(query_id, **period)})
    assert status == 422 and body["field"] == field, body


def test_a_renders_read_shows_its_snapshot_basis(send, conn, tenants, s3):  # noqa: F811 - fixture
    a, version, query_id = tenants
    status, created = send("POST", "/reports", author(a), {"name": "r", "definition": _definition(
        query_id, choice="version", month="2027-02", version=1)})
    assert status == 201, created
    _, requested = send("POST", f"/reports/{created['id']}/renders", reader(a),
                        headers={"Idempotency-Key": f"click-{uuid4()}"})
    assert requested["snapshot_basis"] is None
    render(conn, s3, BUCKET, workspace_id=a.workspace_id, render_id=UUID(requested["id"]), now=NOW)
    status, got = send("GET", f"/reports/{created['id']}/renders/{requested['id']}", reader(a))
    assert status == 200 and got["state"] == "succeeded"
    assert got["snapshot_basis"] == [{
        "owner": "platform", "snapshot_type": "ar_aging", "period": "2027-02-01", "version": 1,
        "published_at": version.published_at.isoformat().replace("+00:00", "Z"), "run_id": str(version.id),
        "choice": "version"}]


def _report(send, a, definition) -> str:  # noqa: F811 - the fixture passed on
    status, created = send("POST", "/reports", author(a), {"name": "r", "definition": definition})
    assert status == 201, created
    return created["id"]


def _rendered(send, conn, s3, a, report_id, month: str | None) -> dict:  # noqa: F811
    status, requested = send("POST", f"/reports/{report_id}/renders", reader(a),
                             None if month is None else {"month": month},
                             headers={"Idempotency-Key": f"pick-{uuid4()}"})
    assert status == 202, requested
    assert requested["month"] == month and requested["timezone"] == "Europe/Berlin"
    render(conn, s3, BUCKET, workspace_id=a.workspace_id, render_id=UUID(requested["id"]), now=NOW)
    status, got = send("GET", f"/reports/{report_id}/renders/{requested['id']}", reader(a))
    assert status == 200
    return got


def test_a_render_over_a_picked_month_shows_that_months_version_and_a_pin_stays(send, conn, tenants,  # noqa: F811
                                                                                  s3):  # noqa: F811
    # Given a report with a section of the latest month and one pinned to February's version 1
    a, february, query_id = tenants
    definition = {"title": "Aging", "sections": [
        {"heading": "Latest", "query_id": str(query_id)},
        {"heading": "Pinned", "query_id": str(query_id), "period": {"choice": "version", "month": "2027-02",
                                                                     "version": 1}}]}
    report_id = _report(send, a, definition)
    # When it is rendered without a pick, the latest section shows February (the latest published)
    plain = _rendered(send, conn, s3, a, report_id, None)
    assert [(b["period"], b["choice"]) for b in plain["snapshot_basis"]] == [("2027-02-01", "latest"),
                                                                              ("2027-02-01", "version")]
    # And over January, picked: the first section shows January's version, the pin stays
    picked = _rendered(send, conn, s3, a, report_id, "2027-01")
    assert picked["state"] == "succeeded", picked
    assert [(b["period"], b["version"], b["choice"]) for b in picked["snapshot_basis"]] == [
        ("2027-01-01", 1, "month"), ("2027-02-01", 1, "version")]


def test_a_picked_month_without_a_published_version_fails_the_render_with_the_reason(send, conn, tenants,  # noqa: F811
                                                                                       s3):  # noqa: F811
    a, _, query_id = tenants
    report_id = _report(send, a, {"title": "Aging", "sections": [{"heading": "A", "query_id": str(query_id)}]})
    got = _rendered(send, conn, s3, a, report_id, "2026-12")
    assert (got["state"], got["error_code"]) == ("failed", "snapshot_unpublished")


def test_a_render_pick_is_checked_and_one_key_names_one_month(send, tenants):  # noqa: F811
    a, _, query_id = tenants
    report_id = _report(send, a, {"title": "Aging", "sections": [{"heading": "A", "query_id": str(query_id)}]})
    for bad in ({"month": "2027-13"}, {"month": "Jan 2027"}, {"month": "2027-01", "version": 2}):
        status, body = send("POST", f"/reports/{report_id}/renders", reader(a), bad,
                            headers={"Idempotency-Key": f"bad-{uuid4()}"})
        assert status == 422 and body["field"] in ("month", "version"), (bad, body)
    key = {"Idempotency-Key": f"once-{uuid4()}"}
    status, first = send("POST", f"/reports/{report_id}/renders", reader(a), {"month": "2027-01"}, headers=key)
    assert status == 202
    status, again = send("POST", f"/reports/{report_id}/renders", reader(a), {"month": "2027-01"}, headers=key)
    assert (status, again["id"]) == (202, first["id"])
    status, other = send("POST", f"/reports/{report_id}/renders", reader(a), {"month": "2027-02"}, headers=key)
    assert (status, other["code"]) == (409, "idempotency_key_reused")


def test_a_reports_read_names_the_snapshot_each_section_reads(send, tenants):  # noqa: F811 - fixture
    a, _, query_id = tenants
    with_invoices = {"title": "Both", "sections": [{"heading": "Aging", "query_id": str(query_id)},
                                                   {"heading": "Invoices", "query_id": str(a.invoices_query)}]}
    report_id = _report(send, a, with_invoices)
    status, got = send("GET", f"/reports/{report_id}", reader(a))
    assert status == 200
    assert got["snapshot_sources"] == [{"owner": "platform", "snapshot_type": "ar_aging"}, None]
