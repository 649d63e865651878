"""Noisy neighbour: how long quiet workspaces' runs wait beside a workspace that floods the
claim and holds the queries consumers with slow report renders, on the local stack with
the real dispatcher handlers, SQS (moto), the local SQS event sources, the real consumer
handlers and the real report renderer.

    TIMEKEEPER_HOME=/tmp/tkhome python benchmarks/noisy_neighbour.py
    python benchmarks/noisy_neighbour.py --flood 1000 --quiet 50 --renders 10 --render-seconds 20

Two phases, each on a fresh database (``bench_noisy``, dropped and re-created) of the local
server. Every schedule is due at one whole minute (the phase's start, rounded down).

- **alone**: ``--quiet`` quiet workspaces, each with one accounting schedule
  (``reconciliation.sweep``, no subject: a real handler that finds nothing to reconcile)
  and one CSV delivery of a saved query of its invoices (``queries.deliver``) to its owner;
- **beside the flood**: the same, and a flood workspace (created first, so the claim index
  meets its schedules first) with ``--flood`` accounting schedules and ``--renders`` report
  deliveries whose render takes ``--render-seconds``.

A render's duration is the benchmark's: the local stack's renderer client (the real
renderer handler on a background thread, as Lambda's asynchronous invoke) is wrapped by one
that starts the real render ``--render-seconds`` after it is asked for (installed through
``timekeeper.edge.adapters.install_renderer_client``, the hook the local stack itself uses);
the delivery run polls the render as it does in production (every 5 s), holding its
consumer meanwhile. Nothing in the product waits on purpose.

Each phase: each dispatcher partition of each pipeline runs in a child process of its own,
all at once (their own execution environments, as each partition is a function of its own
in Lambda, on its own rule firing on the same tick; the local AWS is a moto server every
process reaches), with the scheduled event of the due minute's wall-clock instant, another
pass at once while schedules are left due (a pass's budget ran out; a second later when the
pass claimed nothing: the other partition's share is still due). Meanwhile each event
source mapping is polled on a thread of its own, as Lambda polls each mapping apart (one
mapping's long receive does not hold another's), until the dispatchers are done and every
quiet run has started (the flood's report deliveries not yet started then are not waited
for; those running are, when the stack stops). The event sources invoke their consumers as
Lambda does (the local stack's concurrent consumers): each mapping up to its
``max_concurrency`` invocations at once, each on a thread with its own database connection,
so a report delivery waiting for its render holds one of the queries pipeline's consumers,
not every consumer. A run's start delay is its ``started_at`` (the consumer's wall clock)
minus the instant the dispatchers were invoked, in seconds.

What the local stack does not model (so this measures the product's ordering, not a
deployment's latencies): moto's SQS (5.2) computes every attribute of the queue, three
scans of all its messages reading the clock for each, for every message sent
(``SendMessage``'s deduplication check) and every message received (the retention check),
so a queue of N messages costs O(N) per message and O(N^2) to fill and drain: profiled at
``--flood 3000``, moto's clock reads were over 85 % of this process's interpreter time and
the consumers about 2 %. The issue's 10,000 flood schedules cost about eleven times what
3,000 cost there, so scale ``--flood`` down and say so. The consumers' threads share this
process's interpreter with the moto server (one core at a time).

Last line: ``quiet workspaces' p99 start delay: A s alone, B s beside the flood, ratio R``;
with ``--floor`` F (seconds), R is B / max(A, F) (a denominator below the floor is noise:
see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

from benchmarks._bench import git_revision, load_average  # noqa: E402
from timekeeper.db.connection import connect  # noqa: E402
from timekeeper.local.stack import start_local_stack  # noqa: E402
from timekeeper.topology import ACCOUNTING, QUERIES  # noqa: E402

DATABASE = "bench_noisy"
#: Whether the product's local stack can invoke its consumers concurrently.
CONCURRENT = "concurrent_consumers" in inspect.signature(start_local_stack).parameters
KIND = "reconciliation.sweep"
#: How often the harness reads whether every quiet run has started (seconds): the start
#: delays are the runs' own ``started_at``, so this only bounds how soon a phase ends.
CHECK_EVERY_S = 0.5
OWNER = "owner"


def add_accounting(conn, workspaces: list[UUID], schedules_each: int, due: datetime) -> None:
    """``schedules_each`` active accounting schedules in each of ``workspaces``, due at
    ``due`` (a whole minute) and daily at that time, in one statement."""
    conn.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT gen_random_uuid(), w, 'accounting', %(kind)s, %(rule)s::jsonb, 'UTC', 'active', %(due)s,
               %(due)s, %(due)s
          FROM unnest(%(ids)s::uuid[]) AS w, generate_series(1, %(each)s)""",
                 {"ids": workspaces, "kind": KIND, "due": due, "each": schedules_each,
                  "rule": json.dumps({"cron": f"{due.minute} {due.hour} * * *", "timezone": "UTC"})})


def add_workspace(conn, *, csv_deliveries: int, report_deliveries: int, due: datetime) -> UUID:
    """A workspace with its owner (a member who writes queries, with an address), a saved
    query of 10 open invoices, and ``csv_deliveries`` CSV deliveries of it and
    ``report_deliveries`` deliveries of a one-section report over it, each to the owner,
    daily at ``due``'s time and due at ``due``; returns the workspace id."""
    from timekeeper.platform import directory
    from timekeeper.reporting import reports, store
    from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule

    ws = uuid4()
    rule = {"cron": f"{due.minute} {due.hour} * * *", "timezone": "UTC"}
    with conn.transaction():
        directory.create_workspace(conn, workspace_id=ws, name="bench", timezone="UTC", now=due)
        directory.upsert_user(conn, user_id=OWNER, display_name="Owner", email="owner@bench.test", now=due)
        directory.add_member(conn, workspace_id=ws, user_id=OWNER, roles=["queries:admin"], now=due)
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', 'Member', %s) RETURNING id", (ws, date(2026, 1, 1))).fetchone()["id"]
        for i in range(10):
            conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor,"
                         " currency, status) VALUES (%s, %s, %s, %s, %s, 100, 'EUR', 'open')",
                         (ws, member, f"INV-{i}", date(2026, 11, 1), date(2026, 12, 1)))
        query, _ = store.create_query(conn, workspace_id=ws, name="Invoices", actor=OWNER, now=due,
                                      definition={"entity": "invoices", "columns": ["number", "amount_minor"]})
        sources = [Source(kind="query", query_id=query.id)] * csv_deliveries
        if report_deliveries:
            report, _ = reports.create_report(conn, workspace_id=ws, name="Pack", actor=OWNER, now=due,
                                              definition={"title": "Pack", "sections": [
                                                  {"heading": "Invoices", "query_id": str(query.id)}]})
            sources += [Source(kind="report", report_id=report.id)] * report_deliveries
        for n, source in enumerate(sources):
            create_query_schedule(conn, workspace_id=ws, actor=OWNER, now=due, new=NewQuerySchedule(
                name=f"Delivery {n}", recurrence=rule, source=source, format="csv" if source.kind == "query" else "pdf",
                recipients=[OWNER], subject_template="{{ schedule_name }}",
                body_template="<p><a href='{{ link }}'>file</a></p>"))
        conn.execute("UPDATE schedules SET next_due_at = %s WHERE workspace_id = %s", (due, ws))
    return ws


class DelayedRenderer:
    """A renderer client that asks ``inner`` for the render ``seconds`` after it is asked
    (the benchmark's slow render; the render itself is the real handler's)."""

    def __init__(self, inner: Any, seconds: float) -> None:
        self._inner, self._seconds = inner, seconds

    def request(self, *, workspace_id: UUID, render_id: UUID) -> None:
        """Start the real render ``seconds`` from now, on a timer thread."""
        timer = threading.Timer(self._seconds, self._inner.request,
                                kwargs={"workspace_id": workspace_id, "render_id": render_id})
        timer.daemon = True
        timer.start()


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank) of ``values`` (seconds)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def quiet_starts(conn, quiet: list[UUID], tick: datetime) -> list[tuple[str, float | None, float | None]]:
    """Each quiet workspace's runs of the due minute, read on ``conn``: (owner, start delay,
    publish delay), the delays in seconds after ``tick`` or None (the publish delay: the
    ``published_at`` the dispatcher pass that published the run recorded, its start)."""
    return [(r["owner"], r["delay"], r["published"]) for r in conn.execute(
        "SELECT owner, extract(epoch FROM started_at - %(tick)s)::float8 AS delay,"
        " extract(epoch FROM published_at - %(tick)s)::float8 AS published FROM schedule_runs"
        " WHERE workspace_id = ANY(%(quiet)s)", {"tick": tick, "quiet": quiet}).fetchall()]


DISPATCH = """
import sys, time
from datetime import UTC, datetime
sys.path[:0] = {path!r}
from timekeeper.db.connection import connect
from timekeeper.local.stack import invoke_quietly, quiet_lambda_environment, scheduled_event
from timekeeper.topology import PIPELINES
quiet_lambda_environment()
due, tick = datetime.fromisoformat({due!r}), datetime.fromisoformat({tick!r})
pipeline, index = PIPELINES[{pipeline!r}], {partition!r}
at = tick
while True:
    summary = invoke_quietly(pipeline.dispatcher_function, scheduled_event(at, dict(
        partition=index, partitions=pipeline.dispatch_partitions)), timeout_s=pipeline.dispatcher_timeout_s)
    with connect({url!r}) as conn:
        if not conn.execute("SELECT EXISTS (SELECT 1 FROM schedules WHERE owner = %s AND status = 'active'"
                            " AND next_due_at <= %s) AS due", (pipeline.owner, due)).fetchone()["due"]:
            break
    if not (summary or dict()).get("claimed"):
        time.sleep(1)  # the other partition's share is still due: this one's next pass on the next second
    at = datetime.now(UTC)
"""


def dispatch_apart(url: str, due: datetime, tick: datetime) -> list[subprocess.Popen]:
    """Start the dispatcher passes for the due minute ``due`` invoked at ``tick``, each
    dispatcher partition of each pipeline in a child process of its own (this process's
    environment: the database, the moto server, the queue URLs), as each partition is a
    function of its own with its own rule firing on the same tick; returns the running
    processes."""
    processes = []
    for pipeline in (ACCOUNTING, QUERIES):
        for partition in pipeline.partitions:
            code = DISPATCH.format(path=[str(ROOT / "shared"), str(ROOT)], due=due.isoformat(),
                                   tick=tick.isoformat(), url=url, pipeline=pipeline.name, partition=partition)
            processes.append(subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ)))
    return processes


def poll_apart(sources: list[Any], stop: threading.Event) -> list[threading.Thread]:
    """Poll each of ``sources`` (event source mappings) on a thread of its own until ``stop``
    is set, as Lambda polls each mapping apart: one mapping's long receive (moto's, with a
    deep queue) does not hold another's. A poll that delivered nothing waits 0.2 s."""
    def pump(source: Any) -> None:
        while not stop.is_set():
            if not source.poll(datetime.now(UTC)):
                stop.wait(0.2)  # the dispatchers publish, the consumers run; a released run comes back later

    threads = [threading.Thread(target=pump, args=(source,), name=f"poller-{source.name}", daemon=True)
               for source in sources]
    for thread in threads:
        thread.start()
    return threads


def start_stack() -> Any:
    """The local stack on a fresh ``bench_noisy`` with a moto server, its consumers invoked
    concurrently (each mapping up to its maximum concurrency) when the product's local stack
    can (``concurrent_consumers``; one after the other in one thread before it could)."""
    if CONCURRENT:
        return start_local_stack(database=DATABASE, reset=True, aws_server=True, concurrent_consumers=True)
    return start_local_stack(database=DATABASE, reset=True, aws_server=True)


def phase(*, quiet: int, flood: int, renders: int, render_seconds: float) -> tuple[float, dict]:
    """One phase on a fresh database; returns the quiet workspaces' p99 start delay (s) and
    what the phase saw."""
    from timekeeper.edge import adapters

    stack = start_stack()
    try:
        adapters.install_renderer_client(DelayedRenderer(stack.renderer, render_seconds))
        due = datetime.now(UTC).replace(second=0, microsecond=0)
        with connect(stack.database_url) as conn:
            if flood or renders:
                flooder = add_workspace(conn, csv_deliveries=0, report_deliveries=renders, due=due)
                add_accounting(conn, [flooder], flood, due)
            quiet_ids = [add_workspace(conn, csv_deliveries=1, report_deliveries=0, due=due) for _ in range(quiet)]
            add_accounting(conn, quiet_ids, 1, due)
            conn.execute("ANALYZE schedules")
        started, tick = time.monotonic(), datetime.now(UTC)
        dispatchers = dispatch_apart(stack.database_url, due, tick)
        dispatched = None
        expected = 2 * quiet
        stop = threading.Event()
        pollers = poll_apart([stack.sources[p.name] for p in (ACCOUNTING, QUERIES)], stop)
        try:
            with connect(stack.database_url) as watch:  # one connection reads the quiet runs' starts
                while True:
                    if dispatched is None and all(d.poll() is not None for d in dispatchers):
                        dispatched = time.monotonic() - started
                    starts = quiet_starts(watch, quiet_ids, tick)  # the start delays are the runs' own started_at
                    if dispatched is not None and sum(1 for _, d, _ in starts if d is not None) >= expected:
                        break
                    time.sleep(CHECK_EVERY_S)
        finally:
            stop.set()
            for poller in pollers:
                poller.join()
        if any(d.returncode for d in dispatchers):
            raise SystemExit(f"a dispatchers' process failed ({[d.returncode for d in dispatchers]})")
        drained = time.monotonic() - started
        delays = [d for _, d, _ in starts if d is not None]
        by_owner = {owner: round(p99([d for o, d, _ in starts if o == owner and d is not None]), 2)
                    for owner in ("accounting", "queries")}
        published = {owner: round(p99([p for o, _, p in starts if o == owner and p is not None] or [0.0]), 2)
                     for owner in ("accounting", "queries")}
        return p99(delays), {"quiet_runs": len(delays), "dispatch_s": round(dispatched, 2),
                             "until_last_quiet_start_s": round(drained, 2), "quiet_max_s": round(max(delays), 2),
                             "quiet_p99_by_pipeline_s": by_owner, "quiet_p99_published_by_pipeline_s": published,
                             "consumers": stack.consumer_stats()}
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=10_000, help="the flood workspace's due accounting schedules")
    parser.add_argument("--renders", type=int, default=30, help="the flood workspace's due report deliveries")
    parser.add_argument("--render-seconds", type=float, default=60.0, help="how long each of its renders takes")
    parser.add_argument("--quiet", type=int, default=100,
                        help="quiet workspaces, each with one accounting run and one CSV delivery")
    parser.add_argument("--floor", type=float, default=0.0,
                        help="the ratio's smallest denominator (seconds): R = beside / max(alone, floor)")
    args = parser.parse_args()
    print(f"revision {git_revision()}; load average {load_average():.1f}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
          f"flood {args.flood:,} + {args.renders} renders of {args.render_seconds:g} s, quiet {args.quiet}; "
          f"queries consumers {QUERIES.consumer.max_concurrency}, cap {QUERIES.max_in_flight_per_workspace}; "
          f"consumers {'concurrent' if CONCURRENT else 'one at a time'}",
          flush=True)
    alone, seen_alone = phase(quiet=args.quiet, flood=0, renders=0, render_seconds=args.render_seconds)
    print(f"alone: {seen_alone}", flush=True)
    beside, seen_beside = phase(quiet=args.quiet, flood=args.flood, renders=args.renders,
                                render_seconds=args.render_seconds)
    print(f"beside the flood: {seen_beside}", flush=True)
    denominator = max(alone, args.floor)
    ratio = beside / denominator if denominator > 0 else float("inf")
    print(f"quiet workspaces' p99 start delay: {alone:.2f} s alone, {beside:.2f} s beside the flood, "
          f"ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
