"""Noisy neighbour: how long quiet workspaces' runs wait beside a workspace that floods the
claim, on the local stack with the real dispatcher handler, SQS (moto), the local SQS event
source and the real consumer handler.

    TIMEKEEPER_HOME=/tmp/tkhome python benchmarks/noisy_neighbour.py
    python benchmarks/noisy_neighbour.py --flood 10000 --quiet 100

Two phases, each on a fresh database (``bench_noisy``, dropped and re-created) of the local
server: ``--quiet`` quiet workspaces with one accounting run each (``reconciliation.sweep``,
no subject: a real handler that finds nothing to reconcile; daily), all due at one minute; then the
same beside a flood workspace with ``--flood`` accounting schedules due at the same instant,
the flood created first (the claim index then meets its schedules first, as a workspace that
created 10,000 schedules at local midnight is met first). Each phase: the accounting
pipeline's dispatcher partitions are invoked once with the scheduled event of the wall-clock
instant (one pass claims batch after batch while they come back full and its 30 s budget
lasts), then the event source polls until the queue is empty; while schedules are left due
(the pass's budget ran out), another pass follows at once and the queue is drained again
(back to back: a deployed stack waits for the next minute's rule, so a phase that needs
several passes understates the delay of what the first pass left). A run's start delay is
its ``started_at`` (the consumer's wall clock) minus the instant the dispatcher was invoked
for its due minute (the scheduled event's time: the due instant as the deployed minute rule
sees it, without the seconds the set-up took inside the minute), in seconds.

What it covers: the claim's part of fairness (which runs the dispatcher publishes first) and
the event source's delivery order. Not covered: the flood's report deliveries and renders and
the quiet workspaces' CSV deliveries (the queries pipeline), and the per-workspace in-flight
cap of heavy kinds.

Last line: ``quiet workspaces' p99 start delay: A s alone, B s beside the flood, ratio R``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID, uuid4

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

from benchmarks._bench import git_revision, load_average  # noqa: E402
from timekeeper.db.connection import connect  # noqa: E402
from timekeeper.local.stack import start_local_stack  # noqa: E402
from timekeeper.topology import ACCOUNTING  # noqa: E402

DATABASE = "bench_noisy"
KIND = "reconciliation.sweep"


def add_workspaces(conn, count: int, schedules_each: int, due: datetime) -> list[UUID]:
    """``count`` workspaces, each with ``schedules_each`` active accounting schedules due at
    ``due`` (a whole minute) and daily at that time, in one statement each; returns the
    workspace ids."""
    ids = [uuid4() for _ in range(count)]
    conn.execute("INSERT INTO workspaces (id, name, timezone) SELECT unnest(%s::uuid[]), 'bench', 'UTC'", (ids,))
    conn.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT gen_random_uuid(), w, 'accounting', %(kind)s, %(rule)s::jsonb, 'UTC', 'active', %(due)s,
               %(due)s, %(due)s
          FROM unnest(%(ids)s::uuid[]) AS w, generate_series(1, %(each)s)""",
                 {"ids": ids, "kind": KIND, "due": due, "each": schedules_each,
                  "rule": json.dumps({"cron": f"{due.minute} {due.hour} * * *", "timezone": "UTC"})})
    return ids


def due_left(url: str, due: datetime) -> bool:
    """Whether an accounting schedule is still due at ``due`` (not claimed yet)."""
    with connect(url) as conn:
        return conn.execute("SELECT EXISTS (SELECT 1 FROM schedules WHERE owner = 'accounting'"
                            " AND status = 'active' AND next_due_at <= %s) AS due", (due,)).fetchone()["due"]


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank) of ``values`` (seconds)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def phase(*, quiet: int, flood: int) -> tuple[float, dict]:
    """One phase on a fresh database; returns the quiet workspaces' p99 start delay (s) and
    what the phase saw (runs, dispatch and drain wall times)."""
    stack = start_local_stack(database=DATABASE, reset=True, aws_server=False)
    try:
        due = datetime.now(UTC).replace(second=0, microsecond=0)
        with connect(stack.database_url) as conn:
            if flood:
                add_workspaces(conn, 1, flood, due)
            quiet_ids = add_workspaces(conn, quiet, 1, due)
            conn.execute("ANALYZE schedules")
        started, tick = time.monotonic(), datetime.now(UTC)
        report = stack.dispatch(ACCOUNTING, tick)
        dispatched, passes = time.monotonic() - started, 1
        while True:
            while stack.poll(datetime.now(UTC)):
                pass
            if not due_left(stack.database_url, due):
                break
            # The pass ran out of its time budget: the next pass (back to back here; a deployed
            # stack's rule waits for the next minute) takes the rest.
            more = stack.dispatch(ACCOUNTING, datetime.now(UTC))
            report["claimed"] += more.get("claimed", 0)
            passes += 1
        drained = time.monotonic() - started
        with connect(stack.database_url) as conn:
            rows = conn.execute(
                "SELECT workspace_id, extract(epoch FROM started_at - %s)::float8 AS delay"
                "  FROM schedule_runs WHERE started_at IS NOT NULL", (tick,)).fetchall()
        wanted = set(quiet_ids)
        delays = [r["delay"] for r in rows if r["workspace_id"] in wanted]
        if len(delays) != quiet:
            raise SystemExit(f"only {len(delays)} of {quiet} quiet runs started (dispatch: {report})")
        return p99(delays), {"runs_started": len(rows), "claimed": report.get("claimed"), "passes": passes,
                             "dispatch_s": round(dispatched, 2), "drain_s": round(drained, 2),
                             "quiet_max_s": round(max(delays), 2)}
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=10_000, help="the flood workspace's due schedules")
    parser.add_argument("--quiet", type=int, default=100, help="quiet workspaces, one due run each")
    args = parser.parse_args()
    print(f"revision {git_revision()}; load average {load_average():.1f}; claim batch {ACCOUNTING.claim_batch}; "
          f"accounting partitions {ACCOUNTING.dispatch_partitions}", flush=True)
    alone, seen_alone = phase(quiet=args.quiet, flood=0)
    print(f"alone: {seen_alone}", flush=True)
    beside, seen_beside = phase(quiet=args.quiet, flood=args.flood)
    print(f"beside {args.flood:,} flood schedules: {seen_beside}", flush=True)
    ratio = beside / alone if alone > 0 else float("inf")
    print(f"quiet workspaces' p99 start delay: {alone:.2f} s alone, {beside:.2f} s beside the flood, "
          f"ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
