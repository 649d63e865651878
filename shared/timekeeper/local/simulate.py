"""``python -m timekeeper simulate``: the whole system on a simulated clock (DESIGN section 7).

Starts the database (embedded PostgreSQL, or ``DATABASE_URL``), applies the migrations,
starts moto with the topology's queues, loads the sample tenant set and then, minute by
simulated minute, invokes the REAL dispatcher handler with an EventBridge scheduled event
and lets an SQS event source mapping feed the REAL consumer handler. Nothing here is a
second implementation: the handlers, the queues' redrive and the database are the ones
the tests and AWS use. Ends with a summary read from the database and the queues.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from timekeeper.local import embedded

SIM_DATABASE = "timekeeper_sim"


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
    data, dispatcher ``outages`` and ``poison`` malformed messages sent at the start."""

    start: date = date(2027, 3, 1)
    days: int = 41
    seed: int = 7
    outages: tuple[Outage, ...] = (Outage(datetime(2027, 3, 20, 10, 0, tzinfo=UTC), timedelta(hours=3)),)
    poison: int = 1
    show_progress: bool = True
    database: str = SIM_DATABASE


@dataclass
class SimulationResult:
    """What the summary shows, as data (the e2e tests assert on it)."""

    database_url: str
    wall_seconds: float = 0.0
    minutes: int = 0
    dispatcher_invocations: int = 0
    silent_minutes: int = 0
    consumer_invocations: int = 0
    runs_by_kind: list[dict[str, Any]] = field(default_factory=list)
    backlog: list[dict[str, Any]] = field(default_factory=list)
    dst_shifted: list[dict[str, Any]] = field(default_factory=list)
    paused: list[dict[str, Any]] = field(default_factory=list)
    dlq_messages: dict[str, int] = field(default_factory=dict)
    notifications_sent: int = 0
    posting_jobs: dict[str, int] = field(default_factory=dict)
    unfinished_runs: int = 0


def _quiet_lambda_environment() -> None:
    # Powertools reads these when its singletons are built: set them before any import.
    # Metrics stay enabled (disabling them keeps the metric set growing); their EMF lines
    # go to a null sink during each invocation instead.
    os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "timekeeper")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Timekeeper")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")


def prepare_database(name: str = SIM_DATABASE) -> str:
    """Create a fresh simulation database ``name`` and migrate it; return its URL."""
    from timekeeper.db.connection import connect
    from timekeeper.db.migrate import apply_migrations

    url = embedded.create_database(embedded.server_url(), name)
    with connect(url) as conn:
        apply_migrations(conn)
    return url


def run_simulation(options: SimulationOptions, console: Any = None) -> SimulationResult:
    """Run the simulation described by ``options``; print progress to ``console`` (rich)."""
    _quiet_lambda_environment()
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from timekeeper import clock, runtime
    from timekeeper.db.connection import connect
    from timekeeper.local.aws import start_local_aws
    from timekeeper.local.event_source import SqsEventSource
    from timekeeper.local.lambdas import invoke
    from timekeeper.local.sample import load_sample
    from timekeeper.topology import PIPELINES

    wall_start = time.monotonic()
    saved_environment = dict(os.environ)
    runtime.reset()
    url = prepare_database(options.database)
    os.environ["DATABASE_URL"] = url
    result = SimulationResult(database_url=url)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    local = start_local_aws()
    sink = _NullWriter()

    def quiet_invoke(function: str, event: dict[str, Any], **kwargs: Any) -> Any:
        with contextlib.redirect_stdout(sink):
            return invoke(function, event, **kwargs)

    start = datetime.combine(options.start, datetime.min.time(), tzinfo=UTC)
    sim = {"now": start}
    clock.install(lambda: sim["now"])
    try:
        with connect(url) as conn:
            load_sample(conn, start=start, seed=options.seed)
        sqs = local.client("sqs")
        sources = {
            name: SqsEventSource(
                sqs=sqs, queue_url=pair.url, queue_arn=pair.arn,
                function=lambda event, fn=pair.pipeline.consumer_function: quiet_invoke(fn, event),
                batch_size=pair.pipeline.batch_size, max_concurrency=pair.pipeline.max_concurrency,
                visibility_timeout=timedelta(seconds=pair.pipeline.visibility_timeout_s))
            for name, pair in local.queues.items()}
        for pair in local.queues.values():
            for i in range(options.poison):
                sqs.send_message(QueueUrl=pair.url, MessageBody=json.dumps({"run": f"not-a-run-{i}"}))
        total_minutes = options.days * 24 * 60
        progress = Progress(TextColumn("[bold]simulating[/] {task.description}"), BarColumn(),
                            TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                            console=console, disable=not options.show_progress, transient=True)
        with progress:
            task = progress.add_task(start.date().isoformat(), total=total_minutes)
            for minute in range(total_minutes):
                now = start + timedelta(minutes=minute)
                sim["now"] = now
                for name, pipeline in PIPELINES.items():
                    published = 0
                    if any(o.covers(now) for o in options.outages):
                        result.silent_minutes += 1
                    else:
                        report = quiet_invoke(pipeline.dispatcher_function, _scheduled_event(now),
                                        timeout_s=pipeline.dispatcher_timeout_s)
                        result.dispatcher_invocations += 1
                        published = report["published"] + report["reoffered"]
                    source = sources[name]
                    visible_at = source.next_visible_at()
                    if published or minute == 0 or (visible_at is not None and visible_at <= now):
                        source.poll(now)
                if minute % 60 == 0:
                    progress.update(task, completed=minute, description=now.strftime("%Y-%m-%d %H:%M"))
            result.minutes = total_minutes
        result.consumer_invocations = sum(s.stats.invocations for s in sources.values())
        for name, pair in local.queues.items():
            attributes = sqs.get_queue_attributes(QueueUrl=pair.dlq_url, AttributeNames=[
                "ApproximateNumberOfMessages"])["Attributes"]
            result.dlq_messages[name] = int(attributes["ApproximateNumberOfMessages"])
        with connect(url) as conn:
            _summarize(conn, result)
    finally:
        clock.install(None)
        local.stop()
        runtime.reset()
        os.environ.clear()
        os.environ.update(saved_environment)
    result.wall_seconds = time.monotonic() - wall_start
    return result


class _NullWriter(io.TextIOBase):
    """Discards the EMF metric lines Powertools prints (CloudWatch would ingest them)."""

    def write(self, text: str) -> int:
        return len(text)


def _scheduled_event(now: datetime) -> dict[str, Any]:
    return {"version": "0", "id": f"sim-{int(now.timestamp())}", "detail-type": "Scheduled Event",
            "source": "aws.events", "account": "000000000000", "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1", "resources": ["arn:aws:events:us-east-1:000000000000:rule/timekeeper-minute"],
            "detail": {}}


def _summarize(conn, result: SimulationResult) -> None:
    result.runs_by_kind = conn.execute(
        """SELECT work_kind, trigger, state, outcome_code, count(*) AS runs
             FROM schedule_runs GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4""").fetchall()
    result.backlog = conn.execute(
        """SELECT s.name, r.occurrence_at, r.skipped_backlog, r.first_skipped_at
             FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
            WHERE r.skipped_backlog > 0 ORDER BY r.occurrence_at, s.name""").fetchall()
    result.dst_shifted = conn.execute(
        """SELECT s.name, s.timezone, r.occurrence_local, r.occurrence_at, r.state
             FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
            WHERE r.dst_shifted ORDER BY r.occurrence_at""").fetchall()
    result.paused = conn.execute(
        """SELECT s.name, s.status, s.pause_reason, s.consecutive_failures, e.at AS paused_at
             FROM schedules s
             LEFT JOIN LATERAL (SELECT at FROM schedule_events e
                                 WHERE e.schedule_id = s.id AND e.kind = 'paused' ORDER BY id DESC LIMIT 1) e ON true
            WHERE s.status <> 'active' ORDER BY s.name""").fetchall()
    result.notifications_sent = conn.execute(
        "SELECT count(*) AS n FROM schedule_notifications WHERE sent_at IS NOT NULL").fetchone()["n"]
    result.posting_jobs = {r["status"]: r["n"] for r in conn.execute(
        "SELECT status, count(*) AS n FROM posting_jobs GROUP BY status").fetchall()}
    result.unfinished_runs = conn.execute(
        "SELECT count(*) AS n FROM schedule_runs WHERE state IN ('queued', 'running')").fetchone()["n"]


def print_summary(result: SimulationResult, console: Any) -> None:
    """Render ``result`` as rich tables."""
    from rich.table import Table

    console.print(f"[bold]Simulated {result.minutes // 1440} days[/] ({result.minutes:,} minutes) in "
                  f"{result.wall_seconds:.1f}s wall time: {result.dispatcher_invocations:,} dispatcher invocations "
                  f"({result.silent_minutes} silent minutes), {result.consumer_invocations:,} consumer invocations.")
    table = Table(title="Runs by work kind and outcome")
    for col in ("work kind", "trigger", "state", "outcome", "runs"):
        table.add_column(col, justify="right" if col == "runs" else "left")
    for r in result.runs_by_kind:
        table.add_row(r["work_kind"], r["trigger"], r["state"], r["outcome_code"] or "", str(r["runs"]))
    console.print(table)

    table = Table(title="Skipped backlog (misfires collapsed to the latest occurrence)")
    for col in ("schedule", "ran for (UTC)", "skipped", "first skipped (UTC)"):
        table.add_column(col)
    for r in result.backlog:
        table.add_row(r["name"], _utc(r["occurrence_at"]), str(r["skipped_backlog"]), _utc(r["first_skipped_at"]))
    console.print(table)

    table = Table(title="Occurrences shifted by a DST gap")
    for col in ("schedule", "timezone", "intended local", "ran at (UTC)", "ran at (local)", "state"):
        table.add_column(col)
    from zoneinfo import ZoneInfo

    for r in result.dst_shifted:
        local = r["occurrence_at"].astimezone(ZoneInfo(r["timezone"]))
        table.add_row(r["name"], r["timezone"], r["occurrence_local"].strftime("%Y-%m-%d %H:%M"),
                      _utc(r["occurrence_at"]), local.strftime("%Y-%m-%d %H:%M %Z"), r["state"])
    console.print(table)

    table = Table(title="Paused schedules")
    for col in ("schedule", "status", "reason", "consecutive failures", "paused at (UTC)"):
        table.add_column(col)
    for r in result.paused:
        table.add_row(r["name"], r["status"], r["pause_reason"] or "", str(r["consecutive_failures"]),
                      _utc(r["paused_at"]))
    console.print(table)
    console.print(f"Pause notifications sent: {result.notifications_sent}; posting jobs: "
                  + (", ".join(f"{k} {v}" for k, v in sorted(result.posting_jobs.items())) or "none")
                  + f"; runs still unfinished: {result.unfinished_runs}")
    console.print("Messages in dead-letter queues: "
                  + ", ".join(f"{name} {count}" for name, count in result.dlq_messages.items()))
    console.print(f"Database kept for inspection: {result.database_url}")


def _utc(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if value else ""
