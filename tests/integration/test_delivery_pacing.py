"""The delivery sender at SES's pace, through the real consumer, PostgreSQL and moto SES:
submissions paced to the account's sending rate (read from SES, cached), throttling retried
after a backoff and never duplicated, a receive that runs out of time hands the run back and
the next sends only to the rest, and a crash after SES accepted a message (its 'sending'
claim without a record) is never sent again. Time is an injected clock, never the wall."""

from __future__ import annotations

from datetime import timedelta

import pytest
from botocore.exceptions import ClientError

from tests.integration import test_delivery as base
from tests.integration.test_delivery import (
    LEASE,
    NOW,
    CountingMailer,
    ProcessKilled,
    _process,
    _run,
    _scheduled_run,
    _ses_sent,
    _u,
)
from tests.integration.test_delivery import _schedule as schedule_of
from timekeeper.reporting import delivery as dl
from timekeeper.reporting.sending import FALLBACK_RATE, SendPolicy, TokenBucket, forget_send_rates, send_rate
from timekeeper.schedules.consumer import RetryLater

#: The delivery tests' fixtures: moto, the services and the tenant.
aws, env, tenant = base.aws, base.env, base.tenant


class PacedMailer(CountingMailer):
    """The moto SES adapter telling its quota (``max_send_rate``), stamping each submission
    with the injected clock; ``throttle`` addresses are refused with SES's throttling error
    that many times first; ``accept_then_die`` addresses are accepted by SES and then the
    process dies before the answer is journalled; ``cost_s`` is what a submission takes."""

    def __init__(self, ses, clock, rate: float) -> None:
        super().__init__(ses)
        self.clock, self.rate, self.quota_reads = clock, rate, 0
        self.throttle: dict[str, int] = {}
        self.accept_then_die: set[str] = set()
        self.cost_s = 0.0
        self.at: list[float] = []

    def max_send_rate(self) -> float:
        self.quota_reads += 1
        return self.rate

    def send(self, *, to, subject, html, text, headers=None) -> str:
        if self.throttle.get(to):
            self.throttle[to] -= 1
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Maximum sending rate exceeded."}},
                              "SendRawEmail")
        self.at.append(self.clock.t)
        self.clock.t += self.cost_s
        message_id = super().send(to=to, subject=subject, html=html, text=text, headers=headers)
        if to in self.accept_then_die:
            raise ProcessKilled()
        return message_id


@pytest.fixture
def paced(env):
    forget_send_rates()
    env.mailer = PacedMailer(env.ses, env.clock, rate=1.0)
    env.services.mailer = env.mailer
    env.throttles = []
    env.services.on_throttled = env.throttles.append
    yield env
    forget_send_rates()


def _addresses(mailer) -> list[str]:
    return sorted(m["to"] for m in mailer.sent)


def test_submissions_are_paced_to_the_accounts_sending_rate(conn, paced, tenant):
    # Given an account whose SES quota is 1 message a second (one submission at a time, so
    # the injected clock stamps each submission when it is made)
    schedule = schedule_of(conn, tenant, recipients=("rita", "ron", "cleo", "olga"))
    message = _scheduled_run(conn, paced, schedule)
    paced.services.send_policy = SendPolicy(concurrency=1)
    # When the run sends to its four recipients
    _process(conn, paced, message)
    # Then no one-second window of the injected clock holds more than one submission
    assert _run(conn, message.run_id)["state"] == "succeeded" and len(paced.mailer.at) == 4
    windows = [int(t + 1e-6) for t in paced.mailer.at]
    assert max(windows.count(w) for w in set(windows)) == 1 and paced.mailer.at[-1] >= 3
    # And the quota was read from SES once
    assert paced.mailer.quota_reads == 1


def test_the_token_bucket_admits_its_rate_per_window_with_an_injected_clock():
    class Clock:
        t = 0.0

        def sleep(self, s):
            self.t += s

        def now(self):
            return self.t

    clock = Clock()
    bucket = TokenBucket(3.0, monotonic=clock.now, sleep=clock.sleep)
    stamps = []
    for _ in range(30):
        bucket.acquire()
        stamps.append(clock.t)
    windows = [int(t + 1e-6) for t in stamps]
    # 3 a second (the first second also holds the full bucket it starts with)
    assert all(windows.count(w) <= 3 for w in set(windows) - {0}) and windows.count(0) <= 6
    assert stamps[-1] == pytest.approx((30 - 3) / 3)


def test_the_quota_read_from_ses_is_cached_for_its_ttl(paced):
    policy = SendPolicy(quota_ttl_s=300)
    assert send_rate(paced.mailer, policy, monotonic=lambda: 0.0) == 1.0
    assert send_rate(paced.mailer, policy, monotonic=lambda: 299.0) == 1.0
    assert paced.mailer.quota_reads == 1
    paced.mailer.rate = 14.0
    assert send_rate(paced.mailer, policy, monotonic=lambda: 300.0) == 14.0 and paced.mailer.quota_reads == 2
    # A rate set for the deployment wins over the quota
    assert send_rate(paced.mailer, SendPolicy(send_rate=5.0), monotonic=lambda: 0.0) == 5.0
    # A quota that cannot be read keeps the last one read, or paces at the sandbox's rate

    class NoQuota:
        sender = "other@x.test"

        def max_send_rate(self):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetSendQuota")

    assert send_rate(NoQuota(), policy, monotonic=lambda: 0.0) == FALLBACK_RATE == 1.0


def test_a_throttled_submission_is_retried_after_a_backoff_and_sent_once(conn, paced, tenant):
    # Given SES throttles Ron's message twice
    schedule = schedule_of(conn, tenant, recipients=("rita", "ron"))
    message = _scheduled_run(conn, paced, schedule)
    paced.mailer.throttle = {"ws1.ron@x.test": 2}
    # When the run sends
    _process(conn, paced, message)
    # Then the run succeeded in this receive, each recipient got one message, and the two
    # throttles were counted for the metric
    assert _run(conn, message.run_id)["state"] == "succeeded"
    assert _addresses(paced.mailer) == ["ws1.rita@x.test", "ws1.ron@x.test"] and _ses_sent(paced.ses) == 2
    assert sum(paced.throttles) == 2
    outbox = conn.execute("SELECT submissions, sending_at IS NOT NULL AS claimed FROM query_delivery_outbox "
                          "WHERE communication_key = %s", (f"{message.run_id}:{_u(tenant, 'ron')}",)).fetchone()
    assert outbox["submissions"] == 1 and outbox["claimed"]


def test_throttling_that_outlasts_the_backoff_is_retried_by_the_next_receive(conn, paced, tenant):
    schedule = schedule_of(conn, tenant, recipients=("ron",))
    message = _scheduled_run(conn, paced, schedule)
    paced.services.send_policy = SendPolicy(throttle_retries=1)
    paced.mailer.throttle = {"ws1.ron@x.test": 2}
    with pytest.raises(RetryLater):
        _process(conn, paced, message)
    assert dl.list_deliveries(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)[0].error_code == \
        "throttled"
    _process(conn, paced, message, receive_count=2)
    assert _run(conn, message.run_id)["state"] == "succeeded" and _addresses(paced.mailer) == ["ws1.ron@x.test"]


def test_a_receive_out_of_time_hands_the_run_back_and_the_next_sends_only_the_rest(conn, paced, tenant):
    # Given submissions that take 10 s each and a receive with 45 s left, 30 s of it reserved
    schedule = schedule_of(conn, tenant, recipients=("rita", "ron", "cleo"))
    message = _scheduled_run(conn, paced, schedule)
    paced.mailer.rate, paced.mailer.cost_s = 100.0, 10.0
    paced.services.send_policy = SendPolicy(concurrency=1, reserve_s=30)
    paced.services.time_left_s = lambda: 45 - paced.clock.t
    # When the first receive has sent to Cleo (the first in user-id order), the measured
    # 10 s no longer fit: it hands the run back instead of running past its time
    with pytest.raises(RetryLater):
        _process(conn, paced, message)
    assert _addresses(paced.mailer) == ["ws1.cleo@x.test"]
    run = conn.execute("SELECT state, error FROM schedule_runs WHERE id = %s", (message.run_id,)).fetchone()
    assert run["state"] == "running" and "DeliveryContinues" in run["error"]
    # Then the next receive sends only to the other two: nobody twice
    paced.services.time_left_s = lambda: 900.0
    _process(conn, paced, message, receive_count=2)
    assert _run(conn, message.run_id)["state"] == "succeeded"
    assert _addresses(paced.mailer) == ["ws1.cleo@x.test", "ws1.rita@x.test", "ws1.ron@x.test"]
    assert _ses_sent(paced.ses) == 3


def test_a_run_still_unfinished_on_its_last_receive_fails_recipients_unfinished(conn, paced, tenant):
    schedule = schedule_of(conn, tenant, recipients=("rita",))
    message = _scheduled_run(conn, paced, schedule)
    paced.services.time_left_s = lambda: 10.0  # less than the reserve: nothing starts
    _process(conn, paced, message, receive_count=3)
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("failed", "recipients_unfinished") and paced.mailer.sent == []


def test_a_crash_after_ses_accepted_a_message_never_sends_it_again(conn, paced, tenant):
    # Given SES accepts Rita's message and the process dies before the answer is journalled
    schedule = schedule_of(conn, tenant, recipients=("rita", "ron", "cleo"))
    message = _scheduled_run(conn, paced, schedule)
    paced.mailer.rate = 100.0
    paced.services.send_policy = SendPolicy(concurrency=1)
    paced.mailer.accept_then_die = {"ws1.rita@x.test"}
    with pytest.raises(ProcessKilled):
        _process(conn, paced, message)
    assert _ses_sent(paced.ses) == 2  # Cleo and Rita
    # When the next attempt takes the run over
    paced.mailer.accept_then_die = set()
    _process(conn, paced, message, receive_count=2, now=NOW + timedelta(hours=1, minutes=2) + LEASE + timedelta(1))
    # Then Rita's unrecorded 'sending' claim is settled unconfirmed, not sent again: every
    # recipient got exactly one message
    run = _run(conn, message.run_id)
    assert run["state"] == "succeeded" and run["detail"]["refused"] == {"unconfirmed": 1}
    assert _addresses(paced.mailer) == ["ws1.cleo@x.test", "ws1.rita@x.test", "ws1.ron@x.test"]
    assert _ses_sent(paced.ses) == 3
    rita = next(d for d in dl.list_deliveries(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)
                if d.user_id == _u(tenant, "rita"))
    assert (rita.status, rita.error_code) == ("failed", "unconfirmed")
    # The unconfirmed submission is the first attempt's, in the attempts the history shows
    attempts = dl.list_attempts(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)[_u(tenant, "rita")]
    assert [(a.attempt, a.status, a.error_code) for a in attempts] == [(1, "failed", "unconfirmed")]
