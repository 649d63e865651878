"""A process that dies between a batch's commit and its after-commit callbacks.

``ctx.after_commit`` is at most once: callbacks that had not run when the process died are
lost. Accounting's posting job start is such a callback, so the job row is committed
``pending`` with the run and the accounting pipeline's maintenance (the posting sweep,
after the dispatcher pass of every fifth minute) starts every committed job no callback
started. These tests kill the consumer in the middle of its callbacks, then let the real
dispatcher Lambda handler pass, and check that every job is started exactly once and
every batch posted.
"""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from uuid import uuid4

from tests.integration.accounting_helpers import (
    Crash,
    add_balanced,
    committed,
    deliver,
    rows,
    schedule_run,
    spec,
)
from tests.integration.test_lambda_handlers import aws  # noqa: F401 - moto queues and the edge's environment
from tests.support import scheduled_event
from timekeeper import clock
from timekeeper.accounting import books
from timekeeper.accounting.posting import STALE_RUNNING_AFTER, start_posting_job
from timekeeper.db.connection import connect
from timekeeper.local.lambdas import invoke

CLOSE_AT = datetime(2027, 2, 12, 18, 0)


def closable_batches(conn, count):
    """``count`` balanced batches of one workspace, each due to close at 18:00 UTC; one run each."""
    ws = uuid4()
    runs = []
    for index in range(count):
        batch = committed(conn, lambda index=index: books.create_batch(
            conn, workspace_id=ws, name=f"Week {index}", close_at=CLOSE_AT.replace(tzinfo=UTC),
            now=datetime(2027, 2, 5, tzinfo=UTC)))
        add_balanced(conn, ws, batch.id, "25.00", date(2027, 2, 10))
        runs.append(spec("batch.auto_close", ws, batch.id, CLOSE_AT))
    return ws, [schedule_run(conn, run) for run in runs]


def jobs(conn, ws):
    return rows(conn, "SELECT j.status, j.attempts, b.status AS batch_status FROM posting_jobs j "
                      "JOIN batches b ON b.id = j.batch_id WHERE j.workspace_id = %s ORDER BY b.name", (ws,))


def dispatcher_pass(at):
    clock.install(lambda: at)
    return invoke("accounting_dispatcher", scheduled_event(at))


def test_posting_jobs_whose_start_died_with_the_consumer_are_started_by_the_next_dispatcher_pass(aws, conn):  # noqa: F811
    # Given ten closable batches whose auto-close runs are delivered in one SQS batch, and a
    # consumer process that dies while starting the sixth posting job (after the commit)
    ws, messages = closable_batches(conn, 10)
    now = CLOSE_AT.replace(tzinfo=UTC) + timedelta(minutes=1)
    hooks = []

    def ledger(hook_conn, batch, entries):
        hooks.append(batch.id)
        if len(hooks) == 6:
            raise Crash("the process died while posting, after the batch's commit")

    # When the consumer processes the batch and dies
    try:
        deliver(conn, messages, now, services={"posting_hook": ledger})
    except Crash:
        pass
    else:
        raise AssertionError("the consumer was expected to die in its after-commit callbacks")

    # Then all ten runs succeeded (their settlement committed) but only five batches were posted
    states = rows(conn, "SELECT state FROM schedule_runs WHERE id = ANY(%s)", ([m.run_id for m in messages],))
    assert [r["state"] for r in states] == ["succeeded"] * 10
    before = jobs(conn, ws)
    assert sorted((j["status"], j["attempts"]) for j in before) == \
        [("pending", 0)] * 4 + [("running", 1)] + [("succeeded", 1)] * 5

    # When the dispatcher passes: a minute later (no sweep on that minute), then on the next
    # sweep minute (its owner maintenance sweeps)
    dispatcher_pass(now + timedelta(minutes=1))
    assert jobs(conn, ws) == before
    dispatcher_pass(now + timedelta(minutes=4))

    # Then each of the four never-started jobs was started exactly once and posted its batch,
    # while the job whose starter died mid-posting is left alone until it is stale
    after = jobs(conn, ws)
    assert sorted((j["status"], j["attempts"], j["batch_status"]) for j in after) == \
        [("running", 1, "closed")] + [("succeeded", 1, "posted")] * 9

    # When a pass runs after the dead start went stale, and another one after it
    dispatcher_pass(now + STALE_RUNNING_AFTER + timedelta(minutes=4))
    dispatcher_pass(now + STALE_RUNNING_AFTER + timedelta(minutes=9))

    # Then the dead start was taken over once, and every batch is posted exactly once
    final = jobs(conn, ws)
    assert sorted((j["status"], j["attempts"], j["batch_status"]) for j in final) == \
        [("succeeded", 1, "posted")] * 9 + [("succeeded", 2, "posted")]
    posted = rows(conn, "SELECT count(*) AS n, count(DISTINCT posted_at) AS instants FROM ledger_entries "
                        "WHERE workspace_id = %s AND posted", (ws,))
    assert posted == [{"n": 20, "instants": 3}]


def test_a_job_being_posted_is_not_started_again_by_a_late_callback_or_the_sweep(aws, conn, db_url):  # noqa: F811
    # Given a closed batch whose posting job was committed and not started yet
    ws, messages = closable_batches(conn, 1)
    now = CLOSE_AT.replace(tzinfo=UTC) + timedelta(minutes=1)
    deliver(conn, messages, now, services={"posting": lambda **job: None})  # a starter that has not started it
    (job,) = rows(conn, "SELECT id FROM posting_jobs WHERE workspace_id = %s", (ws,))
    # And a starter on its own connection that is in the middle of posting it (held in its hook)
    entered, release, hooks, outcome = threading.Event(), threading.Event(), [], []

    def slow_ledger(hook_conn, batch, entries):
        hooks.append(batch.id)
        entered.set()
        release.wait(timeout=60)

    def first_starter():
        with connect(db_url) as own:
            outcome.append(start_posting_job(own, job["id"], now, workspace_id=ws, hook=slow_ledger))

    thread = threading.Thread(target=first_starter)
    thread.start()
    assert entered.wait(timeout=30)

    # When a late twin of the callback starts the same job, and the dispatcher pass sweeps
    twin = start_posting_job(conn, job["id"], now, workspace_id=ws)
    dispatcher_pass(now + timedelta(minutes=4))
    release.set()
    thread.join(timeout=30)

    # Then neither ran it again: the twin saw it running, the first start finished it alone
    assert (twin, outcome) == ("running", ["succeeded"])
    assert len(hooks) == 1
    assert [(j["status"], j["attempts"], j["batch_status"]) for j in jobs(conn, ws)] == [("succeeded", 1, "posted")]
