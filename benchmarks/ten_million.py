"""Ten million schedules on this machine: load, claim, a minute's 100,000 runs end to end.

On the benchmark server (``_bench.open_database``) this script

1. ``load``: loads N schedules (default 10,000,000) with COPY, as the product writes
   them: spread over N/100 workspaces, two owners (85 % accounting in its four work
   kinds, 10 % queries' deliveries), 540 distinct rules (cron and calendar forms, 27
   zones, a few popular rules taking most schedules), 4 % paused, 1 % deleted; most
   with a last run recorded, 3 % failing. A fixed fraction of N (``--due-fraction``, 2 %)
   is due: accounting schedules evenly spread over the table, each due at one of its
   rule's last three real occurrences (80 % the latest, as ``_bench.due_slot``); the
   others' next occurrence is one of their rule's next 40. The constraints and indexes
   of the migrations are dropped for the COPY and built again after it (as pg_restore
   does; built indexes are denser than ones grown by random inserts). Reports the load
   time of each step and the sizes of the table and of each index;
2. ``claim``: the dispatcher's claim of 200 (the statement alone under EXPLAIN (ANALYZE,
   BUFFERS), rolled back, as ``partitions.py`` times it; and one real claim batch: a
   ``dispatch`` pass with a zero budget claims, records and advances 200 and publishes
   into a counting sink) at N against the same at ``--small`` (10,000) schedules loaded
   the same way in a second database, timed in alternation: medians, shared buffers
   hit / read, and the dispatcher's peak RSS growth;
3. ``e2e``: ``--e2e-due`` (100,000) due schedules of the accounting pipeline end to end
   across ``--partitions`` (4) dispatcher processes, one per partition, each running one
   pass a minute (the pipeline's claim batch and 30 s budget; a schedule its pass left
   behind waits for the next minute's pass), publishing in SendMessageBatch chunks of
   10 onto an in-memory queue, and ``--consumers`` (the pipeline's maximum concurrency,
   2) consumer processes receiving up to the pipeline's batch (50) and handing it to the
   real ``process_batch`` (as ``timekeeper.edge.runs.consume_runs`` does, minus
   Powertools' batch machinery) with a no-op work kind; runs per second and whether all
   settle within 60 s; each process's round trips to the server (``count_round_trips``),
   peak RSS growth and CPU; the whole server's CPU
   (``_bench.server_cpu_s``) and WAL (``pg_stat_wal``, the WAL position) per run; then
   checks every run settled once.

    PYTHONPATH=shared python benchmarks/ten_million.py                          # 10 M: about 11 min
    PYTHONPATH=shared python benchmarks/ten_million.py --schedules 20000        # smoke: about a minute

The databases ``bench_tenm`` and ``bench_tenm_small`` are created afresh (``DATABASE_URL``
wins over the embedded server). With fewer cores than partitions + consumers + the
database's, they share the cores: the end-to-end figure is then this machine's, not the
topology's.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue as queue_mod
import statistics
import sys
import time
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import _bench as b
import psycopg

from timekeeper.observability import MetricsRecorder
from timekeeper.schedules import recurrence
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, ProcessResult, process_batch
from timekeeper.schedules.dispatcher import WHOLE_OWNER, DispatchSettings, Partition, dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.recurrence import parse_rule
from timekeeper.schedules.work import RunContext, Succeeded, WorkKindRegistry
from timekeeper.topology import ACCOUNTING

PIPELINE = ACCOUNTING
OWNER = PIPELINE.owner
#: The accounting work kinds (timekeeper.accounting.work_kinds) and queries' delivery kind.
ACCOUNTING_KINDS = ("batch.roll", "batch.auto_close", "reconciliation.sweep", "billing.prepare")
QUERIES_OWNER, QUERIES_KIND = "queries", "queries.deliver"
NAMES = {"batch.roll": "Roll open batches", "batch.auto_close": "Close stale batches",
         "reconciliation.sweep": "Reconciliation sweep", "billing.prepare": "Prepare monthly billing",
         QUERIES_KIND: "Weekly report to finance"}
#: SendMessageBatch's limit: the SQS publisher sends messages in chunks of this many.
SQS_CHUNK = 10
COLUMNS = ("id", "workspace_id", "owner", "work_kind", "subject_id", "name", "recurrence", "timezone", "status",
           "pause_reason", "next_due_at", "consecutive_failures", "last_run_id", "last_outcome", "last_run_at",
           "definition_version", "created_by", "owner_user_id", "created_at", "updated_at", "deleted_at")
ZONES = ("UTC", "America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles",
         "America/Sao_Paulo", "America/Toronto", "America/Mexico_City", "Europe/London", "Europe/Berlin",
         "Europe/Paris", "Europe/Madrid", "Europe/Warsaw", "Europe/Helsinki", "Africa/Johannesburg",
         "Asia/Dubai", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Singapore", "Asia/Tokyo", "Asia/Shanghai",
         "Australia/Sydney", "Australia/Lord_Howe", "Australia/Perth", "Pacific/Auckland", "Pacific/Chatham",
         "America/St_Johns")


def rule_pool() -> list[dict[str, Any]]:
    """540 distinct rules: 20 forms (cron and calendar, daily to yearly, business hours,
    month ends, nth weekdays) in each of the 27 :data:`ZONES`. The first forms are the
    common ones (weekday mornings, nightly, monthly), weighted up by :func:`rule_weights`."""
    forms: list[dict[str, Any]] = [
        {"cron": "0 9 * * 1-5"}, {"cron": "0 2 * * *"}, {"cron": "0 6 1 * *"},
        {"calendar": {"frequency": "monthly", "month_day": "last", "times": ["23:00"]}},
        {"cron": "30 7 * * 1"}, {"cron": "*/15 * * * *"}, {"cron": "0 */4 * * *"},
        {"calendar": {"frequency": "daily", "times": ["08:00", "17:30"]}},
        {"calendar": {"frequency": "weekly", "weekdays": ["MO", "WE", "FR"], "times": ["07:45"]}},
        {"calendar": {"frequency": "monthly", "nth_weekday": [2, "TU"], "times": ["10:00"]}},
        {"cron": "15 18 * * 1-5"}, {"cron": "0 0 L * *"}, {"cron": "45 3 * * 0"}, {"cron": "5 12 15 * *"},
        {"calendar": {"frequency": "monthly", "month_day": 1, "times": ["05:30"]}},
        {"calendar": {"frequency": "daily", "interval": 2, "times": ["12:00"]}},
        {"calendar": {"frequency": "yearly", "month": 12, "month_day": "last", "times": ["20:00"]}},
        {"cron": "20 1 * * 2-6"}, {"cron": "0 10 1-7 * 1"}, {"cron": "50 23 * * *"},
    ]
    return [{**form, "timezone": zone} for form in forms for zone in ZONES]


def rule_weights(count: int, slots: int = 4096) -> list[int]:
    """A table of ``slots`` rule indexes in which rule ``i`` appears about in proportion to
    1 / (1 + i / 20): the popular rules (the first forms, in every zone) take most
    schedules, every rule has some."""
    weights = [1.0 / (1.0 + (i % 20) * 1.5 + i / 540) for i in range(count)]
    total = sum(weights)
    table: list[int] = []
    for i, w in enumerate(weights):
        table.extend([i] * max(1, round(slots * w / total)))
    return table


def _iso(t: datetime) -> str:
    return t.isoformat()


class Generator:
    """The rows of :func:`load`: COPY text of ``n`` schedules and the due plan (``bench_plan``)."""

    def __init__(self, n: int, due: int, now: datetime = b.NOW) -> None:
        self.n, self.due, self.now = n, due, now
        self.rules = []
        for rule_dict in rule_pool():
            rule = parse_rule(rule_dict)
            self.rules.append({
                "text": json.dumps(rule_dict, separators=(", ", ": ")),
                "zone": rule.timezone, "due": [_iso(t) for t in b.last_occurrences(rule, now, 3)],
                "future": [_iso(t) for t in b.future_occurrences(rule, now, 40)]})
        self.table = rule_weights(len(self.rules))
        self.workspaces = max(10, n // 100)
        self.ws_ids = [f"00000000-0000-4000-8000-{i:012x}" for i in range(self.workspaces)]
        self.days = [_iso(now - timedelta(days=d, hours=d % 24)) for d in range(400)]
        # accounting-active rows: seq % 100 < 85; the due ones are spread evenly among them
        self.accounting_active = sum(min(85, max(0, n - base)) for base in range(0, n, 100))
        if due > self.accounting_active:
            raise ValueError(f"{due} due schedules exceed the {self.accounting_active} active accounting ones")

    def chunks(self, size: int = 50_000):
        """Yields (COPY text of schedules, COPY text of bench_plan) for ``size`` rows at a time."""
        table, nt, rules, ws_ids, nws, days = self.table, len(self.table), self.rules, self.ws_ids, \
            self.workspaces, self.days
        a_total, due = self.accounting_active, self.due
        active_index = 0
        planned = 0
        for start in range(0, self.n, size):
            count = min(size, self.n - start)
            hexes = os.urandom(48 * count).hex()
            rows, plan = [], []
            for k in range(count):
                seq = start + k
                h = hexes[96 * k:96 * k + 96]
                sid = f"{h[0:12]}4{h[13:16]}8{h[17:32]}"
                subject = f"{h[32:44]}4{h[45:48]}9{h[49:64]}"
                last_run = f"{h[64:76]}7{h[77:80]}a{h[81:96]}"
                cls = seq % 100
                rule = rules[table[(seq * 2654435761) % nt]]
                wsi = (seq * 40503) % nws
                ws = ws_ids[wsi]
                user = f"user-{wsi * 7 + seq % 7}@example.com"
                created = days[seq % 400]
                version = 1 + (seq % 13 == 0) + (seq % 91 == 0)
                failures = 1 + seq % 2 if seq % 33 == 0 else 0
                outcome = "failed" if failures else "succeeded"
                has_run = seq % 10 != 0
                if cls < 95:
                    owner, kind = (OWNER, ACCOUNTING_KINDS[seq % 4]) if cls < 85 else (QUERIES_OWNER, QUERIES_KIND)
                    status, reason, deleted = "active", "\\N", "\\N"
                    next_due = rule["future"][(seq // 7) % 40]
                    if cls < 85:
                        if (active_index + 1) * due // a_total > active_index * due // a_total:
                            planned += 1
                            slot = b.due_slot(planned)
                            next_due = rule["due"][slot]
                            plan.append(f"{planned}\t{sid}\t{next_due}\t{rule['future'][0]}\n")
                        active_index += 1
                else:
                    owner, kind = OWNER, ACCOUNTING_KINDS[seq % 4]
                    next_due = "\\N"
                    if cls < 99:
                        status, reason, deleted = "paused", "paused_by_owner", "\\N"
                    else:
                        status, reason, deleted = "disabled", "deleted", created
                        has_run = False
                last = (f"{last_run}\t{outcome}\t{rule['due'][2]}" if has_run else "\\N\t\\N\t\\N")
                rows.append(f"{sid}\t{ws}\t{owner}\t{kind}\t{subject}\t{NAMES[kind]} {seq % 997}\t{rule['text']}\t"
                            f"{rule['zone']}\t{status}\t{reason}\t{next_due}\t{failures if has_run else 0}\t{last}\t"
                            f"{version}\t{user}\t{user}\t{created}\t{created}\t{deleted}\n")
            yield "".join(rows), "".join(plan)
        if planned != due:
            raise AssertionError(f"planned {planned} due schedules, expected {due}")


def _timed(label: str, steps: dict[str, float], call) -> Any:
    started = time.perf_counter()
    result = call()
    steps[label] = time.perf_counter() - started
    print(f"    {label}: {steps[label]:.1f} s (load {b.load_average():.1f})", flush=True)
    return result


def load(conn: psycopg.Connection, n: int, due: int) -> tuple[b.Dataset, dict[str, float]]:
    """Replace the schedules with ``n`` (see the module docstring) of which ``due`` are due,
    with COPY into the table stripped of its constraints and indexes, which are then
    built again as the migrations define them. Returns the :class:`_bench.Dataset` (its
    ``armed`` = ``due``: all due-capable schedules are due) and the seconds of each step."""
    steps: dict[str, float] = {}
    gen = _timed("rules (Python)", steps, lambda: Generator(n, due))
    fks = conn.execute("""SELECT conrelid::regclass::text AS tab, conname, pg_get_constraintdef(oid) AS def
                            FROM pg_constraint WHERE confrelid = 'schedules'::regclass AND contype = 'f'""").fetchall()
    indexes = conn.execute("""SELECT indexname, indexdef FROM pg_indexes
                               WHERE schemaname = 'public' AND tablename = 'schedules'
                                 AND indexname <> 'schedules_pkey'""").fetchall()
    conn.execute("SET maintenance_work_mem = '1GB'")

    def copy() -> None:
        with conn.transaction():
            conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, bench_plan, "
                         "bench_rules CASCADE")
            for fk in fks:
                conn.execute(f'ALTER TABLE {fk["tab"]} DROP CONSTRAINT "{fk["conname"]}"')
            for index in indexes:
                conn.execute(f'DROP INDEX "{index["indexname"]}"')
            conn.execute("ALTER TABLE schedules DROP CONSTRAINT schedules_pkey")
            with conn.cursor() as cur:
                with cur.copy(f"COPY schedules ({', '.join(COLUMNS)}) FROM STDIN (FREEZE)") as sched:
                    plans = []
                    for rows, plan in gen.chunks():
                        sched.write(rows)
                        plans.append(plan)
                with cur.copy("COPY bench_plan (seq, id, due_at, future_at) FROM STDIN") as copy_plan:
                    for plan in plans:
                        copy_plan.write(plan)

    _timed("COPY (rows made in Python, sent and stored)", steps, copy)
    _timed("primary key", steps, lambda: conn.execute("ALTER TABLE schedules ADD CONSTRAINT schedules_pkey "
                                                      "PRIMARY KEY (id)"))
    for index in indexes:
        _timed(index["indexname"], steps, lambda i=index: conn.execute(i["indexdef"]))
    for fk in fks:
        _timed(f"FK {fk['conname']}", steps,
               lambda f=fk: conn.execute(f'ALTER TABLE {f["tab"]} ADD CONSTRAINT "{f["conname"]}" {f["def"]}'))
    _timed("VACUUM ANALYZE", steps, lambda: (conn.execute("VACUUM ANALYZE schedules"),
                                             conn.execute("VACUUM ANALYZE bench_plan")))
    _timed("CHECKPOINT", steps, lambda: conn.execute("CHECKPOINT"))
    conn.execute("RESET maintenance_work_mem")
    total = sum(steps.values())
    return b.Dataset(n=n, d_max=due, variant="ten-million", load_s=total, armed=due), steps


def sizes(conn: psycopg.Connection) -> list[list[Any]]:
    """[relation, rows (estimate), MiB] of the schedules table, its TOAST, each index, the total."""
    out = []
    table = conn.execute("""SELECT pg_relation_size('schedules') AS heap, reltuples::bigint AS rows,
                                   pg_indexes_size('schedules') AS indexes,
                                   pg_total_relation_size('schedules') AS total,
                                   coalesce(pg_relation_size(reltoastrelid), 0) AS toast
                              FROM pg_class WHERE oid = 'schedules'::regclass""").fetchone()
    out.append(["schedules (heap, fillfactor 70)", f"{table['rows']:,}", f"{table['heap'] / 2**20:,.1f}"])
    out.append(["schedules TOAST", "", f"{table['toast'] / 2**20:,.1f}"])
    for row in conn.execute("""SELECT c.relname, c.reltuples::bigint AS rows, pg_relation_size(c.oid) AS size
                                 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                                WHERE i.indrelid = 'schedules'::regclass ORDER BY c.relname"""):
        out.append([row["relname"], f"{row['rows']:,}", f"{row['size'] / 2**20:,.1f}"])
    out.append(["pg_indexes_size(schedules)", "", f"{table['indexes'] / 2**20:,.1f}"])
    out.append(["pg_total_relation_size(schedules)", "", f"{table['total'] / 2**20:,.1f}"])
    return out


def rearm(conn: psycopg.Connection, data: b.Dataset, d: int) -> None:
    """Make exactly the planned schedules ``1..d`` due (their planned instant; the other
    planned ones at their next occurrence), touching only the rows that differ, forget
    every run and event, VACUUM (which skips the index pass when few rows died) and
    CHECKPOINT: each repeat starts from the same state, cheaply at any N."""
    with conn.transaction():
        conn.execute("SET LOCAL enable_hashjoin = off")
        conn.execute("SET LOCAL enable_mergejoin = off")
        conn.execute(
            """UPDATE schedules AS s
                  SET next_due_at = t.target, status = 'active', pause_reason = NULL, consecutive_failures = 0,
                      last_run_id = NULL, last_outcome = NULL, last_run_at = NULL
                 FROM (SELECT id, CASE WHEN seq <= %(d)s THEN due_at ELSE future_at END AS target
                         FROM bench_plan) AS t
                WHERE s.id = t.id AND s.next_due_at IS DISTINCT FROM t.target""", {"d": d})
    conn.execute("TRUNCATE schedule_runs, schedule_events, schedule_notifications CASCADE")
    data.armed = d
    recurrence._compile_cached.cache_clear()
    conn.execute("VACUUM schedules")
    conn.execute("CHECKPOINT")


# ----------------------------------------------------------------------------- product wiring


def noop(ctx: RunContext) -> Succeeded:
    """The benchmark's work (every kind): nothing, so running it twice has no effect."""
    return Succeeded()


def registry() -> WorkKindRegistry:
    """The accounting kinds, registered as the product registers them (transactional, no
    staleness bound), each doing nothing."""
    kinds = WorkKindRegistry()
    for kind in ACCOUNTING_KINDS:
        kinds.register(OWNER, kind, noop, staleness=None, description="benchmark no-op")
    return kinds


class QueueSink:
    """A RunPublisher onto an in-memory queue standing in for SQS: chunks of
    :data:`SQS_CHUNK` records (SendMessageBatch's), each record shaped as the Lambda event
    carries it; accepts every message."""

    def __init__(self, q, partition: int) -> None:
        self.q, self.partition, self.count = q, partition, 0

    def publish(self, messages: list[RunMessage]) -> set[UUID]:
        for start in range(0, len(messages), SQS_CHUNK):
            self.q.put([{"messageId": f"p{self.partition}-{self.count + i}", "body": m.model_dump_json(),
                         "attributes": {"ApproximateReceiveCount": "1"}}
                        for i, m in enumerate(messages[start:start + SQS_CHUNK], start)])
        self.count += len(messages)
        return set()


# ----------------------------------------------------------------------------- claim: 10 M against 10 k


def claim_batch_pass(conn, kinds: WorkKindRegistry, claim_limit: int):
    """One real claim batch: a dispatch pass whose budget ends after its first batch."""
    sink = b.CountingSink()
    report = dispatch(conn, b.dispatch_settings(owner=OWNER, claim_limit=claim_limit, time_budget_s=0.0), now=b.NOW,
                      publisher=sink, registry=kinds, metrics=MetricsRecorder(), partition=WHOLE_OWNER)
    if report.claimed != claim_limit or sink.count != claim_limit:
        raise AssertionError(f"claimed {report.claimed}, published {sink.count}; expected {claim_limit}")
    return report


def claim_part(sides: list[tuple[str, psycopg.Connection, b.Dataset]], repeats: int, claim_limit: int,
               kinds: WorkKindRegistry) -> dict[str, dict[str, Any]]:
    """The claim statement and one real claim batch on each side, in alternation."""
    out: dict[str, dict[str, Any]] = {label: {"plans": [], "batch_s": [], "rss_kib": [], "server_ms": []}
                                      for label, _, _ in sides}
    for _, conn, _ in sides:
        b.claim_plan(conn, WHOLE_OWNER, claim_limit, owner=OWNER)  # warm the cache as a minutely pass finds it
    for _ in range(repeats):
        for label, conn, _ in sides:
            out[label]["plans"].append(b.claim_plan(conn, WHOLE_OWNER, claim_limit, owner=OWNER))
    for _ in range(repeats):
        for label, conn, data in sides:
            rearm(conn, data, data.d_max)
            b.claim_plan(conn, WHOLE_OWNER, claim_limit, owner=OWNER)  # the same warm start
            m = b.measure(lambda c=conn: claim_batch_pass(c, kinds, claim_limit),
                          backend_pids=(conn.info.backend_pid,))
            out[label]["batch_s"].append(m.seconds)
            out[label]["rss_kib"].append(m.rss_growth_kib)
            out[label]["server_ms"].append(1000 * (m.server_cpu_s or 0.0))
    for _label, conn, data in sides:
        rearm(conn, data, data.d_max)
    return out


# ----------------------------------------------------------------------------- end to end


def count_round_trips(conn: psycopg.Connection) -> dict[str, int]:
    """Count ``conn``'s round trips to the server from now on: psycopg runs every statement,
    commit and pipeline sync as one generator it waits on (``Connection.wait``), so the
    waits are the exchanges a network hop (RDS Proxy, then Aurora) pays for. Returns the
    counter (``{"round_trips": n}``), updated in place."""
    counter = {"round_trips": 0}
    wait = conn.wait

    def counting_wait(gen, *args, **kwargs):
        counter["round_trips"] += 1
        return wait(gen, *args, **kwargs)

    conn.wait = counting_wait  # type: ignore[method-assign]
    return counter


def _dispatcher_main(url: str, index: int, count: int, q, results, barrier, tick_s: float, max_ticks: int) -> None:
    """One dispatcher partition: a pass at each tick (``tick_s`` apart, the rule's minute)
    until a pass claims nothing; reports its passes, CPU, peak RSS growth and backend CPU."""
    conn = b.bench_connect(url)
    kinds = registry()
    partition = Partition(index, count)
    sink = QueueSink(q, index)
    pid = conn.info.backend_pid
    trips = count_round_trips(conn)
    passes = []
    barrier.wait()
    origin = time.monotonic()

    def passes_until_idle() -> None:
        for tick in range(max_ticks):
            wait = origin + tick * tick_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            started = time.monotonic()
            report = dispatch(conn, DispatchSettings.of(PIPELINE), now=b.NOW + timedelta(seconds=tick * tick_s),
                              publisher=sink, registry=kinds, metrics=MetricsRecorder(), partition=partition)
            passes.append({"tick": tick, "start": started - origin, "end": time.monotonic() - origin,
                           "claimed": report.claimed, "batches": report.batches})
            if report.elapsed_s < PIPELINE.dispatcher_time_budget_s:
                return  # the pass ended before its budget: nothing more is due in this partition

    m = b.measure(passes_until_idle, backend_pids=(pid,))
    conn.close()
    results.put(("dispatcher", index, {"passes": passes, "rss_kib": m.rss_growth_kib, "client_cpu_s": m.client_cpu_s,
                                       "backend_cpu_s": m.server_cpu_s, "published": sink.count,
                                       "origin": origin, "round_trips": trips["round_trips"]}))


def _consumer_main(url: str, index: int, q, results, barrier, batch_size: int) -> None:
    """One consumer: receive up to ``batch_size`` records (chunks already on the queue;
    SQS's batching window would wait up to a second for more), parse them as
    ``consume_runs`` does, ``process_batch``, acknowledge."""
    conn = b.bench_connect(url)
    kinds = registry()
    settings = ConsumerSettings.from_pipeline(PIPELINE)
    metrics = MetricsRecorder()
    trips = count_round_trips(conn)
    barrier.wait()
    origin = time.monotonic()
    cpu0 = time.process_time()
    settled = batches = 0
    done = False
    while not done:
        records = q.get()
        if records is None:
            break
        while len(records) < batch_size:
            try:
                more = q.get_nowait()
            except queue_mod.Empty:
                break
            if more is None:
                done = True
                break
            records.extend(more)
        deliveries = [Delivery(r["messageId"], RunMessage.model_validate_json(r["body"]),
                               int(r["attributes"].get("ApproximateReceiveCount") or 1)) for r in records]
        now = b.NOW + timedelta(seconds=time.monotonic() - origin)
        outcome = process_batch(conn, deliveries, now=now, registry=kinds, settings=settings, services={},
                                metrics=metrics)
        bad = [r for r in outcome if not isinstance(r, ProcessResult) or r.action != "settled"]
        if bad:
            raise AssertionError(f"consumer {index}: {bad[:3]!r}")
        settled += len(outcome)
        batches += 1
        results.put(("ack", index, len(outcome), time.monotonic() - origin))
    round_trips = trips["round_trips"]
    backend = b.backend_cpu_s(conn.info.backend_pid)
    conn.close()
    results.put(("consumer", index, {"settled": settled, "batches": batches, "round_trips": round_trips,
                                     "client_cpu_s": time.process_time() - cpu0, "backend_cpu_s": backend,
                                     "rss_kib": (b._status_kib("VmHWM") or 0)}))


def e2e_part(url: str, conn: psycopg.Connection, data: b.Dataset, due: int, partitions: int, consumers: int,
             tick_s: float, deadline_s: float) -> dict[str, Any]:
    """``due`` schedules due, then the dispatcher partitions and consumers at once."""
    rearm(conn, data, due)
    context = multiprocessing.get_context("spawn")
    q, results = context.Queue(), context.Queue()
    barrier = context.Barrier(partitions + consumers + 1)
    max_ticks = max(2, int(deadline_s // tick_s) + 1)
    dispatchers = [context.Process(target=_dispatcher_main, args=(url, i, partitions, q, results, barrier, tick_s,
                                                                  max_ticks)) for i in range(partitions)]
    workers = [context.Process(target=_consumer_main, args=(url, i, q, results, barrier,
                                                            PIPELINE.consumer.batch_size)) for i in range(consumers)]
    for p in dispatchers + workers:
        p.start()
    postmaster = b.postmaster_pid(conn)
    wal0, cpu0, load0 = b.wal_stats(conn), b.server_cpu_s(postmaster), b.load_average()
    barrier.wait()
    started = time.monotonic()
    acked, last_ack, finals = 0, 0.0, {"dispatcher": {}, "consumer": {}}
    at_60 = None
    while acked < due or len(finals["dispatcher"]) < partitions:
        remaining = started + deadline_s + 120 - time.monotonic()
        if remaining <= 0:
            break
        try:
            msg = results.get(timeout=remaining)
        except queue_mod.Empty:
            break
        if msg[0] == "ack":
            acked += msg[2]
            last_ack = time.monotonic() - started
            if last_ack <= 60.0:
                at_60 = acked
        else:
            finals[msg[0]][msg[1]] = msg[2]
    wall = time.monotonic() - started
    for _ in workers:
        q.put(None)
    while len(finals["consumer"]) < consumers:
        msg = results.get(timeout=120)
        if msg[0] == "ack":
            acked += msg[2]
            last_ack = time.monotonic() - started
        else:
            finals[msg[0]][msg[1]] = msg[2]
    for p in dispatchers + workers:
        p.join(60)
    time.sleep(1.5)  # backends report their WAL counters within a second of their last transaction
    wal1, cpu1, load1 = b.wal_stats(conn), b.server_cpu_s(postmaster), b.load_average()
    check = conn.execute(
        """SELECT count(*) FILTER (WHERE state = 'succeeded') AS settled, count(*) AS runs,
                  count(DISTINCT schedule_id) AS schedules, count(*) FILTER (WHERE attempts <> 1) AS reattempted
             FROM schedule_runs""").fetchone()
    advanced = conn.execute(
        """SELECT count(*) AS n FROM bench_plan AS p JOIN schedules AS s ON s.id = p.id
            WHERE p.seq <= %s AND s.next_due_at > %s AND s.last_outcome = 'succeeded'""", (due, b.NOW)).fetchone()["n"]
    return {"due": due, "partitions": partitions, "consumers": consumers, "acked": acked, "wall_s": wall,
            "last_ack_s": last_ack, "within_60": at_60 if at_60 is not None else 0, "finals": finals,
            "wal": {k: wal1[k] - wal0[k] for k in wal0},
            "server_cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0, "load": (load0, load1),
            "check": dict(check), "advanced": advanced}


# ----------------------------------------------------------------------------- report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000_000, help="N, the schedules loaded")
    parser.add_argument("--small", type=int, default=10_000, help="the claim's comparison size")
    parser.add_argument("--due-fraction", type=float, default=0.02, help="share of N due (accounting)")
    parser.add_argument("--e2e-due", type=int, default=100_000, help="due schedules of the end-to-end part")
    parser.add_argument("--partitions", type=int, default=4, help="dispatcher partitions (K)")
    parser.add_argument("--consumers", type=int, default=PIPELINE.consumer.max_concurrency)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tick", type=float, default=60.0, help="seconds between a partition's passes")
    parser.add_argument("--parts", default="claim,e2e")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    claim_limit = PIPELINE.claim_batch

    print(f"revision {b.git_revision()}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; "
          f"load {os.getloadavg()}", flush=True)
    small_url = b.open_database("bench_tenm_small")
    big_url = b.open_database("bench_tenm")
    small_conn, big_conn = b.bench_connect(small_url), b.bench_connect(big_url)
    print(f"machine: {b.machine(big_conn)}", flush=True)
    loaded = {}
    for label, conn, n in (("small", small_conn, args.small), ("big", big_conn, args.schedules)):
        due = max(claim_limit, round(n * args.due_fraction))
        print(f"loading {n:,} schedules ({due:,} due) into {label}", flush=True)
        wal0 = b.wal_stats(conn)
        data, steps = load(conn, n, due)
        wal = b.wal_stats(conn)["lsn_bytes"] - wal0["lsn_bytes"]
        loaded[label] = (conn, data, steps, sizes(conn), wal)
        print(f"  loaded in {data.load_s:.1f} s ({n / data.load_s:,.0f} schedules/s overall), WAL {wal / 2**20:,.0f} "
              f"MiB, load {b.load_average():.1f}", flush=True)
    kinds = registry()
    big_conn_, big_data = loaded["big"][0], loaded["big"][1]
    small_conn_, small_data = loaded["small"][0], loaded["small"][1]

    for label in ("small", "big"):
        _, data, steps, size_rows, wal = loaded[label]
        print(f"\nload of {data.n:,} schedules ({data.d_max:,} due): {data.load_s:.1f} s, WAL {wal / 2**20:,.0f} MiB")
        print(b.table(["step", "seconds"], [[k, f"{v:.1f}"] for k, v in steps.items()]))
        print(b.table(["relation", "rows", "MiB"], size_rows))

    summary = []
    if "claim" in parts:
        out = claim_part([("small", small_conn_, small_data), ("big", big_conn_, big_data)], args.repeats,
                         claim_limit, kinds)
        rows = []
        for label, data in (("small", small_data), ("big", big_data)):
            o = out[label]
            plans = o["plans"]
            rows.append([f"{data.n:,}", f"{data.d_max:,}", f"{statistics.median(p.ms for p in plans):.2f}",
                         f"{min(p.ms for p in plans):.2f}-{max(p.ms for p in plans):.2f}",
                         f"{statistics.median(p.hit for p in plans):,.0f}",
                         f"{statistics.median(p.read for p in plans):,.0f}", plans[-1].rows,
                         f"{1000 * statistics.median(o['batch_s']):.1f}",
                         f"{1000 * min(o['batch_s']):.1f}-{1000 * max(o['batch_s']):.1f}",
                         f"{statistics.median(o['server_ms']):.1f}", f"{max(o['rss_kib']):,}"])
        print(f"\nclaim of {claim_limit} (median of {args.repeats}, alternating sides; load {b.load_average():.1f})")
        print(b.table(["schedules", "due", "claim statement ms", "min-max ms", "shared hit", "shared read", "rows",
                       "claim batch ms (claim, record, advance, publish)", "min-max ms", "batch backend CPU ms",
                       "dispatcher peak RSS growth KiB"], rows))
        ms_small = statistics.median(p.ms for p in out["small"]["plans"])
        ms_big = statistics.median(p.ms for p in out["big"]["plans"])
        bs_small, bs_big = statistics.median(out["small"]["batch_s"]), statistics.median(out["big"]["batch_s"])
        for what, small, big in (("claim statement", ms_small, ms_big), ("claim batch", bs_small, bs_big)):
            ratio = big / small
            summary.append(f"{what} of {claim_limit} at {big_data.n:,} / at {small_data.n:,}: {ratio:.2f} "
                           f"(target <= 1.20: {'met' if ratio <= 1.2 else 'MISSED'})")
    if "e2e" in parts:
        due = min(args.e2e_due, big_data.d_max)
        r = e2e_part(big_url, big_conn_, big_data, due, args.partitions, args.consumers, args.tick,
                     deadline_s=max(60.0, args.tick))
        d, c = r["finals"]["dispatcher"], r["finals"]["consumer"]
        print(f"\nend to end: {due:,} due among {big_data.n:,}; K={args.partitions} dispatcher partitions, "
              f"{args.consumers} consumers (batch {PIPELINE.consumer.batch_size}); load {r['load'][0]:.1f} -> "
              f"{r['load'][1]:.1f}")
        rows = []
        for i in sorted(d):
            for p in d[i]["passes"]:
                rows.append([f"dispatcher {i}", p["tick"], f"{p['start']:.2f}", f"{p['end']:.2f}", f"{p['claimed']:,}",
                             p["batches"], "", "", "", ""])
            batches = sum(p["batches"] for p in d[i]["passes"])
            rows.append([f"dispatcher {i} (all passes)", "", "", "", f"{d[i]['published']:,}", "",
                         f"{d[i]['round_trips']:,} ({d[i]['round_trips'] / max(1, batches):.1f} per claim batch)",
                         f"{d[i]['client_cpu_s']:.2f}", f"{d[i]['backend_cpu_s'] or 0:.2f}", f"{d[i]['rss_kib']:,}"])
        for i in sorted(c):
            rows.append([f"consumer {i}", "", "", "", f"{c[i]['settled']:,}", c[i]["batches"],
                         f"{c[i]['round_trips']:,} ({c[i]['round_trips'] / max(1, c[i]['batches']):.1f} per batch)",
                         f"{c[i]['client_cpu_s']:.2f}", f"{c[i]['backend_cpu_s'] or 0:.2f}",
                         f"{c[i]['rss_kib']:,} (peak RSS)"])
        print(b.table(["process", "pass (minute)", "start s", "end s", "claimed / settled", "batches", "round trips",
                       "client CPU s", "backend CPU s", "peak RSS growth KiB"], rows))
        wal, cpu, n_runs = r["wal"], r["server_cpu_s"], max(1, r["acked"])
        client = sum(x["client_cpu_s"] for x in d.values()) + sum(x["client_cpu_s"] for x in c.values())
        rate = r["acked"] / r["last_ack_s"] if r["last_ack_s"] else 0.0
        print(f"settled {r['acked']:,} of {due:,}; the last at {r['last_ack_s']:.1f} s: {rate:,.0f} runs/s; "
              f"{r['within_60']:,} settled within 60 s")
        print(f"check: {r['check']}; schedules advanced with their outcome: {r['advanced']:,}")
        print(f"server CPU {cpu:.1f} s = {1e6 * cpu / n_runs:.0f} us per run (every postgres process); client CPU "
              f"{client:.1f} s = {1e6 * client / n_runs:.0f} us per run; WAL {wal['lsn_bytes'] / 2**20:,.0f} MiB = "
              f"{wal['lsn_bytes'] / n_runs:,.0f} B per run (pg_stat_wal: {wal['wal_bytes'] / n_runs:,.0f} B, "
              f"{wal['wal_records'] / n_runs:.1f} records, {wal['wal_fpi'] / n_runs:.2f} full-page images per run)")
        trips = sum(x["round_trips"] for x in d.values()) + sum(x["round_trips"] for x in c.values())
        print(f"round trips {trips:,} = {trips / n_runs:.3f} per run (dispatchers "
              f"{sum(x['round_trips'] for x in d.values()) / n_runs:.3f}, consumers "
              f"{sum(x['round_trips'] for x in c.values()) / n_runs:.3f})")
        ok = r["acked"] == due and r["within_60"] == due and r["check"]["settled"] == due \
            and r["check"]["schedules"] == due and r["check"]["reattempted"] == 0 and r["advanced"] == due
        summary.append(f"{due:,} due settled end to end within 60 s: {r['within_60']:,} "
                       f"({'met' if ok else 'MISSED'}); {rate:,.0f} runs/s")
        peak = max(x["rss_kib"] for x in d.values())
        summary.append(f"dispatcher peak RSS growth over its passes: {peak / 1024:.1f} MiB per partition")
    print("\n".join(summary))
    small_conn.close()
    big_conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
