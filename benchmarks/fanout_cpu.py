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

Each side's WAL per run (bytes, ``pg_current_wal_lsn()`` before and after) and the updates
and heap-only (HOT) updates per run of ``schedule_runs`` and ``schedules``
(``pg_stat_user_tables``) are printed too. ``--setup-sql FILE`` runs an experiment's SQL
(other indexes, a fillfactor: ``benchmarks/experiments/open_runs``) after the load, before
the timed sides; its ``{fillfactor}`` placeholder becomes ``--fillfactor N`` (default 70).

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
import cProfile
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

# The tables whose updates are counted; open_runs exists only in the open-runs experiments
# (benchmarks/experiments/open_runs).
TABLES = ("schedule_runs", "schedules", "open_runs")


def _server_counters(uri: str) -> dict[str, float]:
    """The server's WAL position (bytes) and, for each table of ``TABLES``, its updates and
    heap-only (HOT) updates so far (``pg_stat_user_tables``, as the ended backends flushed them)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        out = {"wal": float(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])}
        for name, upd, hot in conn.execute(
                "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ANY(%s)",
                [list(TABLES)]):
            out[f"{name}_upd"], out[f"{name}_hot"] = float(upd), float(hot)
        return out


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before.get(key, 0.0) for key in after}


def measure(server: str, n: int, workers: int, setup_sql: str | None = None,
            profile: Path | None = None) -> dict[str, float]:
    """One repetition: load n due schedules, dispatch them all, then consume them all.
    Returns the rates (runs/s), CPU per run (us) and WAL per run (bytes) of each side, and the
    updates and heap-only updates of each table of ``TABLES`` per run; raises AssertionError
    when the harness's checks fail. ``setup_sql`` (an experiment: other indexes, a fillfactor)
    is run after the load, before the timed sides. ``profile`` (a folder; diagnostics only:
    the profiler's own cost inflates the client CPU) writes cProfile statistics of the
    dispatcher's passes (``dispatcher.prof``) and of each consumer process there."""
    uri = embedded.create_database(server, "fanout_cpu")
    due = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=5)
    adapter.load_schedules(uri, n, due)
    with psycopg.connect(uri, autocommit=True) as conn:
        if setup_sql:
            conn.execute(setup_sql)
        conn.execute("CHECKPOINT")
    counters0 = _server_counters(uri)
    batches: list = []
    publisher = adapter._QueuePublisher(batches.append)
    pipeline = adapter.PIPELINE
    with adapter._connect(uri, "dispatcher") as conn:
        pid = conn.info.backend_pid
        server0, client0, started = adapter._backend_cpu_s(pid), time.process_time(), time.monotonic()
        settings = dataclasses.replace(DispatchSettings.of(pipeline), time_budget_s=600)
        profiler = cProfile.Profile() if profile else None
        if profiler:
            profiler.enable()
        while dispatch(conn, settings, now=clock.now(), publisher=publisher,
                       registry=adapter._registry(), metrics=MetricsRecorder()).claimed:
            pass
        if profiler:
            profiler.disable()
            profiler.dump_stats(str(profile / "dispatcher.prof"))
        dispatch_s = time.monotonic() - started
        dispatch_client, dispatch_server = time.process_time() - client0, adapter._backend_cpu_s(pid) - server0
    counters1 = _server_counters(uri)
    if profile:  # read by the harness's consumer processes when they start
        os.environ["TIMEKEEPER_BENCH_PROFILE"] = str(profile)
    consumers = adapter._Consumers(uri, workers)
    started = time.monotonic()
    for batch in batches:
        consumers.put(batch)
    finished = consumers.wait(publisher.count, time.monotonic() + 600)
    consume_s = time.monotonic() - started
    out = consumers.close(finished)
    counters2 = _server_counters(uri)
    dispatched, consumed = _delta(counters1, counters0), _delta(counters2, counters1)
    checks = adapter.verify_schedules(uri, n, due)
    assert finished and checks["settled"] == checks["distinct"] == checks["next_in_1h"] == n, checks
    assert checks["duplicates"] == checks["restarted"] == 0 and checks["outcome_recorded"] == n, checks
    per_run = 1e6 / n
    return {"dispatch_per_s": n / dispatch_s, "consume_per_s": n / consume_s,
            "dispatch_client_us": dispatch_client * per_run, "dispatch_server_us": dispatch_server * per_run,
            "consume_client_us": sum(out["client_cpu_s"]) * per_run,
            "consume_server_us": sum(out["server_cpu_s"]) * per_run,
            "dispatch_wal_b": dispatched["wal"] / n, "consume_wal_b": consumed["wal"] / n,
            **{f"{side}_{key}": value / n for side, delta in (("dispatch", dispatched), ("consume", consumed))
               for key, value in delta.items() if key != "wal"}}


def setup_sql_of(path: Path, fillfactor: int) -> str:
    """The experiment's SQL in ``path`` with its ``{fillfactor}`` placeholder (a percentage,
    10-100) replaced by ``fillfactor``; a file without the placeholder is returned as it is."""
    return path.read_text().replace("{fillfactor}", str(fillfactor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="due schedules (default 100000)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="consumer processes (default 2)")
    parser.add_argument("--setup-sql", type=Path, help="an experiment's SQL, run after the load (indexes, fillfactor)")
    parser.add_argument("--fillfactor", type=int, default=70,
                        help="replaces {fillfactor} in the --setup-sql file (10-100, default 70)")
    parser.add_argument("--profile", type=Path,
                        help="a folder for cProfile statistics of the dispatcher and the consumers (diagnostics)")
    args = parser.parse_args()
    if not 10 <= args.fillfactor <= 100:
        parser.error("--fillfactor must be between 10 and 100")
    server = embedded.server_url(Path(".timekeeper/fanout-cpu-pg"))
    setup_sql = setup_sql_of(args.setup_sql, args.fillfactor) if args.setup_sql else None
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    rows = [measure(server, args.n, args.workers, setup_sql, args.profile) for _ in range(args.repeats)]
    for index, row in enumerate(rows, 1):
        total = sum(v for k, v in row.items() if k.endswith("_us"))
        print(f"run {index}: dispatch {row['dispatch_per_s']:,.0f}/s (client {row['dispatch_client_us']:.0f} us, "
              f"server {row['dispatch_server_us']:.0f} us per run); consume {row['consume_per_s']:,.0f}/s "
              f"(client {row['consume_client_us']:.0f} us, server {row['consume_server_us']:.0f} us); "
              f"total {total:.0f} us of CPU per run; load {os.getloadavg()[0]:.1f}")
        print(f"       WAL per run: dispatch {row['dispatch_wal_b']:,.0f} B, consume {row['consume_wal_b']:,.0f} B; "
              + "; ".join(f"{side} {table} updates {row.get(f'{side}_{table}_upd', 0):.2f} "
                          f"(heap-only {row.get(f'{side}_{table}_hot', 0):.2f}) per run"
                          for side in ("dispatch", "consume") for table in TABLES
                          if f"{side}_{table}_upd" in row))
    if len(rows) > 1:
        totals = [sum(v for k, v in row.items() if k.endswith("_us")) for row in rows]
        print(f"median total: {statistics.median(totals):.0f} us of CPU per run")


if __name__ == "__main__":
    main()
