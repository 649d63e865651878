"""``python -m timekeeper simulate``: the whole system on a simulated clock.

Starts the local stack (:mod:`timekeeper.local.stack`: the database, migrations, moto with
the topology's queues), loads the sample tenant set and then, minute by simulated minute,
invokes the REAL dispatcher handler with an EventBridge scheduled event and lets an SQS
event source mapping feed the REAL consumer handler. Nothing here is a second
implementation: the handlers, the queues' redrive and the database are the ones the tests
and AWS use. Ends with a summary read from the database and the queues.

Idle minutes are fast-forwarded: when no offer waits to be published, no pause notice or
posting job waits and no snapshot run waits for admission, a dispatcher pass can change
nothing before the earliest of: the next due instant, a waiting run's next threshold (a
lease expiring, a re-offer becoming due), a failed message's visibility timeout, so the
clock jumps there (an outage's start and the simulation's end stop the jump too; see the
``quiet_until`` statement). ``fast_forward=False`` invokes the dispatcher at every
simulated minute instead.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from timekeeper.db import load_queries
from timekeeper.settings import SELFTEST_DRILLS_VARIABLE

SIM_DATABASE = "timekeeper_sim"
SQL = load_queries("timekeeper.local", "simulate.sql")
_MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Outage:
    """The dispatcher is silent from ``start`` (aware UTC) for ``length``."""

    start: datetime
    length: timedelta

    def covers(self, instant: datetime) -> bool:
        return self.start <= instant < self.start + self.length


@dataclass(frozen=True)
class SimulationOptions:
    """``start`` date (UTC midnight), ``days`` to simulate, random ``seed`` of the sample
    data, dispatcher ``outages``, ``poison`` malformed messages sent at the start, and
    ``fast_forward`` over idle minutes (see the module docstring)."""

    start: date = date(2027, 3, 1)
    days: int = 41
    seed: int = 7
    outages: tuple[Outage, ...] = (Outage(datetime(2027, 3, 20, 10, 0, tzinfo=UTC), timedelta(hours=3)),)
    poison: int = 1
    show_progress: bool = True
    database: str = SIM_DATABASE
    fast_forward: bool = True
    #: Minutes simulated after the last whole day (a fault campaign's quiet period).
    extra_minutes: int = 0
    #: Where the delivered files and the messages' bodies are copied (None:
    #: ``simulate-deliveries`` in the state folder, :func:`timekeeper.local.embedded.state_home`).
    delivery_dir: Path | None = None


@dataclass
class SimulationResult:
    """What the summary shows, as data (the e2e tests assert on it).

    Minutes: ``dispatcher_invocations`` (minutes in which every pipeline's dispatcher was
    invoked once) + ``silent_minutes`` (outages) + ``idle_minutes`` (fast-forwarded,
    nothing could happen) = ``minutes``.
    """

    database_url: str
    wall_seconds: float = 0.0
    minutes: int = 0
    dispatcher_invocations: int = 0
    silent_minutes: int = 0
    idle_minutes: int = 0
    consumer_invocations: int = 0
    consumer: dict[str, int] = field(default_factory=dict)
    #: Dispatcher and planner invocations that raised or died, by "function: error".
    scheduled_errors: dict[str, int] = field(default_factory=dict)
    runs_by_kind: list[dict[str, Any]] = field(default_factory=list)
    backlog: list[dict[str, Any]] = field(default_factory=list)
    dst_shifted: list[dict[str, Any]] = field(default_factory=list)
    dst_overlap: list[dict[str, Any]] = field(default_factory=list)
    paused: list[dict[str, Any]] = field(default_factory=list)
    dlq_messages: dict[str, int] = field(default_factory=dict)
    notifications_sent: int = 0
    posting_jobs: dict[str, int] = field(default_factory=dict)
    unfinished_runs: int = 0
    #: Snapshot runs by type, mode, state and reason; the periods (latest run of each);
    #: the planner's overdue periods at the end; the staff requests the simulation made.
    snapshot_states: list[dict[str, Any]] = field(default_factory=list)
    snapshot_periods: list[dict[str, Any]] = field(default_factory=list)
    snapshot_overdue: list[str] = field(default_factory=list)
    #: Scheduled delivery: ``{"deliveries": [{status, reason, n}], "runs": [{name, trigger,
    #: state, outcome, n}]}``, how many files were copied, and the folder holding them and
    #: the messages' bodies.
    delivery: dict[str, Any] = field(default_factory=dict)
    delivery_files: int = 0
    delivery_dir: str = ""
    #: Deliveries of reports read from a published snapshot: per snapshot section the
    #: basis (type, period, version, publication time), its protection, the change flag.
    snapshot_deliveries: list[dict[str, Any]] = field(default_factory=list)
    staff_requests: list[str] = field(default_factory=list)
    #: Owners are told: notices by kind, audience and reason (``n``, ``mailed``), the notice
    #: e-mails sent (each with the count of notices it carried: more than one is a digest),
    #: the owner hand-off's steps and the schedules it paused as ownerless (with their fate).
    notices: list[dict[str, Any]] = field(default_factory=list)
    notice_messages: list[dict[str, Any]] = field(default_factory=list)
    hand_off: list[str] = field(default_factory=list)
    ownerless: list[dict[str, Any]] = field(default_factory=list)
    embedded_database: bool = True


def _ceil_minute(start: datetime, instant: datetime) -> int:
    """The first simulated minute (counted from ``start``) at or after ``instant``."""
    return math.ceil((instant - start) / _MINUTE)


def _next_busy_minute(conn: Any, stack: Any, options: SimulationOptions, start: datetime, minute: int,
                      total: int) -> int:
    """The next minute at which a dispatcher pass or a delivery can change anything,
    ``minute + 1`` when something is pending already (see the module docstring)."""
    from timekeeper.topology import PIPELINES, SNAPSHOTS

    following = minute + 1
    quiet = conn.execute(SQL["quiet_until"], {
        "now": start + minute * _MINUTE, "reoffer_after": min(p.reoffer_after for p in PIPELINES.values()),
        "snapshot_reoffer_after": SNAPSHOTS.reoffer_after, "job_lost_after": SNAPSHOTS.job_lost_after}).fetchone()
    if quiet["busy"]:
        return following
    stops = [total]
    for at in (quiet["next_due_at"], quiet["wake_at"]):
        if at is not None:
            stops.append(_ceil_minute(start, at))
    if quiet["snapshot_retry_at"] is not None:
        stops.append(_ceil_minute(start, quiet["snapshot_retry_at"]))
    if quiet["next_month_end"] is not None:  # the first planner tick after a month ends somewhere
        month_end = _ceil_minute(start, quiet["next_month_end"])
        stops.append(-(-month_end // PLANNER_EVERY) * PLANNER_EVERY)
    stops += [_ceil_minute(start, request.at) for request in _staff_requests(start)
              if request.at > start + minute * _MINUTE]
    stops += [_ceil_minute(start, at) for at in _hand_off_instants(start) if at > start + minute * _MINUTE]
    if (visible_at := stack.next_visible_at()) is not None:
        stops.append(_ceil_minute(start, visible_at))
    stops += [_ceil_minute(start, o.start) for o in options.outages if o.start > start + minute * _MINUTE]
    return max(following, min(stops))


def _hand_off_instants(start: datetime) -> list[datetime]:
    """When the owner hand-off's steps happen (:func:`timekeeper.local.delivery.hand_off_story`)."""
    from timekeeper.local.delivery import DeliverySample, hand_off_story

    return list(hand_off_story(DeliverySample({}), start))


class SimulationConnection:
    """The simulation's own database connection (the samples, the staff requests, the
    summary; never the product's): every attribute is the held psycopg connection's
    (:func:`timekeeper.db.connection.connect` of ``url``), and :meth:`reopen` replaces it,
    which a fault campaign does after it restarted the database server (the restart ends
    this connection too). A context manager: its exit closes the held connection."""

    def __init__(self, url: str) -> None:
        from timekeeper.db.connection import connect

        self._url = url
        self._connect = connect
        self._conn = connect(url)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def reopen(self) -> None:
        """Close the held connection (whatever its state) and open a new one to the same URL.
        Raises ``psycopg.OperationalError`` when the server cannot be reached."""
        try:
            self._conn.close()
        except Exception:  # noqa: BLE001 - a connection the server ended may fail to close cleanly
            pass
        self._conn = self._connect(self._url)

    def __enter__(self) -> SimulationConnection:
        return self

    def __exit__(self, *_: Any) -> None:
        self._conn.close()


def run_simulation(options: SimulationOptions, console: Any = None, hooks: Any = None) -> SimulationResult:
    """Run the simulation described by ``options``; print progress to ``console`` (rich).

    Returns the :class:`SimulationResult`. The database (``options.database``) is created
    afresh and kept; everything else started is stopped, also on ``KeyboardInterrupt``.
    ``hooks`` (a fault campaign, :mod:`timekeeper.local.chaos`): ``hooks.started(stack,
    conn)`` is called once the samples are loaded, before the first minute,
    ``hooks.minute(stack, conn, now)`` in each minute the simulation runs, after the
    dispatcher passes (True: it queued something, so every queue is polled), and
    ``hooks.finished(stack, conn, result)`` after the summary was read, before the stack
    stops (``conn`` is the simulation's own connection).
    """
    from timekeeper.local.stack import quiet_lambda_environment, start_local_stack

    quiet_lambda_environment()  # before the imports below build the handlers' logger
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from timekeeper import clock
    from timekeeper.aws.ses import SesMailer
    from timekeeper.edge import adapters
    from timekeeper.local.aws import MAIL_SENDER
    from timekeeper.local.delivery import (
        DiskMailer,
        EventingMailer,
        copy_files,
        delivery_summary,
        hand_off_story,
        load_delivery_sample,
        one_click_opt_out,
        sample_outcomes,
        snapshot_deliveries,
    )
    from timekeeper.local.sample import load_sample
    from timekeeper.local.stack import MESSAGE_EVENTS_SOURCE
    from timekeeper.topology import PIPELINES, SNAPSHOTS

    wall_start = time.monotonic()
    embedded_database = not os.environ.get("DATABASE_URL")
    start = datetime.combine(options.start, datetime.min.time(), tzinfo=UTC)
    stack = start_local_stack(database=options.database, reset=True, aws_server=False, platform_sample_at=start,
                              platform_seed=options.seed, background_renders=False)
    from timekeeper.local.embedded import state_home

    delivery_dir = options.delivery_dir or state_home() / "simulate-deliveries"
    if delivery_dir.exists():
        shutil.rmtree(delivery_dir)
    sim = {"now": start}
    mailer = EventingMailer(DiskMailer(SesMailer(stack.aws.client("ses"), MAIL_SENDER), delivery_dir / "mail"),
                            stack.aws.client("sns"), stack.aws.message_events_topic_arn, sender=MAIL_SENDER,
                            now=lambda: sim["now"])
    adapters.install_mailer(mailer)
    result = SimulationResult(database_url=stack.database_url, embedded_database=embedded_database)
    clock.install(lambda: sim["now"])
    try:
        with SimulationConnection(stack.database_url) as conn:
            load_sample(conn, start=start, seed=options.seed)
            snapshot_area = _snapshot_sample(conn, stack, start)
            sample = load_delivery_sample(conn, workspace_id=stack.platform.first_workspace,
                                          users=stack.platform.users, start=start)
            hand_off = hand_off_story(sample, start)
            mailer.outcomes = sample_outcomes(conn, stack.platform.users)
            opted_out = False
            if hooks is not None:
                hooks.started(stack, conn)
            staff = {request.at: [request] for request in _staff_requests(start)}
            overdue: list[str] = []
            sqs = stack.aws.client("sqs")
            for pair in stack.aws.queues.values():
                for i in range(options.poison):
                    sqs.send_message(QueueUrl=pair.url, MessageBody=json.dumps({"run": f"not-a-run-{i}"}))
            total_minutes = options.days * 24 * 60 + options.extra_minutes
            progress = Progress(TextColumn("[bold]simulating[/] {task.description}"), BarColumn(),
                                TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                                console=console, disable=not options.show_progress, transient=True)
            with progress:
                task = progress.add_task(start.date().isoformat(), total=total_minutes)
                minute = 0
                while minute < total_minutes:
                    now = start + minute * _MINUTE
                    sim["now"] = now
                    sent_to: set[str] = set()  # the queues something was sent to this minute
                    failed_before = sum(stack.scheduled_errors.values())
                    if any(o.covers(now) for o in options.outages):
                        result.silent_minutes += 1
                    else:
                        result.dispatcher_invocations += 1  # one pass of every pipeline's dispatcher
                        for name, pipeline in PIPELINES.items():
                            report = stack.dispatch(pipeline, now)
                            if report["published"] + report["reoffered"]:
                                sent_to.add(name)
                        for request in staff.pop(now, []):
                            result.staff_requests.append(request.make(conn, snapshot_area, now))
                        if (step := hand_off.pop(now, None)) is not None:
                            result.hand_off.append(step(conn, now))
                        if minute % PLANNER_EVERY == 0:
                            planned = stack.plan_snapshots(now)
                            overdue = planned["overdue_periods"]
                            if planned.get("sent"):
                                sent_to.add(SNAPSHOTS.name)
                        if stack.dispatch_snapshots(now)["sent"]:
                            sent_to.add(SNAPSHOTS.name)
                    if hooks is not None and hooks.minute(stack, conn, now):
                        sent_to.update(stack.sources)  # what the hooks' API requests queued
                    if minute == 0 or sum(stack.scheduled_errors.values()) > failed_before:
                        # the malformed messages; or a pass that failed may have sent part of its messages
                        sent_to.update(stack.sources)
                    sent_to.update(stack.sources_visible_at(now))
                    if sent_to:
                        stack.poll(now, sent_to)
                    if mailer.take_published():  # SES's message states, as the set's events arrive
                        stack.poll(now, {MESSAGE_EVENTS_SOURCE})
                    if not opted_out:
                        opted_out = _opt_out_once(mailer, conn, stack, one_click_opt_out)
                    following = minute + 1
                    if options.fast_forward and not any(o.covers(now) for o in options.outages):
                        following = _next_busy_minute(conn, stack, options, start, minute, total_minutes)
                        result.idle_minutes += following - minute - 1
                    if following // 60 != minute // 60:
                        progress.update(task, completed=following,
                                        description=(start + following * _MINUTE).strftime("%Y-%m-%d %H:%M"))
                    minute = following
                result.minutes = total_minutes
            result.consumer = stack.consumer_stats()
            result.consumer_invocations = result.consumer.get("invocations", 0)
            result.scheduled_errors = {f"{function}: {error}": n
                                       for (function, error), n in sorted(stack.scheduled_errors.items())}
            result.dlq_messages = stack.dlq_depths()
            result.snapshot_overdue = [_overdue_words(conn, line) for line in overdue]
            _summarize(conn, result)
            result.delivery = delivery_summary(conn)
            result.snapshot_deliveries = snapshot_deliveries(conn)
            result.delivery_files = copy_files(stack.aws.client("s3"), stack.aws.files_bucket, delivery_dir / "files")
            result.delivery_dir = str(delivery_dir)
            if hooks is not None:
                hooks.finished(stack, conn, result)
    finally:
        adapters.install_mailer(None)
        stack.stop()
    result.wall_seconds = time.monotonic() - wall_start
    return result


#: The schedule whose first message the sample's admin opts out of (one click).
OPT_OUT_SCHEDULE = "Daily open invoices"


def _opt_out_once(mailer: Any, conn: Any, stack: Any, opt_out: Any) -> bool:
    """Once the admin received a message of :data:`OPT_OUT_SCHEDULE`, click its one-click
    opt-out (the REAL handler of the public link routes' function, ``functions/downloads``);
    True once one was accepted (200). The newest such message is tried first. A refusal is
    tried again the next minute, as a mailbox provider retries: a server error or a failed
    invocation (a fault campaign's crash, or a disconnect the function meets: API Gateway
    answers 502), and a 403 for a message whose attempt died between the provider's
    acceptance and its record (the documented double-send window: the link names a
    delivery that was never recorded; the retry sends a message whose link works). The
    simulation's end-to-end test checks that the opt-out happened."""
    admin = conn.execute(SQL["email_of_user"], (stack.platform.users["admin"],)).fetchone()
    address = (admin["email"] or "").lower()
    for sent in reversed(mailer.sent):
        if sent["to"] == address and sent["subject"].startswith(OPT_OUT_SCHEDULE):
            try:
                if opt_out(sent["opt_out_url"]) == 200:
                    return True
            except Exception:  # noqa: BLE001 - a failed invocation: the provider retries
                return False
    return False


def _summarize(conn: Any, result: SimulationResult) -> None:
    result.runs_by_kind = conn.execute(SQL["runs_by_kind"]).fetchall()
    result.backlog = conn.execute(SQL["backlog"]).fetchall()
    result.dst_shifted = conn.execute(SQL["dst_shifted"]).fetchall()
    result.dst_overlap = repeated_local_times(conn.execute(SQL["scheduled_runs_in_zones_with_dst"]).fetchall())
    result.paused = conn.execute(SQL["paused"]).fetchall()
    result.notifications_sent = conn.execute(SQL["notifications_sent"]).fetchone()["n"]
    result.posting_jobs = {r["status"]: r["n"] for r in conn.execute(SQL["posting_jobs"]).fetchall()}
    result.unfinished_runs = conn.execute(SQL["unfinished_runs"]).fetchone()["n"]
    result.snapshot_states = conn.execute(SQL["snapshot_states"]).fetchall()
    result.snapshot_periods = conn.execute(SQL["snapshot_periods"]).fetchall()
    result.notices = conn.execute(SQL["owner_notices"]).fetchall()
    result.notice_messages = conn.execute(SQL["notice_messages"]).fetchall()
    result.ownerless = conn.execute(SQL["ownerless"]).fetchall()


#: The snapshot planner runs every this many simulated minutes (its deployed rule's rate).
PLANNER_EVERY = 15


@dataclass(frozen=True)
class _SnapshotArea:
    """The workspaces the simulation's snapshot story uses: ``berlin`` (the Platform
    sample's), ``kiritimati`` (UTC+14) and ``pago_pago`` (UTC-11)."""

    berlin: Any
    kiritimati: Any
    pago_pago: Any


def _overdue_words(conn: Any, line: str) -> str:
    """An overdue period of the planner's summary (``<workspace id>/<owner>/<type>/<YYYY-MM>``)
    as the summary names it: ``"Ruderverein Spree selftest 2027-03"`` (the workspace by name)."""
    workspace_id, _, rest = line.partition("/")
    _owner, _, rest = rest.partition("/")
    row = conn.execute(SQL["workspace_name"], (workspace_id,)).fetchone()
    return f"{row['name'] if row else workspace_id} {rest.replace('/', ' ')}"


#: The clubs at the far ends of the clock (their workspaces' names, as the summary shows them).
KIRITIMATI, PAGO_PAGO = "Kiritimati Fishing Club", "Pago Pago Canoe Club"


def _snapshot_sample(conn: Any, stack: Any, start: datetime) -> _SnapshotArea:
    """Add two workspaces at the far ends of the clock (empty of business data) beside the
    Platform sample, and set the self-test drill: Berlin's first month completed during the
    simulation fails validation in its version 1 (a staff re-run follows, see
    :func:`_staff_requests`)."""
    from timekeeper.platform.directory import create_workspace

    created = start - timedelta(days=100)
    far_east = create_workspace(conn, name=KIRITIMATI, timezone="Pacific/Kiritimati", currency="AUD",
                                now=created).id
    far_west = create_workspace(conn, name=PAGO_PAGO, timezone="Pacific/Pago_Pago", currency="USD",
                                now=created).id
    berlin = stack.platform.first_workspace
    drill_month = _first_month_end_after(start, "Europe/Berlin")
    os.environ[SELFTEST_DRILLS_VARIABLE] = f"{berlin}/{drill_month:%Y-%m}"
    return _SnapshotArea(berlin=berlin, kiritimati=far_east, pago_pago=far_west)


def _first_month_end_after(start: datetime, timezone: str) -> date:
    """The first day of the local month in progress at ``start`` in ``timezone`` (the
    month that completes first during the simulation)."""
    local = start.astimezone(ZoneInfo(timezone))
    return date(local.year, local.month, 1)


@dataclass(frozen=True)
class _StaffRequest:
    """A staff request the simulation makes at instant ``at`` (aware UTC, a whole minute)."""

    at: datetime
    mode: str
    snapshot_type: str
    area_key: str
    period: Any  # callable (start) -> date
    reason: str

    def make(self, conn: Any, area: _SnapshotArea, now: datetime) -> str:
        """Record the request through the ledger (as the staff routes do); return a line
        for the summary (the run's version, or the refusal's reason)."""
        from timekeeper.edge import registries
        from timekeeper.snapshots.ledger import RequestRefused, request_run

        snapshot_type = registries.snapshot_types().get("platform", self.snapshot_type)
        period = self.period(now)
        workspace_id = getattr(area, self.area_key)
        # The workspace by its name (the club), as the summary's tables name it
        club = conn.execute(SQL["workspace_name"], (workspace_id,)).fetchone()["name"]
        asked = f"{now:%Y-%m-%d %H:%M} {self.mode} {self.snapshot_type} {club} {period:%Y-%m}"
        try:
            run = request_run(conn, snapshot_type=snapshot_type, workspace_id=workspace_id,
                              period=period, mode=self.mode, reason=self.reason, requested_by="staff:simulation",
                              now=now)
            return f"{asked}: version {run.version} planned"
        except RequestRefused as refused:
            return f"{asked}: refused ({refused.reason})"


def _months_before(now: datetime, months: int) -> date:
    local = now.astimezone(ZoneInfo("Europe/Berlin"))
    index = local.year * 12 + local.month - 1 - months
    return date(index // 12, index % 12 + 1, 1)


def _staff_requests(start: datetime) -> list[_StaffRequest]:
    """The simulation's staff requests: a backfill of an old Berlin month on day 2; a re-run
    of Berlin's previous month's membership counts on day 3; a re-run of Berlin's previous
    month's aging on day 30, after the monthly aging report delivered that version (it is
    captured: refused ``protected_history``); a re-run of the self-test month whose version
    1 fails validation, on day 33 (after that month ended)."""
    day = timedelta(days=1)
    return [
        _StaffRequest(start + 2 * day + timedelta(hours=9), "backfill", "ar_aging", "berlin",
                      lambda now: _months_before(now, 8), "audit asked for last summer's aging"),
        _StaffRequest(start + 3 * day + timedelta(hours=9), "manual", "membership_counts", "berlin",
                      lambda now: _months_before(now, 1), "late cancellations were entered"),
        _StaffRequest(start + 30 * day + timedelta(hours=9), "manual", "ar_aging", "berlin",
                      lambda now: _months_before(now, 1), "a late payment was entered"),
        _StaffRequest(start + 33 * day + timedelta(hours=9), "manual", "selftest", "berlin",
                      lambda now: _months_before(now, 1), "re-run after the failed self-test"),
    ]


def is_repeated_local_time(local: datetime, zone: ZoneInfo) -> bool:
    """Whether the naive ``local`` time occurs twice in ``zone`` (a fall-back overlap):
    its first reading (``fold=0``) has a larger UTC offset than its second. A time in a
    spring-forward gap differs the other way round and is not repeated."""
    first = local.replace(tzinfo=zone, fold=0).utcoffset()
    second = local.replace(tzinfo=zone, fold=1).utcoffset()
    return first is not None and second is not None and first > second


def repeated_local_times(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The occurrences of ``runs`` (rows with ``name``, ``timezone``, ``occurrence_local``,
    ``occurrence_at``, ``state``) whose local time was repeated by a fall-back change,
    one row per schedule and local time: the first UTC instant it ran at and ``runs``
    (1 for a fixed time, which runs once; 2 for an hourly wall-time rule, which runs at
    each real instant)."""
    out: dict[tuple[str, datetime], dict[str, Any]] = {}
    for r in runs:
        if not is_repeated_local_time(r["occurrence_local"], ZoneInfo(r["timezone"])):
            continue
        key = (r["name"], r["occurrence_local"])
        if key in out:
            out[key]["runs"] += 1
        else:
            out[key] = {**r, "runs": 1}
    return list(out.values())


def print_summary(result: SimulationResult, console: Any) -> None:
    """Render ``result`` as rich tables (a table with no rows is one line instead)."""
    from rich.table import Table

    def table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]], *, note: str = "") -> None:
        if not rows:
            console.print(f"{title}: none.")
            return
        out = Table(title=title, caption=note or None)
        for col in columns:
            out.add_column(col, justify="right" if col in ("runs", "skipped") else "left")
        for row in rows:
            out.add_row(*row)
        console.print(out)

    console.print(f"[bold]Simulated {result.minutes // 1440} days[/] ({result.minutes:,} minutes) in "
                  f"{result.wall_seconds:.1f}s wall time: {result.dispatcher_invocations:,} dispatcher invocations, "
                  f"{result.silent_minutes} silent minutes (outage), {result.idle_minutes:,} idle minutes "
                  f"fast-forwarded (nothing due or pending), {result.consumer_invocations:,} consumer invocations.")
    table("Runs by work kind and outcome", ("work kind", "trigger", "state", "outcome", "runs"),
          [(r["work_kind"], r["trigger"], r["state"], r["outcome_code"] or "", str(r["runs"]))
           for r in result.runs_by_kind],
          note="failed = settled failed: an expected refusal (e.g. outside_calendar_coverage) or a fault on the "
               "final receive")
    table("Skipped backlog (misfires collapsed to the latest occurrence)",
          ("schedule", "ran for (UTC)", "skipped", "first skipped (UTC)"),
          [(r["name"], _utc(r["occurrence_at"]), str(r["skipped_backlog"]), _utc(r["first_skipped_at"]))
           for r in result.backlog])
    table("Occurrences shifted by a DST gap", ("schedule", "timezone", "intended local", "ran at (UTC)",
                                               "ran at (local)", "state"),
          [(r["name"], r["timezone"], r["occurrence_local"].strftime("%Y-%m-%d %H:%M"), _utc(r["occurrence_at"]),
            _local(r["occurrence_at"], r["timezone"]),
            "skipped (gap day)" if r["outcome_code"] == "skipped_dst_gap" else r["state"])
           for r in result.dst_shifted],
          note="state is the run's: each occurrence ran once, shifted; skipped = its work had nothing to do; "
               "skipped (gap day) = its owner chose to skip the day (not run)")
    table("Occurrences in a repeated hour (DST overlap)", ("schedule", "timezone", "local time",
                                                           "first ran at (UTC)", "runs", "state"),
          [(r["name"], r["timezone"], r["occurrence_local"].strftime("%Y-%m-%d %H:%M"), _utc(r["occurrence_at"]),
            str(r["runs"]), r["state"]) for r in result.dst_overlap],
          note="a fixed local time runs once, at its first instant, unless its owner chose the second or both; "
               "an hourly wall-time rule runs at each")
    table("Paused schedules", ("schedule", "status", "reason", "consecutive failures", "paused at (UTC)", "owner",
                               "owner told of"),
          [(r["name"], r["status"], r["pause_reason"] or "", str(r["consecutive_failures"]), _utc(r["paused_at"]),
            r.get("owner") or "", r.get("owner_told") or "nothing") for r in result.paused])
    consumer = result.consumer
    console.print(f"Consumer: {consumer.get('delivered', 0):,} messages delivered, "
                  f"{consumer.get('failed', 0)} returned as batch item failures (retried after the visibility "
                  f"timeout, dead-lettered after the last receive), {consumer.get('function_errors', 0)} "
                  "invocations that raised (the whole batch retried).")
    console.print("Dispatcher and planner invocations that raised (the next minute's invocation retries): "
                  + (", ".join(f"{k} {v}" for k, v in result.scheduled_errors.items()) or "none") + ".")
    console.print(f"Pause notifications sent: {result.notifications_sent}; runs still unfinished: "
                  f"{result.unfinished_runs}.")
    console.print("Posting jobs (a closed batch's entries posted to the ledger, started after a roll or an "
                  "auto-close commits): "
                  + (", ".join(f"{k} {v}" for k, v in sorted(result.posting_jobs.items())) or "none") + ".")
    table("Monthly snapshots by type and state", ("type", "mode", "state", "reason", "runs"),
          [(r["snapshot_type"], r["mode"], r["state"], r["reason"], str(r["runs"])) for r in result.snapshot_states],
          note="skipped = a loading, disabled or policy-disabled workspace (the reason is kept); "
               "selftest failed selftest_mismatch = a drill: version 1 of one sample month of the selftest "
               "type is told to fail validation; staff's manual re-run publishes version 2")
    table("Snapshot periods (the current version, else the latest run; skipped periods are counted below)",
          ("workspace", "type", "period", "status", "version", "versions", "published (UTC)", "reason"),
          [(r["workspace"], r["snapshot_type"], f"{r['period']:%Y-%m}", r["state"], str(r["version"]),
            str(r["versions"]), _utc(r["published_at"]), r["failure_code"] or "")
           for r in result.snapshot_periods if r["state"] != "skipped"])
    skipped: dict[tuple[str, str], int] = {}
    for r in result.snapshot_periods:
        if r["state"] == "skipped":
            skipped[(r["workspace"], r["skip_reason"])] = skipped.get((r["workspace"], r["skip_reason"]), 0) + 1
    console.print("Skipped snapshot periods (reason kept on the row): "
                  + ("; ".join(f"{w}: {n} ({reason})" for (w, reason), n in sorted(skipped.items())) or "none")
                  + ".")
    console.print("Staff requests: " + ("; ".join(result.staff_requests) or "none") + ".")
    console.print("Overdue snapshot periods at the end (not published 24 h after their local month end): "
                  + (", ".join(result.snapshot_overdue) or "none") + ".")
    delivery = result.delivery or {}
    table("Query schedule runs (scheduled delivery)", ("schedule", "trigger", "state", "outcome", "runs"),
          [(r["name"], r["trigger"], r["state"], r["outcome"], str(r["n"])) for r in delivery.get("runs", [])])
    table("Deliveries by status and reason", ("status", "reason", "deliveries"),
          [(r["status"], r["reason"], str(r["n"])) for r in delivery.get("deliveries", [])])
    table("Reports delivered from published snapshot periods (the render's basis)",
          ("schedule", "ran for (UTC)", "state", "type", "period", "version", "published (UTC)", "choice",
           "protection", "version changed"),
          [(r["name"], _utc(r["occurrence_at"]), r["state"], r["snapshot_type"], r["period"], str(r["version"]),
            r["published_at"][:16].replace("T", " "), r["choice"], r["protection"] or "",
            "yes" if r["version_changed"] else "no") for r in result.snapshot_deliveries],
          note="a version a delivery used is captured: a staff re-run of its period is refused protected_history")
    table("Message states (SES events)", ("state", "kind", "messages"),
          [(r["state"], r["kind"], str(r["n"])) for r in delivery.get("message_states", [])])
    table("Suppressed addresses", ("address", "reason", "since"),
          [(r["address"], r["reason"], r["suppressed_at"].strftime("%Y-%m-%d %H:%M")) for r in
           delivery.get("suppressions", [])])
    table("Opt-outs (one click)", ("schedule", "person", "at"),
          [(r["name"], r.get("person") or r["user_id"], r["opted_out_at"].strftime("%Y-%m-%d %H:%M")) for r in
           delivery.get("opt_outs", [])])
    if result.delivery_dir:
        console.print(f"Delivered files ({result.delivery_files}) are in {result.delivery_dir}/files, the messages "
                      f"(an .html and a .txt part per message, named by its SES message id) in "
                      f"{result.delivery_dir}/mail.")
    table("Owner notices (in the product; e-mailed through the per-recipient outbox)",
          ("kind", "audience", "reason", "notices", "mailed"),
          [(r["kind"], r["audience"], r["reason"], str(r["n"]), str(r["mailed"])) for r in result.notices])
    by_kind: dict[str, int] = {}
    for r in result.notices:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["n"]
    console.print("Owner notices by kind: " + (", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
                                               or "none") + " (schedule_failed: a streak's first failure, or "
                  "every failure when the owner chose so).")
    digests = [m for m in result.notice_messages if m["notices"] > 1]
    console.print(f"Notice e-mails sent: {len(result.notice_messages)}, of which {len(digests)} digest(s) ("
                  + ("; ".join(f"{m.get('person') or m['user_id']} at {_utc(m['sent_at'])}: {m['notices']} notices"
                              for m in digests)
                     or "none") + "): at most one e-mail per person and workspace an hour.")
    console.print("Owner hand-off: " + ("; ".join(result.hand_off) or "none") + ".")
    table("Schedules handed off (their owner left or was deactivated)",
          ("schedule", "status", "reason", "owner now", "why"),
          [(r["name"], r["status"], r["pause_reason"] or "", r.get("owner") or r["owner_user_id"] or "",
            r["why"] or "")
           for r in result.ownerless],
          note="ownerless = listed for the admins until one reassigns it (the access rule asked for the new owner)")
    console.print("Messages in dead-letter queues: "
                  + ", ".join(f"{name} {count}" for name, count in result.dlq_messages.items()) + ".")
    console.print(database_hint(result.database_url, embedded=result.embedded_database))


def database_hint(url: str, *, embedded: bool) -> str:
    """The summary's last line: how to open the kept database with psql."""
    import psycopg

    if not embedded:
        return f"Database kept for inspection: psql '{url}'"
    name = psycopg.conninfo.conninfo_to_dict(url).get("dbname", SIM_DATABASE)
    return (f"Database kept for inspection ({name} in the embedded server, stopped now): "
            f"python3 -m timekeeper psql --database {name}")


def _utc(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if value else ""


def _local(value: datetime, timezone: str) -> str:
    return value.astimezone(ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M %Z")
