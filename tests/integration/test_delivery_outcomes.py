"""Each recipient's outcome of a delivery run settled to what happened: a permanent
provider refusal is that recipient's outcome (not a run failure, not retried), a failed
recipient removed or deactivated before the retry is recorded skipped with the reason,
the provider's own error text never reaches the history, an attempt taken over while
stalled stops before its next submission, and a file that vanished after links to it went
out is never written again with other contents. Real PostgreSQL, moto S3 and SES, the real
dispatcher and consumer (the fixtures of the delivery tests)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from datetime import date, timedelta

import pytest
from botocore.exceptions import ClientError

from tests.integration.test_delivery import (
    BUCKET,
    LEASE,
    NOW,
    _deliveries,
    _process,
    _run,
    _schedule,
    _scheduled_run,
    _u,
    aws,
    env,
    make_tenant,
)
from timekeeper.db.connection import connect
from timekeeper.platform.directory import set_user_status
from timekeeper.reporting import delivery as dl
from timekeeper.reporting.query_schedules import update_query_schedule
from timekeeper.reporting.sending import SendPolicy
from timekeeper.schedules.consumer import RetryLater

#: The delivery tests' fixtures, used here by name.
FIXTURES = (aws, env)
#: A provider refusal naming the address, as SES words them.
REJECTED_TEXT = "Email address is not verified. The following identities failed the check: ws1.ron@x.test"


@pytest.fixture(scope="module")
def tenant(db_url):
    with connect(db_url) as c:
        return make_tenant(c, "ws1")


class Refusing:
    """The SES adapter refusing some addresses with an AWS error code, delegating the rest."""

    def __init__(self, inner, refuse: dict[str, str]) -> None:
        self.inner, self.refuse, self.calls = inner, refuse, []

    def send(self, *, to, subject, html, text, headers=None):
        self.calls.append(to)
        if to in self.refuse:
            raise ClientError({"Error": {"Code": self.refuse[to], "Message": REJECTED_TEXT}}, "SendEmail")
        return self.inner.send(to=to, subject=subject, html=html, text=text, headers=headers)


def _later(n: int):
    return NOW + timedelta(hours=1, minutes=2) + n * (LEASE + timedelta(seconds=1))


def _rows(conn, tenant, run_id):
    return {d.user_id.split("-", 1)[1]: d for d in dl.list_deliveries(conn, workspace_id=tenant.workspace_id,
                                                                        run_id=run_id)}


def test_a_permanently_refused_recipient_is_failed_once_and_the_run_succeeds(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "ron", "cleo"), name="refused")
    message = _scheduled_run(conn, env, schedule)
    mailer = Refusing(env.mailer, {"ws1.ron@x.test": "MessageRejected"})
    env.services.mailer = mailer
    # One receive: no retry for a refusal that cannot change
    _process(conn, env, message)
    run = _run(conn, message.run_id)
    assert (run["state"], run["detail"]["sent"], run["detail"]["refused"]) == ("succeeded", 2, {"rejected": 1})
    assert mailer.calls.count("ws1.ron@x.test") == 1
    streak = conn.execute("SELECT consecutive_failures, status FROM schedules WHERE id = %s", (schedule.id,)).fetchone()
    assert (streak["consecutive_failures"], streak["status"]) == (0, "active")
    ron = _rows(conn, tenant, message.run_id)["ron"]
    assert (ron.status, ron.error_code) == ("failed", "rejected")
    # The history holds a code and a fixed message, never the provider's text with an address
    outbox = conn.execute("SELECT last_error FROM query_delivery_outbox WHERE run_id = %s AND user_id = %s",
                          (message.run_id, _u(tenant, "ron"))).fetchone()
    assert "@" not in ron.error and "@" not in outbox["last_error"] and "not retried" in ron.error


def test_an_invalid_address_is_permanent_and_throttling_is_retried(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "ron"), name="throttled")
    message = _scheduled_run(conn, env, schedule)
    mailer = Refusing(env.mailer, {"ws1.ron@x.test": "Throttling", "ws1.rita@x.test": "InvalidParameterValue"})
    env.services.mailer = mailer
    with pytest.raises(RetryLater):
        _process(conn, env, message)
    rows = _rows(conn, tenant, message.run_id)
    assert {u: (d.status, d.error_code) for u, d in rows.items()} == {
        "rita": ("failed", "invalid_address"), "ron": ("failed", "throttled")}
    mailer.refuse.pop("ws1.ron@x.test")
    _process(conn, env, message, receive_count=2)
    assert _run(conn, message.run_id)["state"] == "succeeded"
    # Ron's throttling was retried within the first receive (1 + 5 retries after a backoff),
    # then by the second receive; Rita was not tried again
    assert Counter(mailer.calls) == {"ws1.rita@x.test": 1, "ws1.ron@x.test": 1 + 5 + 1}


def test_every_recipient_refused_and_none_sent_fails_the_run(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "ron"), name="all-refused")
    message = _scheduled_run(conn, env, schedule)
    env.services.mailer = Refusing(env.mailer, {"ws1.rita@x.test": "MessageRejected",
                                                "ws1.ron@x.test": "MessageRejected"})
    _process(conn, env, message)
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"], run["detail"]["refused"]) == (
        "failed", "recipients_refused", {"rejected": 2})


def test_a_failed_recipient_removed_before_the_retry_is_settled_skipped_removed(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "ron"), name="removed")
    message = _scheduled_run(conn, env, schedule)
    env.mailer.fail = {"ws1.ron@x.test"}
    with pytest.raises(RetryLater):
        _process(conn, env, message)
    update_query_schedule(conn, workspace_id=tenant.workspace_id, schedule_id=schedule.id, actor=_u(tenant, "olga"),
                          now=NOW, recipients=[_u(tenant, "rita")])
    _process(conn, env, message, receive_count=2)
    run = _run(conn, message.run_id)
    assert run["state"] == "succeeded" and run["detail"]["skipped"] == {"removed": 1}
    assert _deliveries(conn, tenant, message.run_id) == {"rita": ("sent", None), "ron": ("skipped", "removed")}
    assert [m["to"] for m in env.mailer.sent] == ["ws1.rita@x.test"]


def test_a_failed_recipient_deactivated_before_the_retry_is_recorded_skipped(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "cleo"), name="deactivated")
    message = _scheduled_run(conn, env, schedule)
    env.mailer.fail = {"ws1.cleo@x.test"}
    with pytest.raises(RetryLater):
        _process(conn, env, message)
    set_user_status(conn, _u(tenant, "cleo"), "deactivated", now=NOW)
    try:
        _process(conn, env, message, receive_count=2)
    finally:
        set_user_status(conn, _u(tenant, "cleo"), "active")
    assert _run(conn, message.run_id)["detail"]["skipped"] == {"deactivated": 1}
    cleo = _rows(conn, tenant, message.run_id)["cleo"]
    assert (cleo.status, cleo.skip_reason, cleo.error, cleo.error_code) == ("skipped", "deactivated", None, None)


def test_an_attempt_taken_over_while_stalled_stops_before_its_next_submission(conn, env, tenant, db_url):
    """Attempt 1 stalls inside its first submission past its lease; attempt 2 takes the run
    over, finds that submission's 'sending' claim and settles it unconfirmed instead of
    sending it again, and delivers the rest; attempt 1 wakes up: its stalled submission
    completes and is recorded, then it stops instead of sending the rest again."""
    schedule = _schedule(conn, tenant, recipients=("rita", "ron", "cleo"), name="stalled")
    message = _scheduled_run(conn, env, schedule)
    inner = env.mailer
    stalled, resume = threading.Event(), threading.Event()

    class Stalling:
        def __init__(self):
            self.first = True

        def send(self, **kwargs):
            if self.first:
                self.first = False
                stalled.set()
                resume.wait(30)
            return inner.send(**kwargs)

    journal = connect(db_url)
    zombie = type("Env", (), {"kinds": env.kinds})()
    zombie.services = replace(env.services, journal=lambda: journal, mailer=Stalling(),
                              send_policy=SendPolicy(concurrency=1))
    outcome: list[str] = []

    def first_attempt():
        with connect(db_url) as c:
            try:
                outcome.append(_process(c, zombie, message).action)
            except Exception as error:  # noqa: BLE001 - recorded for the assertion
                outcome.append(type(error).__name__)

    thread = threading.Thread(target=first_attempt)
    thread.start()
    try:
        assert stalled.wait(30)
        _process(conn, env, message, receive_count=2, now=_later(1))
    finally:
        resume.set()
        thread.join(60)
        journal.close()
    counts = Counter(m["to"] for m in inner.sent)
    assert counts == {"ws1.cleo@x.test": 1, "ws1.rita@x.test": 1, "ws1.ron@x.test": 1}, counts
    assert outcome and outcome[0] != "succeeded"
    assert _run(conn, message.run_id)["state"] == "succeeded"
    outbox = conn.execute("SELECT user_id, submissions FROM query_delivery_outbox WHERE run_id = %s ORDER BY user_id",
                          (message.run_id,)).fetchall()
    assert [(r["user_id"].split("-", 1)[1], r["submissions"]) for r in outbox] == [
        ("cleo", 1), ("rita", 1), ("ron", 1)]
    # The late record of the stalled submission turned Cleo's row sent
    assert _deliveries(conn, tenant, message.run_id)["cleo"] == ("sent", None)


def test_a_file_gone_after_links_went_out_is_not_written_again_with_other_contents(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita", "ron"), name="vanished")
    message = _scheduled_run(conn, env, schedule)
    env.mailer.fail = {"ws1.ron@x.test"}
    with pytest.raises(RetryLater):
        _process(conn, env, message)
    first = dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)
    env.s3.delete_object(Bucket=BUCKET, Key=first.object_key)
    member = conn.execute("SELECT id FROM members WHERE workspace_id = %s LIMIT 1",
                          (tenant.workspace_id,)).fetchone()["id"]
    conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, currency, "
                 "status) VALUES (%s, %s, 'INV-NEW', %s, %s, 999, 'EUR', 'open')",
                 (tenant.workspace_id, member, date(2027, 1, 1), date(2027, 2, 1)))
    try:
        _process(conn, env, message, receive_count=2)
    finally:
        conn.execute("DELETE FROM invoices WHERE workspace_id = %s AND number = 'INV-NEW'", (tenant.workspace_id,))
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("failed", "file_lost")
    assert dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id) == first
    listed = env.s3.list_objects_v2(Bucket=BUCKET, Prefix=first.object_key).get("KeyCount", 0)
    assert listed == 0  # nothing new under the key Rita's link names
    assert [m["to"] for m in env.mailer.sent] == ["ws1.rita@x.test"]


def test_a_body_saved_before_the_markup_rule_is_sanitized_when_sent(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita",), name="old-body")
    conn.execute("UPDATE query_schedules SET body_template = %s WHERE schedule_id = %s", (
        "<p>{{ recipient_name }}</p><script>alert(1)</script><img src='https://tracker.example/p.gif'>"
        "<a href='https://evil.example/phish'>verify</a><a href='{{ link }}' onclick='x()'>file</a>", schedule.id))
    message = _scheduled_run(conn, env, schedule)
    _process(conn, env, message)
    (sent,) = env.mailer.sent
    html = sent["html"]
    assert "<script" not in html and "alert" not in html and "<img" not in html and "evil.example" not in html
    assert "onclick" not in html and 'href="https://api.test/downloads/' in html
    assert "Rita &lt;Reader&gt;" in html  # placeholder values stay escaped
