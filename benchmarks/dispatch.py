"""Dispatcher fan-out benchmark: the real ``dispatch`` pass against the real database.

Loads N active schedules (cron and calendar rules over several zones) of which D are due,
runs ``timekeeper.schedules.dispatcher.dispatch`` with the queue publish replaced by a
counting sink, and reports occurrences claimed-recorded-advanced per second, pass time and
peak memory as N grows, and the time of passes with nothing to do (``probe_work``; see
:func:`idle_passes`). See benchmarks/README.md for the targets and the results.

    cd /work/main && PYTHONPATH=shared python benchmarks/dispatch.py            # full (~5 min)
    cd /work/main && PYTHONPATH=shared python benchmarks/dispatch.py --quick    # CI smoke (< 30 s)

Variants: ``shared`` (16 rules; each due schedule at one of its rule's last three
occurrences: 48 distinct (rule, due instant) pairs, so the pass's rule cache computes 48
dues); ``unique`` (every due schedule has its own rule text and due instant: every
parse and every computation is unique -- the worst case for the cache); ``history``
(``shared`` plus N finished runs of earlier days kept in ``schedule_runs``, as production
accumulates them; the other variants start every pass with an empty runs table).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from datetime import datetime, timedelta
from uuid import UUID, uuid4
from zoneinfo import ZoneInfo, available_timezones

import _bench as b
import psycopg

from timekeeper.schedules import recurrence
from timekeeper.schedules.dispatcher import DispatchReport, dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import Succeeded, WorkKindRegistry
from timekeeper.topology import ACCOUNTING


class CountingSink:
    """A RunPublisher that only counts (accepts every message, keeps none)."""

    def __init__(self) -> None:
        self.count = 0
        self.calls = 0

    def publish(self, messages: list[RunMessage]) -> set[UUID]:
        self.count += len(messages)
        self.calls += 1
        return set()


def registry() -> WorkKindRegistry:
    """The work kind of the loaded schedules (no staleness bound, like accounting's)."""
    kinds = WorkKindRegistry()
    kinds.register(b.OWNER, b.WORK_KIND, lambda ctx: Succeeded(), description="benchmark no-op")
    return kinds


#: The second claim worker's connection (``--claim-workers 2``, the topology's default), by
#: the database URL of the connection it pairs with; the dispatcher function opens its
#: second connection in the same way (``timekeeper.edge.runs.run_dispatcher``).
SECOND: dict[str, object] = {}
CLAIM_WORKERS = [ACCOUNTING.claim_workers]


def second_of(conn):
    """The second claim worker's connection opener for passes on ``conn`` (None: one worker)."""
    if CLAIM_WORKERS[0] < 2:
        return None
    url = conn.info.dsn

    def opened():
        kept = SECOND.get(url)
        try:  # a database re-created for the next scenario ended the kept connection
            kept.execute("SELECT 1")
        except (AttributeError, psycopg.Error):
            SECOND[url] = kept = b.bench_connect(url)  # the embedded server trusts local logins
        return kept

    return opened


def one_pass(conn, kinds: WorkKindRegistry, claim_limit: int) -> tuple[DispatchReport, CountingSink]:
    sink = CountingSink()
    report = dispatch(conn, b.dispatch_settings(claim_limit=claim_limit, time_budget_s=1e9), now=b.NOW,
                      publisher=sink, registry=kinds, second=second_of(conn))
    return report, sink


def run_scenario(conn, data: b.Dataset, d: int, *, repeats: int, claim_limit: int,
                 kinds: WorkKindRegistry, cold: bool = False) -> dict:
    """Arm ``d`` due schedules, run the pass ``repeats`` times untraced (re-arming before
    each) and once more under tracemalloc; return the row's numbers. ``cold``: clear the
    process's compiled-rule cache before each pass (a dispatcher's first pass after a cold
    start); otherwise each pass meets rules compiled before it (by the load or the pass
    before), as a warm dispatcher's passes do."""
    times, rss, cpu, loads, wal = [], [], [], [], []
    report = None
    opener = second_of(conn)
    pids = (conn.info.backend_pid,) + ((opener().info.backend_pid,) if opener else ())
    for _ in range(repeats):
        b.arm(conn, data, d, keep_rules=not cold)
        if not times:
            rules, pairs = b.distinct_pairs(conn)
        lsn = b.wal_lsn(conn)
        m = b.measure(lambda: one_pass(conn, kinds, claim_limit), backend_pids=pids)
        wal.append(b.wal_bytes_since(conn, lsn) / d)
        report, sink = m.result
        if report.runs_created != d or sink.count != d or report.claimed != d:
            raise AssertionError(f"expected {d} runs, got {report.runs_created} created, {sink.count} published")
        times.append(m.seconds)
        rss.append(m.rss_growth_kib)
        cpu.append((m.client_cpu_s, m.server_cpu_s))
        loads.append(m.load_before)
    b.arm(conn, data, d, keep_rules=not cold)
    traced = b.measure(lambda: one_pass(conn, kinds, claim_limit), trace=True)
    pass_s = b.median(times)
    client_cpu = b.median([c for c, _ in cpu])
    server_cpu = b.median([s for _, s in cpu]) if None not in (s for _, s in cpu) else None
    return {"variant": data.variant + (" (cold)" if cold else ""),
            "n": data.n, "d": d, "history": data.history, "rules": rules, "pairs": pairs,
            "batches": report.batches, "backlog": report.backlog_skipped, "pass_s": pass_s,
            "min_s": min(times), "max_s": max(times), "rate": d / pass_s,
            "client_ms_per_1k": 1000 * client_cpu / d * 1000,
            "server_ms_per_1k": None if server_cpu is None else 1000 * server_cpu / d * 1000,
            "wal_per_run": b.median(wal), "load": max(loads), "traced_kib": traced.traced_peak_kib,
            "traced_s": traced.seconds, "rss_kib": b.median(rss), "load_s": data.load_s}


def index_check(database: str, small_n: int, big_n: int, d: int, *, pairs: int, claim_limit: int,
                kinds: WorkKindRegistry) -> dict:
    """The same pass (``d`` due, shared rules) among ``small_n`` and among ``big_n``
    schedules, in two databases loaded side by side, timed in alternation (small, big,
    small, big, ...) so that background load on the machine hits both alike."""
    small_conn = b.bench_connect(b.open_database(f"{database}_small"))
    big_conn = b.bench_connect(b.open_database(database))
    small = b.load_schedules(small_conn, n=small_n, d_max=d)
    big = b.load_schedules(big_conn, n=big_n, d_max=d)
    times: dict[str, list[float]] = {"small": [], "big": []}
    wal: dict[str, list[float]] = {"small": [], "big": []}
    loads = []
    for _ in range(pairs):
        for label, conn, data in (("small", small_conn, small), ("big", big_conn, big)):
            b.arm(conn, data, d)
            lsn = b.wal_lsn(conn)
            m = b.measure(lambda c=conn: one_pass(c, kinds, claim_limit))
            if m.result[0].runs_created != d:
                raise AssertionError(f"expected {d} runs, got {m.result[0].runs_created}")
            times[label].append(m.seconds)
            wal[label].append(b.wal_bytes_since(conn, lsn) / d)
            loads.append(m.load_before)
    b.arm(big_conn, big, d)
    plan = explain_claim(big_conn, claim_limit)
    small_conn.close()
    big_conn.close()
    ts, tb = b.median(times["small"]), b.median(times["big"])
    per_pair = b.median([big_s / small_s for small_s, big_s in zip(times["small"], times["big"], strict=True)])
    return {"small_n": small_n, "big_n": big_n, "d": d, "pairs": pairs, "small_s": ts, "big_s": tb,
            "ratio": tb / ts, "pair_ratio": per_pair, "small_wal": b.median(wal["small"]),
            "big_wal": b.median(wal["big"]), "load": max(loads), "plan": plan}


#: psycopg prepares a statement on its 6th execution (prepare_threshold = 5) and PostgreSQL
#: plans a prepared statement's first 5 executions with the parameter values (custom plans);
#: from the 11th execution on a connection it may use a generic plan instead.
GENERIC_PLAN_FROM = 11


def idle_passes(conn, url: str, data: b.Dataset, kinds: WorkKindRegistry, *, passes: int, claim_limit: int,
                queued: int) -> dict:
    """Back-to-back passes with nothing to do (no schedule due, no run to reoffer), which the
    product's ``probe_work`` query answers in one round trip, on a fresh connection (as a
    newly started Lambda has). ``queued`` = 0: an empty runs queue (re-armed); otherwise the
    state the last scenario left, its ``queued`` runs still queued and freshly offered
    (consumers behind). Returns the median wall time (ms) of passes 1..10 (custom plans)
    and of passes 11.. (what a warm Lambda's connection runs every minute: the statement is
    prepared and may run a generic plan), and the statements sent per pass."""
    if not queued:
        b.arm(conn, data, 0)
    fresh = b.bench_connect(url)
    try:
        statements = count_statements(fresh, lambda: one_pass(fresh, kinds, claim_limit))
        times = [0.0]  # pass 1 was the counting one
        for _ in range(max(passes, GENERIC_PLAN_FROM) - 1):  # b.measure's gc.collect() would dominate
            started = time.perf_counter()
            report, _ = one_pass(fresh, kinds, claim_limit)
            times.append(time.perf_counter() - started)
            if report.batches:
                raise AssertionError(f"an idle pass ran {report.batches} batches")
    finally:
        fresh.close()
    early, late = times[1:GENERIC_PLAN_FROM - 1], times[GENERIC_PLAN_FROM - 1:]
    return {"variant": data.variant, "n": data.n, "history": data.history, "queued": queued, "passes": len(times),
            "early_ms": 1000 * b.median(early), "late_ms": 1000 * b.median(late), "late_max_ms": 1000 * max(late),
            "statements": statements}


def count_statements(conn, call) -> int:
    """How many statements ``call`` sends through ``conn.execute`` (transaction commands,
    which psycopg sends itself, are not counted)."""
    original = conn.execute
    sent = 0

    def counting(*args, **kwargs):
        nonlocal sent
        sent += 1
        return original(*args, **kwargs)

    conn.execute = counting
    try:
        call()
    finally:
        del conn.execute
    return sent


def explain_claim(conn, limit: int) -> str:
    rows = conn.execute(
        """EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
           SELECT id, workspace_id, work_kind, recurrence::text AS rule_text, next_due_at, definition_version
             FROM schedules
            WHERE owner = %(owner)s AND status = 'active' AND next_due_at <= %(now)s
            ORDER BY next_due_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED""",
        {"owner": b.OWNER, "now": b.NOW, "limit": limit}).fetchall()
    return "\n".join(r["QUERY PLAN"] for r in rows)


def backlog_zones(count: int) -> list[str]:
    """``count`` distinct IANA zones, those with DST changes first (sorted by name)."""
    probe = (datetime(2026, 1, 15, tzinfo=b.UTC), datetime(2026, 7, 15, tzinfo=b.UTC))
    names = sorted(z for z in available_timezones() if "/" in z and not z.startswith(("Etc/", "SystemV/")))
    changing = [z for z in names if len({t.astimezone(ZoneInfo(z)).utcoffset() for t in probe}) > 1]
    steady = [z for z in names if z not in changing]
    zones = (changing + steady)[:count]
    if len(zones) < count:
        raise ValueError(f"only {len(zones)} zones available")
    return zones


def backlog_claim(conn, kinds: WorkKindRegistry, *, schedules: int, days: int, repeats: int,
                  claim_limit: int, profile: bool = False) -> dict:
    """One claim of ``schedules`` every-minute schedules in distinct zones, each behind by
    ``days`` days (its due instant a minute-aligned occurrence ``days`` days before NOW):
    the pass's wall time (median of ``repeats``, re-armed before each), checked against the
    exact skipped count (every real minute of the backlog but the latest)."""
    latest = b.NOW.replace(second=0, microsecond=0)
    first = latest - timedelta(days=days)
    expected = (latest - first) // timedelta(minutes=1)
    zones = backlog_zones(schedules)
    times, batches = [], 0
    for _ in range(repeats):
        conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
        with conn.cursor().copy("COPY schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, "
                                "next_due_at, definition_version, created_at, updated_at) FROM STDIN") as copy:
            for zone in zones:
                copy.write_row((uuid4(), uuid4(), b.OWNER, b.WORK_KIND,
                                json.dumps({"cron": "* * * * *", "timezone": zone}), zone, "active", first, 1,
                                first, first))
        conn.execute("VACUUM ANALYZE schedules")
        recurrence._compile_cached.cache_clear()
        profiler = cProfile.Profile() if profile else None
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        report, _ = one_pass(conn, kinds, claim_limit)
        times.append(time.perf_counter() - started)
        if profiler is not None:
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
            print(out.getvalue(), flush=True)
            profile = False
        batches = report.batches
        wrong = conn.execute("SELECT count(*) AS n FROM schedule_runs WHERE occurrence_at <> %s "
                             "OR skipped_backlog <> %s", (latest, expected)).fetchone()["n"]
        if report.runs_created != schedules or wrong:
            raise AssertionError(f"{report.runs_created} runs, {wrong} with a wrong occurrence or count")
    return {"schedules": schedules, "days": days, "skipped_each": expected, "batches": batches,
            "pass_s": b.median(times), "min_s": min(times), "max_s": max(times), "load": b.load_average()}


def profile_pass(conn, kinds: WorkKindRegistry, claim_limit: int, top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    report, _ = one_pass(conn, kinds, claim_limit)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return f"profile of one pass ({report.runs_created} runs, {report.batches} batches)\n" + out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000,1000000", help="comma-separated N (schedules loaded)")
    parser.add_argument("--due", default="1000,10000,100000",
                        help="comma-separated D (due schedules); each D <= N is run for every N")
    parser.add_argument("--variants", default="shared,unique,history",
                        help="shared, unique and/or history (see the module docstring)")
    parser.add_argument("--max-due-unique", type=int, default=10000,
                        help="largest D run for the unique variant (its load compiles every rule in Python)")
    parser.add_argument("--max-due-history", type=int, default=10000, help="largest D run for the history variant")
    parser.add_argument("--history-per-schedule", type=float, default=1.0,
                        help="history variant: finished runs kept per schedule (1 = one day of daily runs)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per scenario (the median is shown)")
    parser.add_argument("--claim-limit", type=int, default=200)
    parser.add_argument("--claim-workers", type=int, default=ACCOUNTING.claim_workers, choices=(1, 2),
                        help="claim workers of a pass (default: the topology's); 2 opens a second connection")
    parser.add_argument("--cold", action="store_true",
                        help="clear the compiled-rule cache before each timed pass (a cold dispatcher)")
    parser.add_argument("--quick", action="store_true", help="a small CI smoke run (< 30 s)")
    parser.add_argument("--database", default="bench", help="database created (dropped first) on the server")
    parser.add_argument("--profile", action="store_true", help="cProfile one extra pass of the largest scenario")
    parser.add_argument("--index-pairs", type=int, default=7,
                        help="alternating (smallest N, largest N) pass pairs of the index check (0: skip it)")
    parser.add_argument("--idle-passes", type=int, default=30,
                        help="timed passes with nothing due at the largest N of each variant (0: skip)")
    parser.add_argument("--backlog", default="",
                        help="only the backlog claim: 'SCHEDULES:DAYS[,SCHEDULES:DAYS...]', e.g. 200:365 "
                             "(every-minute schedules in distinct zones, each DAYS behind)")
    args = parser.parse_args(argv)
    CLAIM_WORKERS[0] = args.claim_workers
    if args.backlog:
        return backlog_main(args)
    if args.quick:
        args.sizes, args.due, args.repeats = "1000,20000", "1000,5000", 1
        args.max_due_unique = args.max_due_history = 1000
        args.index_pairs = min(args.index_pairs, 3)
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    dues = sorted({int(s) for s in args.due.split(",")})
    variants = [v for v in ("shared", "unique", "history") if v in args.variants.split(",")]
    caps = {"shared": max(dues), "unique": args.max_due_unique, "history": args.max_due_history}

    url = b.open_database(args.database)
    conn = b.bench_connect(url)
    kinds = registry()
    print(f"machine: {b.machine(conn)}; revision {b.git_revision()}", flush=True)
    print(f"now={b.NOW.isoformat()} claim_limit={args.claim_limit} claim_workers={args.claim_workers} "
          f"repeats={args.repeats}", flush=True)
    results, idles = [], []
    for variant in variants:
        for n in sizes:
            ds = [d for d in dues if d <= n and d <= caps[variant]]
            if not ds:
                continue
            history = round(n * args.history_per_schedule) if variant == "history" else 0
            data = b.load_schedules(conn, n=n, d_max=max(ds), variant="shared" if variant == "history" else variant,
                                    history=history)
            data.variant = variant
            print(f"loaded {variant} N={n:,} (due-capable {max(ds):,}, history runs {history:,}) "
                  f"in {data.load_s:.1f} s", flush=True)
            for d in ds:
                row = run_scenario(conn, data, d, repeats=args.repeats, claim_limit=args.claim_limit, kinds=kinds,
                                   cold=args.cold)
                results.append(row)
                print(f"  D={d:,}: pass {row['pass_s']:.3f} s, {row['rate']:,.0f} occurrences/s, "
                      f"traced peak {row['traced_kib']:,} KiB, RSS growth {row['rss_kib']:,} KiB, "
                      f"load {row['load']:.1f}", flush=True)
            if args.idle_passes and n == sizes[-1]:
                for queued in (ds[-1], 0):  # first with the last scenario's runs still queued
                    idle = idle_passes(conn, url, data, kinds, passes=args.idle_passes, claim_limit=args.claim_limit,
                                       queued=queued)
                    idles.append(idle)
                    print(f"  idle pass ({queued:,} runs queued): {idle['early_ms']:.2f} ms (passes 2-10), "
                          f"{idle['late_ms']:.2f} ms (passes {GENERIC_PLAN_FROM}-{idle['passes']}), "
                          f"{idle['statements']} statement(s)", flush=True)
            if args.profile and n == sizes[-1]:
                b.arm(conn, data, ds[-1])
                print(profile_pass(conn, kinds, args.claim_limit, 30), flush=True)

    print()
    print(b.table(
        ["variant", "N", "D", "history runs", "rules", "(rule, due) pairs", "batches", "backlog skipped",
         "pass s (median)", "min-max s", "occurrences/s", "client CPU ms/1k", "server CPU ms/1k", "WAL B/run",
         "tracemalloc peak KiB", "RSS growth KiB", "load avg"],
        [[r["variant"], f"{r['n']:,}", f"{r['d']:,}", f"{r['history']:,}", f"{r['rules']:,}", f"{r['pairs']:,}",
          r["batches"], f"{r['backlog']:,}", f"{r['pass_s']:.3f}", f"{r['min_s']:.3f}-{r['max_s']:.3f}",
          f"{r['rate']:,.0f}", f"{r['client_ms_per_1k']:.0f}",
          "n/a" if r["server_ms_per_1k"] is None else f"{r['server_ms_per_1k']:.0f}", f"{r['wal_per_run']:,.0f}",
          f"{r['traced_kib']:,}", f"{r['rss_kib']:,}", f"{r['load']:.1f}"] for r in results]))
    if idles:
        print("idle passes (nothing due, nothing to reoffer; one fresh connection, back to back):")
        print(b.table(["variant", "N", "history runs", "runs queued", "statements", "ms, passes 2-10 (median)",
                       f"ms, passes {GENERIC_PLAN_FROM}+ (median)", f"max ms, passes {GENERIC_PLAN_FROM}+"],
                      [[i["variant"], f"{i['n']:,}", f"{i['history']:,}", f"{i['queued']:,}", i["statements"],
                        f"{i['early_ms']:.2f}", f"{i['late_ms']:.2f}", f"{i['late_max_ms']:.2f}"] for i in idles]))
    checks = []
    for variant in variants:
        for r in results:
            if r["variant"].split(" ")[0] == variant and r["n"] >= 100_000 and r["d"] >= 10_000:
                checks.append(f"fan-out ({variant}) N={r['n']:,} D={r['d']:,}: {r['rate']:,.0f}/s "
                              f"(target >= 10,000: {'met' if r['rate'] >= 10_000 else 'MISSED'})")
    if args.index_pairs and len(sizes) > 1:
        d = min(dues)
        print(f"index check: D={d:,} among N={sizes[0]:,} vs N={sizes[-1]:,}, {args.index_pairs} alternating pairs",
              flush=True)
        ic = index_check(args.database, sizes[0], sizes[-1], d, pairs=args.index_pairs,
                         claim_limit=args.claim_limit, kinds=kinds)
        print(f"claim plan at N={sizes[-1]:,}, D={d:,}:\n{ic['plan']}\n")
        print(b.table(["N", "D", "pass s (median)", "WAL B/run"],
                      [[f"{ic['small_n']:,}", f"{d:,}", f"{ic['small_s']:.3f}", f"{ic['small_wal']:,.0f}"],
                       [f"{ic['big_n']:,}", f"{d:,}", f"{ic['big_s']:.3f}", f"{ic['big_wal']:,.0f}"]]))
        checks.append(f"index check: D={d:,} pass at N={ic['big_n']:,} / at N={ic['small_n']:,} = "
                      f"{ic['big_s']:.3f} / {ic['small_s']:.3f} s = {ic['ratio']:.2f} (median of per-pair ratios "
                      f"{ic['pair_ratio']:.2f}; load avg <= {ic['load']:.1f}) "
                      f"(target <= 1.20: {'met' if ic['ratio'] <= 1.2 else 'MISSED'})")
    print("\n".join(checks))
    conn.close()
    return 0


def backlog_main(args: argparse.Namespace) -> int:
    """``--backlog``: time the claim of long backlogs (see :func:`backlog_claim`)."""
    conn = b.bench_connect(b.open_database(args.database))
    kinds = registry()
    print(f"machine: {b.machine(conn)}; revision {b.git_revision()}", flush=True)
    rows = []
    for spec in args.backlog.split(","):
        schedules, days = (int(x) for x in spec.split(":"))
        row = backlog_claim(conn, kinds, schedules=schedules, days=days, repeats=args.repeats,
                            claim_limit=args.claim_limit, profile=args.profile)
        rows.append(row)
        print(f"  {schedules} schedules x {days} days behind: pass {row['pass_s']:.3f} s "
              f"(min {row['min_s']:.3f}, max {row['max_s']:.3f}), load {row['load']:.1f}", flush=True)
    print(b.table(["schedules (distinct zones)", "days behind", "skipped each", "batches", "pass s (median)",
                   "min-max s", "load avg"],
                  [[r["schedules"], r["days"], f"{r['skipped_each']:,}", r["batches"], f"{r['pass_s']:.3f}",
                    f"{r['min_s']:.3f}-{r['max_s']:.3f}", f"{r['load']:.1f}"] for r in rows]))
    for r in rows:
        if r["schedules"] >= 200 and r["days"] >= 365:
            print(f"backlog claim: {r['schedules']} schedules x {r['days']} days: {r['pass_s']:.3f} s "
                  f"(target < 1 s: {'met' if r['pass_s'] < 1 else 'MISSED'})")
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
