"""Consumer benchmark: the database work of ``process_batch`` per run against the real database.

Queues R runs with the real dispatcher pass, then feeds every run message to
``timekeeper.schedules.consumer.process_batch`` from an in-memory batch source (batches of
10, as SQS delivers them). Like the Lambda (``timekeeper.edge.runs.consume_runs``), each
record body is parsed with ``RunMessage.model_validate_json`` into a
``Delivery(messageId, message, ApproximateReceiveCount)`` and the whole batch goes to
``process_batch``; Powertools' batch machinery is left out. The registry's work kind does
nothing and returns ``Succeeded``.

``--path batch`` (default, the product path for transactional work kinds): the kind is
registered normally: the batch's runs start in one committed statement, then run in ONE
transaction (a handler that touches the database gets a savepoint with its tenant set;
this one does not), and the batch's successes settle in one statement with the
failure-streak reset; one commit. ``--path leased`` (for comparison): the kind is
registered with ``leased=True``, so each run starts, runs and settles on its own.

Reports runs per second on one connection, and with 2 workers (the pipeline's maximum
concurrency), each with its own connection, as processes and as threads.
``--pin`` is a
diagnostic of this VM (see :func:`pin`).

    cd /work/main && PYTHONPATH=shared python benchmarks/consume.py                  # full (~2 min)
    cd /work/main && PYTHONPATH=shared python benchmarks/consume.py --path leased    # the process_run path (~4 min)
    cd /work/main && PYTHONPATH=shared python benchmarks/consume.py --quick          # CI smoke (< 30 s)
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import multiprocessing
import os
import pstats
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import _bench as b

from timekeeper.observability import MetricsRecorder
from timekeeper.schedules import consumer, settlement
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, ProcessResult, process_batch
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import RunContext, Succeeded, WorkKindRegistry
from timekeeper.topology import ACCOUNTING

#: The consumer's clock: one minute after the dispatcher pass that queued the runs.
CONSUME_NOW = b.NOW + timedelta(minutes=1)
SETTINGS = ConsumerSettings.from_pipeline(ACCOUNTING)
PATHS = ("batch", "leased")


class CollectingSink:
    """A RunPublisher that keeps each message as the SQS body the queue would hold."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    def publish(self, messages: list[RunMessage]) -> set[UUID]:
        self.bodies.extend(m.model_dump_json() for m in messages)
        return set()


class InMemoryBatchSource:
    """SQS stand-in: yields batches of up to ``batch_size`` records shaped like Lambda's
    SQS records (messageId, body, ApproximateReceiveCount = 1)."""

    def __init__(self, bodies: list[str], batch_size: int = 10) -> None:
        self.batches = [[{"messageId": f"m-{n}-{i}", "body": body, "attributes": {"ApproximateReceiveCount": "1"}}
                         for i, body in enumerate(chunk)] for n, chunk in enumerate(b.chunks(bodies, batch_size))]

    def share(self, worker: int, workers: int) -> Iterator[list[dict[str, Any]]]:
        """The batches a worker receives (round robin, like two pollers of one queue)."""
        return iter(self.batches[worker::workers])


def noop(ctx: RunContext) -> Succeeded:
    """Idempotency: does nothing, so running it twice has no effect."""
    return Succeeded()


def registry(path: str = "batch") -> WorkKindRegistry:
    """The benchmark's work kind: transactional (registered normally) for ``batch``,
    ``leased=True`` for ``leased``."""
    kinds = WorkKindRegistry()
    kinds.register(b.OWNER, b.WORK_KIND, noop, leased=path == "leased")
    return kinds


def deliveries(batch: list[dict[str, Any]]) -> list[Delivery]:
    """What ``timekeeper.edge.runs.consume_runs`` builds from the SQS records before ``process_batch``."""
    return [Delivery(record["messageId"], RunMessage.model_validate_json(record["body"]),
                     int(record["attributes"].get("ApproximateReceiveCount") or 1)) for record in batch]


def _check(results: list[Any], batch: list[Delivery]) -> int:
    for delivery, result in zip(batch, results, strict=True):
        if not isinstance(result, ProcessResult) or result.action != "settled":
            raise AssertionError(f"run {delivery.message.run_id}: {result!r}")
    return len(results)


def consume(conn, batches: Iterator[list[dict[str, Any]]], kinds: WorkKindRegistry) -> int:
    """The product path: what the Lambda does per SQS batch, minus Powertools' batch
    machinery (``process_batch``; with a leased kind it calls ``process_run`` per message)."""
    metrics = MetricsRecorder()
    done = 0
    for records in batches:
        batch = deliveries(records)
        done += _check(process_batch(conn, batch, now=CONSUME_NOW, registry=kinds, settings=SETTINGS,
                                     services={}, metrics=metrics), batch)
    return done


CONSUMERS: dict[str, Callable[..., int]] = {"batch": consume, "leased": consume}


def pin(worker: int, backend_pid: int) -> None:
    """``--pin``: put the calling worker thread and its connection's server backend on the
    same CPU (worker ``i`` on CPU ``i % cpus``). Diagnostic, not the product: on this
    Firecracker VM a client-server round trip costs about 107 us when the client and its
    backend wake each other across vCPUs (a halted vCPU is woken by an inter-processor
    interrupt, which exits to the hypervisor) and about 26 us when both share one CPU
    (``SELECT 1`` round trips on an idle machine). Load from other processes changes which
    of the two happens, so unpinned numbers move with the machine's load."""
    cpu = worker % (os.cpu_count() or 1)
    os.sched_setaffinity(0, {cpu})
    os.sched_setaffinity(backend_pid, {cpu})


def requeue(conn) -> None:
    """Put the dispatched runs back to queued and the schedules' outcome fields back, then
    VACUUM ANALYZE and CHECKPOINT (the same clean start for every repeat)."""
    conn.execute("""UPDATE schedule_runs
                       SET state = 'queued', attempts = 0, lease_until = NULL, started_at = NULL,
                           finished_at = NULL, outcome_code = NULL, detail = NULL, error = NULL""")
    conn.execute("""UPDATE schedules SET consecutive_failures = 0, last_run_id = NULL, last_outcome = NULL,
                           last_run_at = NULL WHERE last_run_id IS NOT NULL""")
    conn.execute("TRUNCATE schedule_events, schedule_notifications")
    conn.execute("VACUUM ANALYZE schedule_runs")
    conn.execute("VACUUM ANALYZE schedules")
    conn.execute("CHECKPOINT")


def _worker_body(url: str, batches: list[list[dict[str, Any]]], barrier, kinds: WorkKindRegistry,
                 variant: str, worker: int, pinned: bool) -> dict:
    conn = b.bench_connect(url)
    pid = conn.info.backend_pid
    if pinned:
        pin(worker, pid)
    barrier.wait()
    server_before = b.backend_cpu_s(pid)
    cpu_before = time.thread_time()
    started = time.monotonic()
    done = CONSUMERS[variant](conn, iter(batches), kinds)
    elapsed = time.monotonic() - started
    cpu = time.thread_time() - cpu_before
    server_after = b.backend_cpu_s(pid)
    conn.close()
    if pinned:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    server = None if server_before is None or server_after is None else server_after - server_before
    return {"done": done, "elapsed": elapsed, "client_cpu": cpu, "server_cpu": server}


def _process_entry(url, batches, barrier, results, path, variant, worker, pinned) -> None:
    results.put(_worker_body(url, batches, barrier, registry(path), variant, worker, pinned))


def run_workers(url: str, source: InMemoryBatchSource, workers: int, mode: str, *, path: str, variant: str,
                pinned: bool = False) -> dict:
    """Run ``workers`` consumers (``process`` or ``thread``), each on its own connection;
    the wall time runs from the common start to the last finish."""
    shares = [list(source.share(i, workers)) for i in range(workers)]
    if mode == "process":
        ctx = multiprocessing.get_context("fork")
        barrier, results = ctx.Barrier(workers + 1), ctx.Queue()
        procs = [ctx.Process(target=_process_entry, args=(url, share, barrier, results, path, variant, i, pinned))
                 for i, share in enumerate(shares)]
        for p in procs:
            p.start()
        barrier.wait()
        started = time.monotonic()
        outs = [results.get() for _ in procs]
        wall = time.monotonic() - started
        for p in procs:
            p.join()
    else:
        barrier = threading.Barrier(workers + 1)
        outs = []
        kinds = registry(path)
        threads = [threading.Thread(target=lambda s=share, i=i: outs.append(
            _worker_body(url, s, barrier, kinds, variant, i, pinned))) for i, share in enumerate(shares)]
        for t in threads:
            t.start()
        barrier.wait()
        started = time.monotonic()
        for t in threads:
            t.join()
        wall = time.monotonic() - started
    done = sum(o["done"] for o in outs)
    server = None if any(o["server_cpu"] is None for o in outs) else sum(o["server_cpu"] for o in outs)
    return {"done": done, "wall": wall, "client_cpu": sum(o["client_cpu"] for o in outs), "server_cpu": server}


class _TimedTransaction:
    """Times a ``conn.transaction()`` block's commands: BEGIN / COMMIT at the outer level,
    SAVEPOINT / RELEASE inside it (COMMIT is where the durable fsync happens)."""

    def __init__(self, timed: _TimedConnection, inner) -> None:
        self._timed = timed
        self._inner = inner

    def __enter__(self):
        depth = self._timed.depth
        started = time.perf_counter()
        result = self._inner.__enter__()
        self._timed.add("BEGIN" if depth == 0 else "SAVEPOINT", time.perf_counter() - started)
        self._timed.depth += 1
        return result

    def __exit__(self, *exc):
        self._timed.depth -= 1
        depth = self._timed.depth
        label = ("COMMIT (durable)" if depth == 0 else "RELEASE SAVEPOINT") if exc[0] is None else (
            "ROLLBACK" if depth == 0 else "ROLLBACK TO SAVEPOINT")
        started = time.perf_counter()
        try:
            return self._inner.__exit__(*exc)
        finally:
            self._timed.add(label, time.perf_counter() - started)


class _TimedConnection:
    """Wraps a connection and adds up the wall time of each named statement and of the
    transaction commands."""

    def __init__(self, conn, names: dict[str, str]) -> None:
        self._conn = conn
        self._names = names
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.depth = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds
        self.calls[name] += 1

    def transaction(self, *args, **kwargs) -> _TimedTransaction:
        return _TimedTransaction(self, self._conn.transaction(*args, **kwargs))

    def execute(self, query, params=None, **kwargs):
        text = query if isinstance(query, str) else query.as_string()
        name = self._names.get(text, "other: " + " ".join(text.split())[:40])
        started = time.perf_counter()
        try:
            return self._conn.execute(query, params, **kwargs)
        finally:
            self.add(name, time.perf_counter() - started)


def statement_breakdown(conn, bodies: list[str], kinds: WorkKindRegistry, variant: str) -> str:
    names = {text: f"consumer.{name}" for name, text in consumer.SQL.items()}
    names.update({text: f"settlement.{name}" for name, text in settlement.SQL.items()})
    timed = _TimedConnection(conn, names)
    started = time.perf_counter()
    done = CONSUMERS[variant](timed, InMemoryBatchSource(bodies).share(0, 1), kinds)
    total = time.perf_counter() - started
    rows = [[name, f"{timed.calls[name]:,}", f"{1e6 * s / done:.0f}"] for name, s in timed.seconds.most_common()]
    rest = total - sum(timed.seconds.values())
    rows.append(["Python (parse, registry, handler, results, logging)", "", f"{1e6 * rest / done:.0f}"])
    return (f"per-run wall time by statement over {done:,} runs ({done / total:,.0f} runs/s):\n"
            + b.table(["statement", "calls", "us per run"], rows))


def profile(conn, bodies: list[str], kinds: WorkKindRegistry, variant: str, top: int = 25) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    done = CONSUMERS[variant](conn, InMemoryBatchSource(bodies).share(0, 1), kinds)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return f"cProfile of {done:,} runs on one connection:\n" + out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=PATHS, default="batch",
                        help="batch: process_batch with a transactional kind (the product default); "
                             "leased: the kind registered leased=True, so each message goes to process_run")
    parser.add_argument("--sizes", default="100000", help="N: schedules loaded (comma-separated)")
    parser.add_argument("--runs", type=int, default=20000, help="R: runs queued by the dispatcher and consumed")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--modes", default="process,thread", help="how workers > 1 run: process and/or thread")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a small CI smoke run (< 30 s)")
    parser.add_argument("--database", default="bench")
    parser.add_argument("--profile", action="store_true",
                        help="also print a per-statement breakdown and a cProfile of one worker")
    parser.add_argument("--pin", action="store_true",
                        help="diagnostic: pin each worker and its server backend to one CPU (see pin()); needs a local "
                             "server")
    args = parser.parse_args(argv)
    variant = args.path
    if args.quick:
        args.sizes, args.runs, args.repeats = "5000", 2000, 1
    sizes = [int(s) for s in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    modes = args.modes.split(",")

    url = b.open_database(args.database)
    conn = b.bench_connect(url)
    kinds = registry(args.path)
    print(f"machine: {b.machine(conn)}; revision {b.git_revision()}", flush=True)
    print(f"path={args.path} lease={SETTINGS.lease} max_receive_count={SETTINGS.max_receive_count} "
          f"repeats={args.repeats}" + (" PINNED (worker + backend on one CPU)" if args.pin else ""), flush=True)
    results = []
    for n in sizes:
        r = min(args.runs, n)
        data = b.load_schedules(conn, n=n, d_max=r)
        b.arm(conn, data, r)
        sink = CollectingSink()
        report = dispatch(conn, b.dispatch_settings(time_budget_s=1e9), now=b.NOW, publisher=sink)
        assert report.runs_created == r == len(sink.bodies), report
        source = InMemoryBatchSource(sink.bodies, ACCOUNTING.consumer.batch_size)
        print(f"N={n:,}: {r:,} runs queued in {len(source.batches):,} batches of 10", flush=True)
        for w in workers:
            for mode in (["single"] if w == 1 else modes):
                walls, cpu, srv, loads, wal = [], [], [], [], []
                for _ in range(args.repeats):
                    requeue(conn)
                    loads.append(b.load_average())
                    lsn = b.wal_lsn(conn)
                    out = run_workers(url, source, w, "thread" if w == 1 else mode, path=args.path,
                                      variant=variant, pinned=args.pin)
                    wal.append(b.wal_bytes_since(conn, lsn) / r)
                    assert out["done"] == r, out
                    walls.append(out["wall"])
                    cpu.append(out["client_cpu"])
                    srv.append(out["server_cpu"])
                left = conn.execute("SELECT count(*) AS c FROM schedule_runs WHERE state <> 'succeeded'").fetchone()
                assert left["c"] == 0, f"{left['c']} runs not settled"
                marked = conn.execute("SELECT count(*) AS c FROM schedules WHERE last_run_id IS NOT NULL "
                                      "AND last_outcome = 'succeeded' AND consecutive_failures = 0").fetchone()
                assert marked["c"] == r, f"{marked['c']} of {r} schedules carry their run's outcome"
                wall = b.median(walls)
                row = {"n": n, "r": r, "workers": w, "mode": mode, "wall": wall, "min": min(walls),
                       "max": max(walls), "rate": r / wall, "client_us": 1e6 * b.median(cpu) / r,
                       "server_us": None if None in srv else 1e6 * b.median(srv) / r, "wal": b.median(wal),
                       "load": max(loads)}
                results.append(row)
                print(f"  workers={w} ({mode}): {row['rate']:,.0f} runs/s (median of {args.repeats}, "
                      f"{row['min']:.2f}-{row['max']:.2f} s, load {row['load']:.1f})", flush=True)
        if args.profile:
            if args.pin:
                pin(0, conn.info.backend_pid)
            if variant not in ("pipeline-mode", "batch-pipelined"):  # pipelined statements return at once
                requeue(conn)
                print(statement_breakdown(conn, sink.bodies, kinds, variant), flush=True)
            requeue(conn)
            print(profile(conn, sink.bodies, kinds, variant), flush=True)
            if args.pin:
                os.sched_setaffinity(0, range(os.cpu_count() or 1))
                os.sched_setaffinity(conn.info.backend_pid, range(os.cpu_count() or 1))

    print()
    if args.pin:
        print("each worker and its server backend pinned to one CPU (--pin): a diagnostic, see pin()")
    print(b.table(
        ["path", "N", "runs", "workers", "mode", "wall s (median)", "min-max s", "runs/s", "client CPU us/run",
         "server CPU us/run", "WAL B/run", "load avg"],
        [[variant, f"{x['n']:,}", f"{x['r']:,}", x["workers"], x["mode"], f"{x['wall']:.2f}",
          f"{x['min']:.2f}-{x['max']:.2f}", f"{x['rate']:,.0f}", f"{x['client_us']:.0f}",
          "n/a" if x["server_us"] is None else f"{x['server_us']:.0f}", f"{x['wal']:,.0f}", f"{x['load']:.1f}"]
         for x in results]))
    for x in results:
        print(f"consumer ({variant}) N={x['n']:,} workers={x['workers']} "
              f"({x['mode']}): {x['rate']:,.0f} runs/s (target >= 5,000: {'met' if x['rate'] >= 5000 else 'MISSED'})")
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
