"""Each attempt's outcome per recipient is kept: a submission that failed and was sent by
a later attempt shows both attempts (the error of the first, the provider id of the
second), and a permanent refusal shows its one attempt. Real PostgreSQL, moto S3 and SES."""

from __future__ import annotations

import pytest

from tests.integration import test_delivery as base
from tests.integration.test_delivery import _deliveries, _process, _schedule, _scheduled_run, _u
from timekeeper.reporting import delivery as dl
from timekeeper.schedules.consumer import RetryLater

#: The delivery tests' fixtures: moto, the services and the tenant.
aws, env, tenant = base.aws, base.env, base.tenant


def _attempts(conn, tenant, run_id) -> dict[str, list[tuple[int, str, str | None, bool]]]:
    return {user.split("-", 1)[1]: [(a.attempt, a.status, a.error_code, a.provider_message_id is not None)
                                    for a in attempts]
            for user, attempts in dl.list_attempts(conn, workspace_id=tenant.workspace_id, run_id=run_id).items()}


def test_a_retried_recipient_keeps_the_first_attempts_error_beside_the_second_attempts_send(conn, env, tenant):
    # Given a run whose submission to Ron fails on the first attempt and Rita's succeeds
    schedule = _schedule(conn, tenant, recipients=("rita", "ron"))
    message = _scheduled_run(conn, env, schedule)
    env.mailer.fail = {"ws1.ron@x.test"}
    with pytest.raises(RetryLater):
        _process(conn, env, message)
    # When the retry sends to Ron
    _process(conn, env, message, receive_count=2)
    assert _deliveries(conn, tenant, message.run_id) == {"rita": ("sent", None), "ron": ("sent", None)}
    # Then Ron's outcome per attempt is kept: the first attempt's error, then the second's send
    assert _attempts(conn, tenant, message.run_id) == {
        "rita": [(1, "sent", None, True)],
        "ron": [(1, "failed", "submission_error", False), (2, "sent", None, True)]}
    # And the one provider id of Ron's send is the one on his delivery row
    (ron,) = [d for d in dl.list_deliveries(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)
              if d.user_id == _u(tenant, "ron")]
    (sent,) = [a for a in dl.list_attempts(conn, workspace_id=tenant.workspace_id, run_id=message.run_id)[ron.user_id]
               if a.status == "sent"]
    assert sent.provider_message_id == ron.provider_message_id


def test_a_permanent_refusal_is_one_failed_attempt(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("rita",))
    message = _scheduled_run(conn, env, schedule)

    class Rejecting:
        def send(self, **_):
            error = Exception("rejected")
            error.response = {"Error": {"Code": "MessageRejected"}}
            raise error

    env.services.mailer = Rejecting()
    _process(conn, env, message)
    assert _attempts(conn, tenant, message.run_id) == {"rita": [(1, "failed", "rejected", False)]}
