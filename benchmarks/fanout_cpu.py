"""CPU per run of the peer harness's W1 "due fan-out", each side measured alone.

The harness (``../shared/bench``) times W1 with the dispatcher and two consumer processes
running at once on this 2-core machine, so its rate follows the total CPU a run costs and
whatever else the machine is doing. This script loads the same N schedules through the
same adapter (``benchmarks/peer_adapter.py``: the product's real ``dispatch`` and
``process_batch``), then runs the dispatcher passes alone and afterwards the consumers
alone, and reports for each side the client CPU (the Python process) and the server CPU
(its PostgreSQL backend) in microseconds per run. CPU per run moves far less with the
machine's other load than a rate does, so comparing two revisions back to back with it
shows changes of a few percent that a W1 rate cannot.

Run it with the harness's virtualenv (it has the product's pinned dependencies in
``timekeeper-site``), from the repository root::

    PYTHONPATH=../shared/bench/peers:benchmarks:shared \\
        ~/.cache/tk-bench-venv/bin/python benchmarks/fanout_cpu.py --n 100000 --repeats 2

It creates (drops first) the database ``fanout_cpu`` on the embedded server in
``.timekeeper/fanout-cpu-pg`` (``timekeeper.local.embedded``, as the other benchmarks;
``DATABASE_URL`` wins when set). Each repetition checks
what the harness checks: every schedule ran once, advanced, and records its outcome.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import peer_adapter  # noqa: F401 - the product's connection opener for the harness adapter
import psycopg
import timekeeper_adapter as adapter

from timekeeper import clock
from timekeeper.local import embedded
from timekeeper.observability import MetricsRecorder
from timekeeper.schedules.dispatcher import DispatchSettings, dispatch


def measure(server: str, n: int, workers: int) -> dict[str, float]:
    """One repetition: load n due schedules, dispatch them all, then consume them all.
    Returns the rates (runs/s) and CPU per run (us) of each side; raises AssertionError when
    the harness's checks fail."""
    uri = embedded.create_database(server, "fanout_cpu")
    due = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=5)
    adapter.load_schedules(uri, n, due)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    batches: list = []
    publisher = adapter._QueuePublisher(batches.append)
    pipeline = adapter.PIPELINE
    with adapter._connect(uri, "dispatcher") as conn:
        pid = conn.info.backend_pid
        server0, client0, started = adapter._backend_cpu_s(pid), time.process_time(), time.monotonic()
        settings = dataclasses.replace(DispatchSettings.of(pipeline), time_budget_s=600)
        while dispatch(conn, settings, now=clock.now(), publisher=publisher,
                       registry=adapter._registry(), metrics=MetricsRecorder()).claimed:
            pass
        dispatch_s = time.monotonic() - started
        dispatch_client, dispatch_server = time.process_time() - client0, adapter._backend_cpu_s(pid) - server0
    consumers = adapter._Consumers(uri, workers)
    started = time.monotonic()
    for batch in batches:
        consumers.put(batch)
    finished = consumers.wait(publisher.count, time.monotonic() + 600)
    consume_s = time.monotonic() - started
    out = consumers.close(finished)
    checks = adapter.verify_schedules(uri, n, due)
    assert finished and checks["settled"] == checks["distinct"] == checks["next_in_1h"] == n, checks
    assert checks["duplicates"] == checks["restarted"] == 0 and checks["outcome_recorded"] == n, checks
    per_run = 1e6 / n
    return {"dispatch_per_s": n / dispatch_s, "consume_per_s": n / consume_s,
            "dispatch_client_us": dispatch_client * per_run, "dispatch_server_us": dispatch_server * per_run,
            "consume_client_us": sum(out["client_cpu_s"]) * per_run,
            "consume_server_us": sum(out["server_cpu_s"]) * per_run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="due schedules (default 100000)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="consumer processes (default 2)")
    args = parser.parse_args()
    server = embedded.server_url(Path(".timekeeper/fanout-cpu-pg"))
    rows = [measure(server, args.n, args.workers) for _ in range(args.repeats)]
    for index, row in enumerate(rows, 1):
        total = sum(v for k, v in row.items() if k.endswith("_us"))
        print(f"run {index}: dispatch {row['dispatch_per_s']:,.0f}/s (client {row['dispatch_client_us']:.0f} us, "
              f"server {row['dispatch_server_us']:.0f} us per run); consume {row['consume_per_s']:,.0f}/s "
              f"(client {row['consume_client_us']:.0f} us, server {row['consume_server_us']:.0f} us); "
              f"total {total:.0f} us of CPU per run; load {os.getloadavg()[0]:.1f}")
    if len(rows) > 1:
        totals = [sum(v for k, v in row.items() if k.endswith("_us")) for row in rows]
        print(f"median total: {statistics.median(totals):.0f} us of CPU per run")


if __name__ == "__main__":
    main()
