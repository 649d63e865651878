"""What ``serve`` starts with, so the console has something to show on a first start.

The Platform sample (workspaces, people, members, invoices) is loaded by the local stack;
this adds, in its first workspace (Berlin, Europe/Berlin), the work people schedule:

* accounting schedules of the four work kinds over a small set of books (a monthly
  calendar, a recurring journal with entries and bank lines, a billing plan): the
  journal rolled on the 1st at 00:10, a reconciliation sweep every day at 02:30 whose
  owner chose what DST does (``dst: {"gap": "skip", "overlap": "both"}``: on the last
  Sunday of March, when clocks skip that hour, it is a skipped run; on the last Sunday of
  October, when 02:30 happens twice, it runs at both), a reconciliation sweep every
  quarter of an hour (something runs minutes after a start), the billing preparation on
  weekdays at 06:00 within a 30-minute flexible window (each run due at a stable instant
  in it), an automatic close of a month-end accruals batch, and one paused schedule with
  its reason;
* two deliveries owned by the analyst: the open invoices as CSV every morning at 07:00 to
  the admin, the analyst and the viewer, and the receivables-aging report over the
  latest published snapshot month as PDF on the 2nd at 09:00 to the admin;
* two suppressed addresses (:func:`_suppressions`), so an admin can try "remove a
  suppression": a notice e-mail to the person who left (Lee Left) bounced permanently two
  days before the start, and one to Max Both drew a complaint a day before it; each SES
  event is recorded by the product's own function, as the message-events consumer does;
* in the second workspace with an admin persona (Sydney), one daily sweep, so switching
  people shows another workspace's own list;
* work for the operators' lists (:func:`_operator_work`): a failing sweep (monthly) with
  two failed Run now runs of the sample's author, each of five attempts (one per receive):
  one whose bank feed timed out on every receive (settled on the final one, no dead letter)
  and one whose consumer was killed on every receive (settled by the dispatcher when its
  last lease ran out; its message dead-lettered), a run whose execution stopped answering
  a minute ago (stranded: the dispatcher takes it over after the re-offer period), and,
  once the queues exist (:func:`seed_dead_letters`, called by ``serve``), that run's
  message in the accounting dead-letter queue and a malformed one in the queries
  dead-letter queue;
* a failed snapshot period (:func:`drill_failed_snapshot`): the Platform self-test's version 1
  of Berlin's last completed month fails its check with a failure code and message, so
  staff find a failed period on a first start and re-run it (version 2 publishes). The
  snapshot planner's first pass runs before the server answers (:func:`catch_up_snapshots`),
  so the sample's completed months are published, or failed, when the console opens, and
  the overdue alarm is not raised on a fresh start for months that publish seconds later.

Seeded once per database: when the Berlin workspace already has a schedule named as one
of these, nothing is added (a restart keeps what the person changed, deleted or paused).
``serve --empty`` starts without them.
"""

from __future__ import annotations

import json
import os
import random
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from timekeeper.accounting import books
from timekeeper.db.sql import load_queries
from timekeeper.local.delivery import create_aging_report
from timekeeper.reporting import store
from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule
from timekeeper.schedules import service
from timekeeper.schedules.runs import Event, record_events
from timekeeper.settings import SELFTEST_DRILLS_VARIABLE
from timekeeper.topology import ACCOUNTING, SNAPSHOTS

SQL = load_queries("timekeeper.local", "serve_sample.sql")

#: Who the sample's accounting schedules were created by (their history's actor).
ACTOR = "serve-sample"
#: The accounting pipeline's owner name.
OWNER = "accounting"
#: The name that marks a database as seeded (the first sample schedule).
MARKER = "Nightly reconciliation"

SUBJECT = "{{ schedule_name }} for {{ run_date }}"
BODY = ("<p>Hello {{ recipient_name }},</p><p>{{ schedule_name }} for {{ run_date }} is ready: "
        "<a href=\"{{ link }}\">download it here</a>.</p>")


def seed_serve_sample(conn: Any, platform: Any, *, now: datetime) -> dict[str, Any]:
    """Add the schedules and deliveries above to the Platform sample ``platform``
    (:class:`~timekeeper.local.platform_data.SampleSet`) in ``conn``'s database, as of
    ``now`` (aware UTC), in one transaction. Returns ``{name: schedule id}`` of what was
    created, empty when the database was seeded before. Raises ``psycopg.Error`` when the
    database refuses (nothing is added then)."""
    berlin = platform.workspaces.get("berlin")
    if berlin is None:
        return {}
    with conn.transaction():
        # One seeding at a time (two serve processes on one database): the second waits, then
        # finds the marker.
        conn.execute(SQL["lock_serve_sample"])
        seeded = conn.execute(SQL["sample_schedule_exists"],
                              (berlin, MARKER)).fetchone()
        if seeded is not None:
            return {}
        created = _accounting(conn, berlin, "Europe/Berlin", now)
        sydney = platform.workspaces.get("sydney")
        if sydney is not None:
            created["Harbour reconciliation"] = service.create_schedule(
                conn, workspace_id=sydney, owner=OWNER, work_kind="reconciliation.sweep", actor=ACTOR, now=now,
                name="Harbour reconciliation",
                recurrence={"calendar": {"frequency": "daily", "times": ["01:30"]},
                            "timezone": "Australia/Sydney"}).id
        created.update(_deliveries(conn, berlin, platform.users, now))
        _suppressions(conn, berlin, platform.users, now)
        created.update(_operator_work(conn, berlin, "Europe/Berlin", now))
    return created


def _suppressions(conn: Any, workspace_id: Any, users: dict[str, str], now: datetime) -> None:
    """Put two addresses on ``workspace_id``'s suppression list as the product does: a
    notice message (an outbox row, as sent) to the person who left bounces permanently two
    days before ``now`` and one to the multi-workspace person draws a complaint a day
    before it; each SES event goes through
    :func:`timekeeper.reporting.message_states.record_message_event` (the message-events
    consumer's own function). A persona the sample lacks is left out."""
    from timekeeper.local.delivery import ses_event
    from timekeeper.reporting.message_states import SesEvent, record_message_event

    for persona, kind, ago in (("left", "Bounce", timedelta(days=2)), ("multi", "Complaint", timedelta(days=1))):
        user_id = users.get(persona)
        person = conn.execute(SQL["sample_person"], (user_id,)).fetchone() if user_id else None
        if person is None or not person["email"]:
            continue
        sent_at = now - ago
        message_id = f"serve-sample-{persona}-{kind.lower()}"
        conn.execute(SQL["insert_sample_message"], {
            "key": f"notice:{workspace_id}:{user_id}:serve-sample", "user_id": user_id,
            "workspace_id": workspace_id, "message_id": message_id, "sent_at": sent_at})
        event = ses_event(kind, message_id=message_id, to=person["email"], sender="timekeeper@localhost",
                          sent_at=sent_at, at=sent_at + timedelta(minutes=1))
        record_message_event(conn, SesEvent.model_validate(event), now=sent_at + timedelta(minutes=1))


#: The sample's failing schedule and the error of its failed runs.
FAILING = "Bank feed sweep (failing)"
FAILED_ERROR = "the bank feed did not answer: timeout after 30 s (bank:operating)"
#: The accounting pipeline's receives of one message (its queue's redrive limit and the run's
#: attempt limit), its consumer's timeout (a run's lease) and its queue's visibility timeout.
RECEIVES = ACCOUNTING.consumer.max_receive_count
LEASE = timedelta(seconds=ACCOUNTING.consumer.timeout_s)
VISIBILITY = timedelta(seconds=ACCOUNTING.consumer.visibility_timeout_s)
#: The dispatcher's words for a run settled when its last attempt's lease ran out.
EXHAUSTED_ERROR = f"{RECEIVES} attempts ended without an outcome (the consumer was killed or timed out)"


def _operator_work(conn: Any, workspace_id: Any, zone: str, now: datetime) -> dict[str, Any]:
    """The failing schedule with two failed runs and a stranded run (see the module
    docstring); ``{name: id}`` with ``failed run`` (the dead-lettered one) and ``stranded run``.

    Both failed runs are Run now requests of the sample's author (the monthly rule's days
    are far), each as the accounting pipeline leaves one (:data:`RECEIVES` receives):

    * two days before ``now``: the bank feed timed out on every receive; the first four
      attempts failed and were retried after the pipeline's backoff, the last failed on the
      final receive and was settled Failed ``reconciliation_failed`` (acknowledged: no dead
      letter);
    * an hour before ``now``: the consumer was killed (it outlived its timeout) on each of
      its receives, a visibility timeout apart; every attempt ended without an outcome (the
      next receive took it over), the dispatcher settled the run Failed
      ``attempts_exhausted`` when the last lease ran out, and the message, never
      acknowledged, reached the dead-letter queue when its last visibility timeout ended,
      at about ``now`` (:func:`seed_dead_letters` puts it there)."""
    failing = service.create_schedule(
        conn, workspace_id=workspace_id, owner=OWNER, work_kind="reconciliation.sweep", actor=ACTOR, now=now,
        name=FAILING, recurrence={"calendar": {"frequency": "monthly", "month_day": 28, "times": ["03:00"]},
                                  "timezone": zone}).id
    runs = {}
    # The bank feed's timeout: each attempt 30 s, the next receive after the pipeline's backoff
    at = now - timedelta(days=2)
    backoff = list(ACCOUNTING.retry_backoff_s)
    starts = [at + timedelta(seconds=5)]
    for n in range(1, RECEIVES):
        starts.append(starts[-1] + timedelta(seconds=30 + backoff[min(n - 1, len(backoff) - 1)]))
    runs["failed earlier"] = _failed_run(conn, failing, "sample:failed earlier", at, starts, retried=True,
                                         ended=starts[-1] + timedelta(seconds=30),
                                         outcome="reconciliation_failed", error=FAILED_ERROR)
    # Killed on every receive: the next receive a visibility timeout later takes each attempt over
    at = now - RECEIVES * VISIBILITY
    starts = [at + timedelta(seconds=5) + n * VISIBILITY for n in range(RECEIVES)]
    runs["failed run"] = _failed_run(conn, failing, "sample:failed run", at, starts, retried=False,
                                     ended=starts[-1] + LEASE + timedelta(seconds=20),
                                     outcome="attempts_exhausted", error=EXHAUSTED_ERROR)
    conn.execute(SQL["mark_failing"], {"schedule_id": failing, "failures": 2, "outcome": "attempts_exhausted",
                                       "at": starts[-1] + LEASE + timedelta(seconds=20)})
    started = now - timedelta(minutes=4)
    runs["stranded run"] = conn.execute(SQL["insert_sample_run"], {
        "schedule_id": failing, "key": "sample:stranded", "at": started, "state": "running", "attempts": 1,
        "actor": ACTOR,
        "lease_until": now - timedelta(minutes=1), "started_at": started, "finished_at": None,
        "outcome_code": None, "error": None}).fetchone()["id"]
    # Each Run now's history event, as the product's Run now records it (the run page's and
    # the schedule page's History: "Run now requested by ...")
    requested = {"failed earlier": now - timedelta(days=2), "failed run": now - RECEIVES * VISIBILITY,
                 "stranded run": started}
    for key, at in requested.items():
        record_events(conn, [Event(failing, workspace_id, "run_requested", None, None, runs[key])], actor=ACTOR,
                      now=at)
    return {FAILING: failing, "failed run": runs["failed run"], "stranded run": runs["stranded run"]}


def _failed_run(conn: Any, schedule_id: Any, key: str, at: datetime, starts: list[datetime], *, retried: bool,
                ended: datetime, outcome: str, error: str) -> Any:
    """Insert a failed Run now of ``schedule_id`` requested at ``at`` whose attempts started
    at ``starts`` (one a receive): the superseded ones ``retried`` (each failed with ``error``
    after 30 s and gave its lease back) or taken over (killed: its lease ran out), the last
    settled at ``ended`` with ``outcome`` and ``error``. Returns the run's id."""
    run_id = conn.execute(SQL["insert_sample_run"], {
        "schedule_id": schedule_id, "key": key, "at": at, "state": "failed", "attempts": len(starts),
        "actor": ACTOR, "lease_until": None, "started_at": starts[0], "finished_at": ended, "outcome_code": outcome,
        "error": error}).fetchone()["id"]
    conn.execute(SQL["insert_sample_attempts"], {
        "run_id": run_id, "error": error if retried else None, "ended": "retried" if retried else "taken_over",
        "starts": starts[:-1], "ends": [s + (timedelta(seconds=30) if retried else LEASE) for s in starts[:-1]],
        "last_started_at": starts[-1]})
    return run_id


def drill_failed_snapshot(workspace_id: Any, zone: str, *, now: datetime) -> date:
    """Make version 1 of the Platform self-test of ``workspace_id``'s last month completed
    at ``now`` (aware UTC) in ``zone`` (IANA) fail its check: the self-test drill
    (``TIMEKEEPER_SELFTEST_DRILLS``, added to what is set; the snapshot types are assembled
    again). Returns the month's first day. A re-run (version 2) publishes."""
    from zoneinfo import ZoneInfo

    from timekeeper.edge import registries

    local = now.astimezone(ZoneInfo(zone))
    month = (date(local.year, local.month, 1) - timedelta(days=1)).replace(day=1)
    drills = [d for d in os.environ.get(SELFTEST_DRILLS_VARIABLE, "").split(",") if d]
    os.environ[SELFTEST_DRILLS_VARIABLE] = ",".join([*drills, f"{workspace_id}/{month:%Y-%m}"])
    registries.reset()
    return month


def catch_up_snapshots(stack: Any, *, now: datetime, passes: int = 20) -> dict[str, int]:
    """Run the snapshot planner of the local ``stack``
    (:class:`~timekeeper.local.stack.LocalStack`) at ``now`` (aware UTC), then admission and
    the job queue until no job is left (at most ``passes`` rounds), with the functions' log
    lines held back (the overdue warning of periods about to publish, the drill's failure).
    Returns ``{"planned", "published", "failed"}``: the runs this pass planned, and the
    versions of every workspace now published or failed."""
    from timekeeper.observability import logger

    level = logger.level
    logger.setLevel("ERROR")
    try:
        summary = stack.plan_snapshots(now)
        for _ in range(passes):
            delivered = stack.drain(now, names=[SNAPSHOTS.name])
            sent = stack.dispatch_snapshots(now)["sent"]
            if not delivered and not sent:
                break
    finally:
        logger.setLevel(level)
    from timekeeper.db.connection import connect

    with connect(stack.database_url) as conn:
        counts = conn.execute(SQL["sample_snapshot_states"]).fetchone()
    return {"planned": int(summary.get("planned", 0)), "published": counts["published"], "failed": counts["failed"]}


def seed_dead_letters(sqs: Any, dead_letter_urls: dict[str, str], created: dict[str, Any], *,
                      workspace_id: Any) -> int:
    """Put the sample's dead letters in the dead-letter queues ``dead_letter_urls`` (name ->
    URL) through the boto3 SQS client ``sqs``: in ``accounting``'s, the run message of the
    sample's dead-lettered run (``created["failed run"]``, received :data:`RECEIVES` times
    as its own queue did); in ``queries``', a body no consumer parses. Nothing when
    ``created`` (:func:`seed_serve_sample`'s answer) is empty: seeded before. Returns the
    number of messages sent."""
    failed = created.get("failed run")
    if failed is None:
        return 0
    sent = 0
    failing = created[FAILING]
    bodies = {"accounting": json.dumps({"run_id": str(failed), "schedule_id": str(failing),
                                        "workspace_id": str(workspace_id), "owner": OWNER,
                                        "work_kind": "reconciliation.sweep"}),
              "queries": "deliver report 42 please"}
    for name, body in bodies.items():
        if name in dead_letter_urls:
            sqs.send_message(QueueUrl=dead_letter_urls[name], MessageBody=body)
            sent += 1
    if "accounting" in dead_letter_urls:
        # A message moved to its dead-letter queue keeps the receive count it died with (on
        # AWS); moto's copy starts at none: received as often as its own queue received it
        for _ in range(RECEIVES):
            sqs.receive_message(QueueUrl=dead_letter_urls["accounting"], MaxNumberOfMessages=10,
                                VisibilityTimeout=0, AttributeNames=["All"])
    return sent


def _accounting(conn: Any, workspace_id: Any, zone: str, now: datetime) -> dict[str, Any]:
    """The books and the accounting schedules of one workspace; returns their ids by name."""
    rng = random.Random(7)
    today = now.date()
    calendar = books.create_calendar(conn, workspace_id=workspace_id, name="Months", timezone=zone,
                                     first_period_start=date(today.year, 1, 1), periods=36)
    journal = books.create_recurring_batch(conn, workspace_id=workspace_id, calendar_id=calendar.id,
                                           name="General journal", opens_on=today, now=now)
    for i in range(8):
        amount = Decimal(rng.randrange(10_00, 2_000_00)) / 100
        day = today - timedelta(days=20 - i * 2)
        books.add_entry(conn, workspace_id=workspace_id, batch_id=journal.active_batch_id,
                        account="bank:operating", amount=amount, entry_date=day, reference=f"DUES-{i:03d}")
        books.add_entry(conn, workspace_id=workspace_id, batch_id=journal.active_batch_id, account="revenue",
                        amount=-amount, entry_date=day, reference=f"DUES-{i:03d}")
        books.add_bank_line(conn, workspace_id=workspace_id, bank_account="bank:operating", amount=amount,
                            booked_on=day + timedelta(days=1), reference=f"DUES-{i:03d}")
    accruals = books.create_batch(conn, workspace_id=workspace_id, name="Month-end accruals",
                                  close_at=now + timedelta(days=30), now=now)
    books.create_billing_plan(conn, workspace_id=workspace_id, customer="Bootshaus Catering",
                              amount=Decimal("480.00"), currency="EUR", interval_months=1,
                              first_bill_date=today.replace(day=1))
    specs: list[tuple[str, str, dict[str, Any], Any]] = [
        (MARKER, "reconciliation.sweep", {"calendar": {"frequency": "daily", "times": ["02:30"]},
                                          "dst": {"gap": "skip", "overlap": "both"}}, None),
        ("Quarter-hour reconciliation", "reconciliation.sweep", {"cron": "*/15 * * * *"}, None),
        ("General journal roll", "batch.roll",
         {"calendar": {"frequency": "monthly", "month_day": 1, "times": ["00:10"]}}, journal.id),
        ("Invoice preparation", "billing.prepare", {"cron": "0 6 * * 1-5", "window_minutes": 30}, None),
        ("Close the month-end accruals", "batch.auto_close",
         {"calendar": {"frequency": "monthly", "month_day": "last", "times": ["18:00"]}}, accruals.id),
        ("Weekly bank sweep (paused)", "reconciliation.sweep", {"cron": "0 9 * * 1"}, None),
    ]
    created = {}
    for name, kind, rule, subject in specs:
        created[name] = service.create_schedule(
            conn, workspace_id=workspace_id, owner=OWNER, work_kind=kind, recurrence={**rule, "timezone": zone},
            actor=ACTOR, now=now, subject_id=subject, name=name).id
    service.pause_schedule(conn, workspace_id=workspace_id, schedule_id=created["Weekly bank sweep (paused)"],
                           actor=ACTOR, now=now)
    return created


def _deliveries(conn: Any, workspace_id: Any, users: dict[str, str], now: datetime) -> dict[str, Any]:
    """The analyst's saved query, report and two query schedules; their ids by name."""
    analyst = users["analyst"]
    unpaid, _ = store.create_query(
        conn, workspace_id=workspace_id, name="Unpaid invoices", actor=analyst, now=now, definition={
            "entity": "invoices", "columns": ["number", "member_name", "amount_minor", "due_date"],
            "filters": [{"column": "status", "op": "eq", "value": "open"}], "sort": [{"column": "due_date"}],
            "limit": 500})
    report = create_aging_report(conn, workspace_id=workspace_id, actor=analyst, now=now,
                                 query_name="Receivables aging rows")
    specs = [
        ("Morning unpaid invoices", "0 7 * * *", Source("query", unpaid.id), "csv",
         [users["admin"], analyst, users["viewer"]]),
        ("Monthly receivables aging", "0 9 2 * *", Source("report", report_id=report.id), "pdf", [users["admin"]]),
    ]
    created = {}
    for name, cron, source, fmt, to in specs:
        schedule, _ = create_query_schedule(
            conn, workspace_id=workspace_id, actor=analyst,
            new=NewQuerySchedule(name=name, recurrence={"cron": cron, "timezone": "Europe/Berlin"}, source=source,
                                 format=fmt, recipients=to, subject_template=SUBJECT, body_template=BODY), now=now)
        created[name] = schedule.id
    return created
