"""Scheduled delivery of saved queries and reports (work kind ``queries.deliver``) through the
real dispatcher and consumer: each outcome, the owner's and the clicker's access, the
recipients' skip reasons, the outbox after a crash and a failed submission, duplicate
messages, report renders (version changes, unfinished and late renders), signed links.
Real PostgreSQL, moto S3 and SES; the renderer adapter runs the real render."""

from __future__ import annotations

import csv
import hashlib
import io
import re
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

import boto3
import pytest
from moto import mock_aws

from tests.support import ListPublisher, ProviderDown, dispatch_settings
from timekeeper.aws.ses import SesMailer
from timekeeper.db.connection import connect
from timekeeper.platform.directory import add_member, create_workspace, leave_workspace, set_user_status, upsert_user
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import rendering, reports, store
from timekeeper.reporting.links import DownloadLink, LinkExpired, LinkInvalid, LinkSigner
from timekeeper.reporting.query_schedules import NewQuerySchedule, SettingsInvalid, Source, create_query_schedule
from timekeeper.reporting.work_kinds import register
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, RetryLater, process_run
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import QUERIES

NOW = datetime(2027, 3, 1, 6, tzinfo=UTC)
BUCKET = "timekeeper-files-test"
SENDER = "reports@timekeeper.test"
KEY = "k" * 40
SETTINGS = ConsumerSettings.from_pipeline(QUERIES)
LEASE = SETTINGS.lease
SUBJECT = "{{ schedule_name }} for {{ run_date }}"
BODY = "<p>Hello {{ recipient_name }}, {{ row_count }} rows: <a href=\"{{ link }}\">download</a></p>"
#: people: (id, display name, email, roles, status)
PEOPLE = [("olga", "Olga Owner", "olga@x.test", ["queries:write", "reports:write"], "active"),
          ("rita", "Rita <Reader>", "rita@x.test", ["queries:read", "reports:read"], "active"),
          ("ron", "Ron Reader", "ron@x.test", ["queries:read", "reports:read"], "active"),
          ("dan", "Dan Gone", "dan@x.test", ["queries:read", "reports:read"], "deactivated"),
          ("noe", "Noe Nomail", None, ["queries:read", "reports:read"], "active"),
          ("lea", "Lea Left", "lea@x.test", ["queries:read", "reports:read"], "active"),
          ("vic", "Vic Viewer", "vic@x.test", ["schedules:read"], "active"),
          ("cleo", "Cleo Clicker", "cleo@x.test", ["queries:admin"], "active")]


class Tenant:
    def __init__(self, workspace_id: UUID, query_id: UUID, empty_query_id: UUID, report_id: UUID):
        self.workspace_id, self.query_id, self.empty_query_id, self.report_id = (
            workspace_id, query_id, empty_query_id, report_id)


def make_tenant(conn, name: str) -> Tenant:
    with conn.transaction():
        ws = create_workspace(conn, name=name, timezone="Europe/Berlin", currency="EUR", now=NOW).id
        for user_id, display, email, roles, status in PEOPLE:
            uid = f"{name}-{user_id}"
            upsert_user(conn, user_id=uid, display_name=display, email=email and f"{name}.{email}", now=NOW)
            add_member(conn, workspace_id=ws, user_id=uid, roles=roles, now=NOW - timedelta(days=30))
            if status != "active":
                set_user_status(conn, uid, status, now=NOW)
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', '=Member', %s) RETURNING id", (ws, date(2026, 1, 1))).fetchone()["id"]
        for i in range(3):
            conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                         "currency, status) VALUES (%s, %s, %s, %s, %s, %s, 'EUR', 'open')",
                         (ws, member, f"INV-{i}", date(2027, 1, 1), date(2027, 2, 1), 100 * i))
        owner = f"{name}-olga"
        query, _ = store.create_query(conn, workspace_id=ws, name="Open invoices", actor=owner, now=NOW, definition={
            "entity": "invoices", "columns": ["number", "amount_minor"], "sort": [{"column": "number"}]})
        empty, _ = store.create_query(conn, workspace_id=ws, name="Void invoices", actor=owner, now=NOW, definition={
            "entity": "invoices", "columns": ["number"], "filters": [{"column": "status", "op": "eq",
                                                                      "value": "void"}]})
        report, _ = reports.create_report(conn, workspace_id=ws, name="Monthly", actor=owner, now=NOW, definition={
            "title": "Monthly", "sections": [{"heading": "Invoices", "query_id": str(query.id), "display": "table"}]})
    return Tenant(ws, query.id, empty.id, report.id)


class CountingMailer:
    """The SES adapter (moto) with a count per address; ``fail`` addresses raise once each,
    ``die_after`` sends kills the process (a BaseException the consumer does not catch)."""

    def __init__(self, ses) -> None:
        self.inner = SesMailer(ses, SENDER)
        self.sent: list[dict] = []
        self.fail: set[str] = set()
        self.die_after: int | None = None

    def send(self, *, to: str, subject: str, html: str, text: str, headers=None) -> str:
        if to in self.fail:
            self.fail.discard(to)
            raise ConnectionError("provider unavailable")
        if self.die_after is not None and len(self.sent) >= self.die_after:
            raise ProcessKilled()
        message_id = self.inner.send(to=to, subject=subject, html=html, text=text, headers=headers)
        self.sent.append({"to": to, "subject": subject, "html": html, "text": text, "headers": headers,
                          "id": message_id})
        return message_id


class ProcessKilled(BaseException):
    """Stands for the Lambda process dying mid-handler (nothing in it catches this)."""


class SyncRenderer:
    """The renderer adapter: runs the real render at once on its own connection, or not at
    all while ``idle`` (an unfinished render)."""

    def __init__(self, url: str, s3) -> None:
        self.url, self.s3, self.idle, self.requests = url, s3, False, []

    def request(self, *, workspace_id: UUID, render_id: UUID) -> None:
        self.requests.append(render_id)
        if not self.idle:
            with connect(self.url) as c:
                rendering.render(c, self.s3, BUCKET, workspace_id=workspace_id, render_id=render_id, now=NOW)


class FakeClock:
    """``sleep`` advances ``monotonic``: a poll of any length takes no real time."""

    def __init__(self) -> None:
        self.t = 0.0

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def monotonic(self) -> float:
        return self.t


@pytest.fixture
def aws(monkeypatch):
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        ses = boto3.client("ses")
        ses.verify_email_identity(EmailAddress=SENDER)
        yield s3, ses


@pytest.fixture
def env(db_url, aws):
    """Everything a delivery run needs: the registry, the services (journal on its own
    connection), the mailer and renderer doubles, the clock."""
    s3, ses = aws
    journal = connect(db_url)
    clock = FakeClock()
    mailer = CountingMailer(ses)
    renderer = SyncRenderer(db_url, s3)
    services = dl.DeliveryServices(journal=lambda: journal, s3=s3, bucket=BUCKET, mailer=mailer,
                                   links=LinkSigner(KEY), download_base_url="https://api.test/", renderer=renderer,
                                   sleep=clock.sleep, monotonic=clock.monotonic)
    kinds = WorkKindRegistry()
    register(kinds)

    class Env:
        pass

    e = Env()
    e.s3, e.ses, e.services, e.kinds, e.mailer, e.renderer, e.clock = s3, ses, services, kinds, mailer, renderer, clock
    yield e
    journal.close()


@pytest.fixture(scope="module")
def tenant(db_url):
    with connect(db_url) as c:
        return make_tenant(c, "ws1")


def _schedule(conn, tenant, *, source=None, fmt="csv", recipients=("rita", "dan", "noe", "vic"),
              skip_when_empty=False, kinds=None, name="Weekly invoices"):
    """A query schedule saved while every recipient could read its source (a save requires
    it): Dan is deactivated and Vic's membership loses the read roles after it was saved."""
    with conn.transaction():
        set_user_status(conn, _u(tenant, "dan"), "active", now=NOW)
        conn.execute("UPDATE workspace_memberships SET roles = '{queries:read,reports:read}' WHERE user_id = %s",
                     (_u(tenant, "vic"),))
        schedule, _ = create_query_schedule(
            conn, workspace_id=tenant.workspace_id, actor=_u(tenant, "olga"),
            new=NewQuerySchedule(name=name, recurrence={"cron": "0 7 * * *", "timezone": "UTC"},
                                 source=source or Source("query", tenant.query_id), format=fmt,
                                 recipients=[_u(tenant, r) for r in recipients], subject_template=SUBJECT,
                                 body_template=BODY, skip_when_empty=skip_when_empty),
            now=NOW, kinds=kinds)
        set_user_status(conn, _u(tenant, "dan"), "deactivated", now=NOW)
        conn.execute("UPDATE workspace_memberships SET roles = '{schedules:read}' WHERE user_id = %s",
                     (_u(tenant, "vic"),))
    return schedule


def _u(tenant, name: str) -> str:
    return f"ws1-{name}"


def _scheduled_run(conn, env, schedule, *, at=NOW + timedelta(hours=1, minutes=1)) -> RunMessage:
    publisher = ListPublisher()
    dispatch(conn, dispatch_settings("queries"), now=at, publisher=publisher, registry=env.kinds)
    (message,) = [m for m in publisher.sent if m.schedule_id == schedule.id]
    return message


def _manual_run(conn, tenant, schedule, actor: str, key: str = "k1") -> RunMessage:
    publisher = ListPublisher()
    run_id, _ = service.run_now(conn, workspace_id=tenant.workspace_id, schedule_id=schedule.id, actor=actor,
                                now=NOW, publisher=publisher, idempotency_key=key)
    return RunMessage(run_id=run_id, schedule_id=schedule.id, workspace_id=tenant.workspace_id, owner="queries",
                      work_kind="queries.deliver")


def _process(conn, env, message, *, receive_count=1, now=NOW + timedelta(hours=1, minutes=2)):
    return process_run(conn, message, receive_count=receive_count, now=now, registry=env.kinds, settings=SETTINGS,
                       services={"delivery": env.services})


def _run(conn, run_id):
    return conn.execute("SELECT state, outcome_code, detail, error FROM schedule_runs WHERE id = %s",
                        (run_id,)).fetchone()


def _deliveries(conn, tenant, run_id) -> dict[str, tuple[str, str | None]]:
    return {d.user_id.split("-", 1)[1]: (d.status, d.skip_reason)
            for d in dl.list_deliveries(conn, workspace_id=tenant.workspace_id, run_id=run_id)}


def _status(conn, schedule_id) -> tuple[str, str | None]:
    row = conn.execute("SELECT status, pause_reason FROM schedules WHERE id = %s", (schedule_id,)).fetchone()
    return row["status"], row["pause_reason"]


def _ses_sent(ses) -> int:
    return int(ses.get_send_quota()["SentLast24Hours"])


def test_a_query_delivery_sends_a_signed_link_to_each_reachable_recipient_and_records_the_rest(conn, env, tenant):
    # Given a daily query schedule with five recipients, one reachable (Lea leaves after it was saved)
    schedule = _schedule(conn, tenant, recipients=("rita", "dan", "noe", "lea", "vic"))
    leave_workspace(conn, workspace_id=tenant.workspace_id, user_id=_u(tenant, "lea"), now=NOW)
    message = _scheduled_run(conn, env, schedule)
    # When the consumer runs it
    _process(conn, env, message)
    # Then it succeeded acting for the owner, and each recipient has an outcome with its reason
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("succeeded", "succeeded")
    assert run["detail"]["acted_for"] == _u(tenant, "olga") and run["detail"]["sent"] == 1
    assert _deliveries(conn, tenant, message.run_id) == {
        "rita": ("sent", None), "dan": ("skipped", "deactivated"), "noe": ("skipped", "no_address"),
        "lea": ("skipped", "left_workspace"), "vic": ("skipped", "no_access")}
    # And the file is the query's rows, recorded with its checksum under the run's key
    source = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)
    body = env.s3.get_object(Bucket=BUCKET, Key=source.object_key)["Body"].read()
    assert source.object_key == dl.object_key(tenant.workspace_id, message.run_id, "csv")
    assert hashlib.sha256(body).hexdigest() == source.sha256 and source.row_count == 3
    assert list(csv.reader(io.StringIO(body.decode())))[1:] == [["INV-0", "0.00"], ["INV-1", "1.00"],
                                                                  ["INV-2", "2.00"]]
    # And the one message went through SES, escaped, with a link bound to Rita, the run and the file
    assert _ses_sent(env.ses) == 1
    (sent,) = env.mailer.sent
    assert sent["to"] == "ws1.rita@x.test" and sent["subject"] == "Weekly invoices for 2027-03-01"
    assert "Rita &lt;Reader&gt;" in sent["html"] and "3 rows" in sent["html"]
    token = re.search(r"https://api\.test/downloads/([^\"]+)", sent["html"]).group(1)
    link = env.services.links.verify(token, now=NOW)
    assert (link.user_id, link.run_id, link.object_key) == (_u(tenant, "rita"), message.run_id, source.object_key)
    assert link.expires_at == (NOW + timedelta(hours=1, minutes=2) + timedelta(hours=168)).replace(microsecond=0)


def test_an_empty_result_with_skip_when_empty_is_skipped_and_sends_nothing(conn, env, tenant):
    schedule = _schedule(conn, tenant, source=Source("query", tenant.empty_query_id), skip_when_empty=True)
    message = _scheduled_run(conn, env, schedule)
    _process(conn, env, message)
    assert _run(conn, message.run_id)["outcome_code"] == "skipped_empty"
    assert _run(conn, message.run_id)["state"] == "skipped"
    assert env.mailer.sent == [] and _deliveries(conn, tenant, message.run_id) == {}


def test_a_delivery_claimed_past_its_staleness_is_skipped_stale(conn, env, tenant):
    schedule = _schedule(conn, tenant)
    message_at = NOW + timedelta(hours=1) + dl.STALENESS + timedelta(minutes=5)
    publisher = ListPublisher()
    dispatch(conn, dispatch_settings("queries"), now=message_at, publisher=publisher, registry=env.kinds)
    row = conn.execute("SELECT state, outcome_code FROM schedule_runs WHERE schedule_id = %s",
                       (schedule.id,)).fetchone()
    assert row["state"] == "skipped" and "stale" in row["outcome_code"]
    assert [m for m in publisher.sent if m.schedule_id == schedule.id] == [] and env.mailer.sent == []


def _set_roles(conn, tenant, user: str, roles: list[str]) -> None:
    conn.execute("UPDATE workspace_memberships SET roles = %s WHERE workspace_id = %s AND user_id = %s",
                 (roles, tenant.workspace_id, _u(tenant, user)))


def test_an_automatic_run_whose_owner_lost_access_fails_and_pauses_and_a_manual_run_does_not(conn, env, db_url):
    with connect(db_url) as c:
        tenant = make_tenant(c, "ws2")
    tenant_user = lambda name: f"ws2-{name}"  # noqa: E731
    schedule, _ = create_query_schedule(
        conn, workspace_id=tenant.workspace_id, actor=tenant_user("olga"),
        new=NewQuerySchedule(name="Lost", recurrence={"cron": "0 7 * * *", "timezone": "UTC"},
                             source=Source("query", tenant.query_id), format="csv", recipients=[tenant_user("rita")],
                             subject_template=SUBJECT, body_template=BODY), now=NOW)
    conn.execute("UPDATE workspace_memberships SET roles = '{}' WHERE user_id = %s", (tenant_user("olga"),))
    # A manual run by someone who also lacks access fails without pausing
    manual = _manual_run(conn, tenant, schedule, tenant_user("vic"))
    _process(conn, env, manual)
    assert _run(conn, manual.run_id)["outcome_code"] == "source_access_lost"
    assert _status(conn, schedule.id) == ("active", None)
    # A manual run by a clicker who may read the query acts for the clicker and delivers
    clicked = _manual_run(conn, tenant, schedule, tenant_user("cleo"), key="k2")
    _process(conn, env, clicked)
    assert _run(conn, clicked.run_id)["detail"]["acted_for"] == tenant_user("cleo")
    assert _deliveries(conn, tenant, clicked.run_id) == {"rita": ("sent", None)}
    # The automatic run acts for the owner: failed, and the schedule paused with the reason
    scheduled = _scheduled_run(conn, env, schedule)
    _process(conn, env, scheduled)
    run = _run(conn, scheduled.run_id)
    assert (run["state"], run["outcome_code"]) == ("failed", "source_access_lost")
    assert _status(conn, schedule.id) == ("paused", "source_access_lost")


def test_a_crash_while_a_message_is_submitted_leaves_it_unconfirmed_and_the_retry_sends_only_to_the_rest(
        conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "ron", "cleo"))
    message = _scheduled_run(conn, env, schedule)
    env.services.send_policy = dl.SendPolicy(concurrency=1)
    env.mailer.die_after = 1
    # When the process dies while Rita's message (the second, in user-id order) is being
    # submitted, after its 'sending' claim
    with pytest.raises(ProcessKilled):
        _process(conn, env, message)
    assert _ses_sent(env.ses) == 1 and _run(conn, message.run_id)["state"] == "running"
    # Then the redelivery after the lease sends only to Ron, reusing the file: whether Rita's
    # message left is not known, so it is recorded unconfirmed and never submitted again
    env.mailer.die_after = None
    file_key = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id).object_key
    _process(conn, env, message, receive_count=2, now=NOW + timedelta(hours=1, minutes=2) + LEASE + timedelta(1))
    run = _run(conn, message.run_id)
    assert run["state"] == "succeeded" and run["detail"]["refused"] == {"unconfirmed": 1}
    assert sorted(m["to"] for m in env.mailer.sent) == ["ws1.cleo@x.test", "ws1.ron@x.test"]
    assert _ses_sent(env.ses) == 2
    assert dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id).object_key == file_key
    assert {d.user_id: (d.status, d.error_code) for d in dl.list_deliveries(
        conn, workspace_id=tenant.workspace_id, run_id=message.run_id)} == {
        _u(tenant, "rita"): ("failed", "unconfirmed"), _u(tenant, "ron"): ("sent", None),
        _u(tenant, "cleo"): ("sent", None)}


def test_a_failed_submission_retries_the_run_for_that_recipient_only(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "ron"))
    message = _scheduled_run(conn, env, schedule)
    env.mailer.fail = {"ws1.ron@x.test"}
    with pytest.raises(RetryLater):
        _process(conn, env, message)
    assert _deliveries(conn, tenant, message.run_id) == {"rita": ("sent", None), "ron": ("failed", None)}
    _process(conn, env, message, receive_count=2)
    assert _deliveries(conn, tenant, message.run_id) == {"rita": ("sent", None), "ron": ("sent", None)}
    assert sorted(m["to"] for m in env.mailer.sent) == ["ws1.rita@x.test", "ws1.ron@x.test"]


def test_a_submission_failing_on_every_receive_settles_failed_on_the_last(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("ron",))
    message = _scheduled_run(conn, env, schedule)

    env.services.mailer = ProviderDown()
    for receive in (1, 2):
        with pytest.raises(RetryLater):
            _process(conn, env, message, receive_count=receive)
    _process(conn, env, message, receive_count=QUERIES.consumer.max_receive_count)
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("failed", "unexpected_error")
    assert "DeliveryIncomplete" in run["error"]
    assert _deliveries(conn, tenant, message.run_id) == {"ron": ("failed", None)}


def test_the_same_message_delivered_twice_sends_nothing_twice(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "ron"))
    message = _scheduled_run(conn, env, schedule)
    _process(conn, env, message)
    assert _process(conn, env, message, receive_count=2).action == "ignored"
    assert _ses_sent(env.ses) == 2 and len(env.mailer.sent) == 2


def test_a_recorded_submission_is_never_sent_again_by_a_later_attempt(conn, env, tenant):
    # Given an attempt that submitted and recorded Rita's message, then died before settling
    schedule = _schedule(conn, tenant, recipients=("rita",))
    message = _scheduled_run(conn, env, schedule)
    env.mailer.die_after = 1
    original = dl._deliver_to_recipients

    def then_die(*args, **kwargs):
        original(*args, **kwargs)
        raise ProcessKilled()

    dl._deliver_to_recipients = then_die
    try:
        with pytest.raises(ProcessKilled):
            _process(conn, env, message)
    finally:
        dl._deliver_to_recipients = original
    # When the next attempt takes the run over
    _process(conn, env, message, receive_count=2, now=NOW + timedelta(hours=1, minutes=2) + LEASE + timedelta(1))
    # Then it finds the outbox's record and sends nothing
    assert _run(conn, message.run_id)["state"] == "succeeded" and _ses_sent(env.ses) == 1
    outbox = conn.execute("SELECT submissions, provider_message_id FROM query_delivery_outbox WHERE run_id = %s",
                          (message.run_id,)).fetchone()
    assert outbox["submissions"] == 1 and outbox["provider_message_id"] == env.mailer.sent[0]["id"]


def test_a_report_delivery_renders_with_the_run_id_and_flags_a_changed_version(conn, env, tenant):
    schedule = _schedule(conn, tenant, source=Source("report", report_id=tenant.report_id), fmt="pdf",
                         recipients=("rita",), name="Report")
    first = _scheduled_run(conn, env, schedule)
    _process(conn, env, first)
    source = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=first.run_id)
    render = conn.execute("SELECT idempotency_key, object_key, sha256 FROM report_renders WHERE id = %s",
                          (source.render_id,)).fetchone()
    assert render["idempotency_key"] == str(first.run_id) and source.object_key == render["object_key"]
    assert (source.report_version, source.version_changed) == (1, False)
    assert _deliveries(conn, tenant, first.run_id) == {"rita": ("sent", None)}
    # A render that finished during the request (this renderer renders at once) is not waited for
    assert env.clock.t == 0
    # When the report is saved again and the next run renders its version 2
    reports.update_report(conn, workspace_id=tenant.workspace_id, report_id=tenant.report_id, actor=_u(tenant, "olga"),
                          now=NOW, definition={"title": "Monthly v2", "sections": [
                              {"heading": "Invoices", "query_id": str(tenant.query_id), "display": "table"}]})
    second = _manual_run(conn, tenant, schedule, _u(tenant, "cleo"), key="report-2")
    _process(conn, env, second)
    changed = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=second.run_id)
    assert (changed.report_version, changed.version_changed) == (2, True)
    assert _run(conn, second.run_id)["detail"]["version_changed"] is True


def test_an_unfinished_render_retries_then_fails_and_a_late_render_changes_nothing(conn, env, tenant):
    schedule = _schedule(conn, tenant, source=Source("report", report_id=tenant.report_id), fmt="pdf",
                         recipients=("rita",), name="Slow report")
    message = _scheduled_run(conn, env, schedule)
    env.renderer.idle = True
    for receive in (1, 2):
        with pytest.raises(RetryLater, match="RenderUnfinished"):
            _process(conn, env, message, receive_count=receive)
    assert env.clock.t >= 2 * dl.RENDER_POLL_S  # each receive polled the whole 12 minutes
    _process(conn, env, message, receive_count=QUERIES.consumer.max_receive_count)
    assert _run(conn, message.run_id)["state"] == "failed"
    # When the render completes after the run failed, and the message comes once more
    (render_id,) = set(env.renderer.requests)
    with connect(env.renderer.url) as c:
        rendering.render(c, env.s3, BUCKET, workspace_id=tenant.workspace_id, render_id=render_id, now=NOW)
    assert _process(conn, env, message, receive_count=4).action == "ignored"
    # Then nothing was delivered nor recorded
    assert env.mailer.sent == [] and _deliveries(conn, tenant, message.run_id) == {}
    assert dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id) is None


def test_settings_are_checked_field_by_field(conn, tenant):
    cases = [(dict(fmt="pdf"), "format"),
             (dict(source=Source("report", report_id=tenant.report_id), fmt="csv"), "format"),
             (dict(recipients=("rita", "nobody")), "recipients[1]"),
             (dict(source=Source("query", tenant.query_id, query_version=9)), "source.query_version")]
    for kwargs, field in cases:
        with pytest.raises(SettingsInvalid) as caught:
            _schedule(conn, tenant, **kwargs)
        assert caught.value.field == field
    with pytest.raises(SettingsInvalid) as caught:
        create_query_schedule(conn, workspace_id=tenant.workspace_id, actor=_u(tenant, "olga"),
                              new=NewQuerySchedule(name="x", recurrence={"cron": "0 7 * * *", "timezone": "UTC"},
                                                   source=Source("query", tenant.query_id), format="csv",
                                                   recipients=[_u(tenant, "rita")], subject_template="{{ secret }}",
                                                   body_template=BODY), now=NOW)
    assert caught.value.field == "subject_template"


def test_links_refuse_a_tampered_token_another_key_and_an_expired_one():
    signer = LinkSigner(KEY)
    link = DownloadLink(UUID(int=1), UUID(int=2), "u", "deliveries/x.csv", NOW + timedelta(hours=1))
    token = signer.sign(link)
    assert signer.verify(token, now=NOW) == link
    with pytest.raises(LinkInvalid):
        signer.verify(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1], now=NOW)
    with pytest.raises(LinkInvalid):
        LinkSigner("x" * 40).verify(token, now=NOW)
    with pytest.raises(LinkExpired):
        signer.verify(token, now=NOW + timedelta(hours=1))


def test_the_bulk_access_check_agrees_with_the_rule_person_by_person(conn, tenant):
    from timekeeper.platform import access

    people = [_u(tenant, p[0]) for p in PEOPLE] + ["nobody-at-all"]
    for permission in (access.QUERIES_READ, access.QUERIES_WRITE, access.REPORTS_READ):
        bulk = access.check_people(conn, workspace_id=tenant.workspace_id, user_ids=people, permission=permission)
        one_by_one = {u: access.check_person(conn, workspace_id=tenant.workspace_id, user_id=u, permission=permission)
                      for u in people}
        assert bulk == one_by_one
    assert {d.reason for d in bulk.values()} >= {None, "user_deactivated", "missing_role", "not_a_member"}
