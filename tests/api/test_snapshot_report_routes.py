"""The report routes with snapshot sections, over the API's walled login: a period choice
that does not check is a 422 naming the field under ``definition``, and a render's read
shows the snapshot version each section showed."""

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
