"""Partitioned dispatch benchmark: the claim statement and whole passes with K=1 and K=4.

Loads N active schedules (the shared rule mix of ``_bench``) of which D are due, then:

- ``claim``: the claim statement alone (``claim_due_schedules``, 200 rows), as EXPLAIN
  (ANALYZE, BUFFERS) inside a transaction that is rolled back, for partition 0 of K=1 (the
  whole owner) and each partition of K=4: execution time (median of the repeats) and the
  shared buffers it touched;
- ``pass``: real ``dispatch`` passes draining the D due schedules into a counting sink:
  K=1 is one process, K=4 is four processes (their own connections, started together by
  a barrier), each passing over its partition; occurrences per second of wall time from
  the start to the last pass's end.

    PYTHONPATH=shared python benchmarks/partitions.py                 # N = 100k, D = 20k (~2 min)
    PYTHONPATH=shared python benchmarks/partitions.py --sizes 1000000 --due 20000
    PYTHONPATH=shared python benchmarks/partitions.py --quick         # smoke (< 1 min)

The database ``bench_partitions`` on the benchmark server (``_bench.open_database``) is
created afresh. On a machine with fewer cores than K plus the database's, K processes
share the cores: the pass figure then shows what partitioning costs, not what it buys.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time

import _bench as b

from timekeeper.schedules.dispatcher import WHOLE_OWNER, Partition, dispatch
from timekeeper.schedules.work import Succeeded, WorkKindRegistry


def _registry() -> WorkKindRegistry:
    kinds = WorkKindRegistry()
    kinds.register(b.OWNER, b.WORK_KIND, lambda ctx: Succeeded(), description="benchmark no-op")
    return kinds


def claim_part(url: str, n: int, repeats: int) -> list[list]:
    rows = []
    with b.bench_connect(url) as conn:
        for count in (1, 4):
            for index in range(count):
                partition = Partition(index, count)
                b.claim_plan(conn, partition)  # warm
                measured = [b.claim_plan(conn, partition) for _ in range(repeats)]
                ms = statistics.median(m.ms for m in measured)
                rows.append([f"claim of 200, K={count} partition {index}", f"{n:,}", f"{ms:.2f} ms",
                             measured[-1].buffers, measured[-1].rows, f"{b.load_average():.1f}"])
    return rows


def _pass(url: str, partition: Partition, claim_limit: int, barrier, results) -> None:
    conn = b.bench_connect(url)
    try:
        sink = b.CountingSink()
        registry = _registry()
        barrier.wait()
        started = time.perf_counter()
        claimed = 0
        while True:  # passes until the partition has nothing due (one pass has a 30 s budget)
            report = dispatch(conn, b.dispatch_settings(claim_limit=claim_limit), now=b.NOW, publisher=sink,
                              registry=registry, partition=partition)
            claimed += report.claimed
            if report.claimed == 0:
                break
        results.put((partition.index, started, time.perf_counter(), claimed))
    finally:
        conn.close()


def pass_part(url: str, data: b.Dataset, due: int, claim_limit: int, repeats: int) -> list[list]:
    rows = []
    context = multiprocessing.get_context("spawn")
    for count in (1, 4):
        for repeat in range(repeats):
            with b.bench_connect(url) as conn:
                b.arm(conn, data, due)
            partitions = [WHOLE_OWNER] if count == 1 else [Partition(i, count) for i in range(count)]
            barrier, results = context.Barrier(len(partitions)), context.Queue()
            workers = [context.Process(target=_pass, args=(url, p, claim_limit, barrier, results))
                       for p in partitions]
            for w in workers:
                w.start()
            ended = [results.get(timeout=600) for _ in workers]
            for w in workers:
                w.join(60)
            start = min(e[1] for e in ended)
            wall = max(e[2] for e in ended) - start
            claimed = sum(e[3] for e in ended)
            rows.append([f"passes draining {due:,} due, K={count} (repeat {repeat + 1})", f"{data.n:,}",
                         f"{wall:.2f} s", f"{claimed / wall:,.0f}/s", claimed, f"{b.load_average():.1f}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000", help="schedules loaded, comma-separated")
    parser.add_argument("--due", type=int, default=20000, help="due schedules")
    parser.add_argument("--claim-limit", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", default="claim,pass")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.due, args.repeats = "20000", 4000, 1
    parts = args.parts.split(",")
    url = b.open_database("bench_partitions")
    print(f"revision {b.git_revision()}", flush=True)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        with b.bench_connect(url) as conn:
            data = b.load_schedules(conn, n=n, d_max=args.due)
            b.arm(conn, data, args.due)
        if "claim" in parts:
            rows += claim_part(url, n, args.repeats)
        if "pass" in parts:
            rows += pass_part(url, data, args.due, args.claim_limit, args.repeats)
    print(b.table(["what", "schedules", "time", "buffers / rate", "rows / claimed", "load avg"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
