"""An empty report is not sent when its schedule skips empty results: a report is empty
when every section's query returned no rows; one non-empty section makes it worth sending.
Real PostgreSQL, moto S3 and SES, the real renderer."""

from __future__ import annotations

from tests.integration import test_delivery as base
from tests.integration.test_delivery import NOW, _deliveries, _process, _run, _schedule, _scheduled_run, _u
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import reports
from timekeeper.reporting.query_schedules import Source

#: The delivery tests' fixtures: moto, the services and the tenant.
aws, env, tenant = base.aws, base.env, base.tenant


def _report(conn, tenant, name: str, query_ids) -> object:
    report, _ = reports.create_report(conn, workspace_id=tenant.workspace_id, name=name, actor=_u(tenant, "olga"),
                                      now=NOW, definition={"title": name, "sections": [
                                          {"heading": f"Section {i}", "query_id": str(q), "display": "table"}
                                          for i, q in enumerate(query_ids)]})
    return report


def test_a_report_whose_every_section_is_empty_is_skipped_when_the_schedule_skips_empty(conn, env, tenant):
    # Given a report of two sections whose queries both return no rows, scheduled with skip_when_empty
    report = _report(conn, tenant, "Nothing to see", [tenant.empty_query_id, tenant.empty_query_id])
    schedule = _schedule(conn, tenant, source=Source("report", report_id=report.id), fmt="pdf",
                         recipients=("rita", "ron"), skip_when_empty=True, name="Empty report")
    message = _scheduled_run(conn, env, schedule)
    # When the consumer runs it
    _process(conn, env, message)
    # Then the run is skipped as empty and nobody gets a message
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("skipped", "skipped_empty")
    assert env.mailer.sent == [] and _deliveries(conn, tenant, message.run_id) == {}
    # And the render's section counts are what made it empty
    source = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)
    assert source.row_count == 0
    assert run["detail"]["source"]["section_row_counts"] == [0, 0]


def test_a_report_with_one_non_empty_section_is_sent(conn, env, tenant):
    # Given a report whose second section has rows, scheduled with skip_when_empty
    report = _report(conn, tenant, "Half empty", [tenant.empty_query_id, tenant.query_id])
    schedule = _schedule(conn, tenant, source=Source("report", report_id=report.id), fmt="pdf",
                         recipients=("rita",), skip_when_empty=True, name="Half empty report")
    message = _scheduled_run(conn, env, schedule)
    # When the consumer runs it
    _process(conn, env, message)
    # Then it is delivered, and the rows of its sections are counted
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("succeeded", "succeeded")
    assert _deliveries(conn, tenant, message.run_id) == {"rita": ("sent", None)}
    assert run["detail"]["source"]["section_row_counts"] == [0, 3] and run["detail"]["source"]["row_count"] == 3


def test_an_empty_report_is_sent_when_the_schedule_does_not_skip_empty(conn, env, tenant):
    report = _report(conn, tenant, "Empty but wanted", [tenant.empty_query_id])
    schedule = _schedule(conn, tenant, source=Source("report", report_id=report.id), fmt="pdf",
                         recipients=("rita",), skip_when_empty=False, name="Wanted report")
    message = _scheduled_run(conn, env, schedule)
    _process(conn, env, message)
    assert _run(conn, message.run_id)["state"] == "succeeded"
    assert _deliveries(conn, tenant, message.run_id) == {"rita": ("sent", None)}
