"""Shared helpers of the dispatcher and consumer benchmarks: the database, the rule mix,
fast loading of schedules with SQL, re-arming the due rows between repeats, and the
time and memory measurements.

Not a product module: it touches only the benchmark database (``bench`` by default) on
the server ``timekeeper.local.embedded.server_url`` returns (``DATABASE_URL`` wins).
"""

from __future__ import annotations

import dataclasses
import gc
import io
import itertools
import os
import platform
import resource
import statistics
import subprocess
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db.connection import connect
from timekeeper.db.migrate import apply_migrations
from timekeeper.local import embedded
from timekeeper.schedules import recurrence
from timekeeper.schedules.dispatcher import SQL as DISPATCHER_SQL
from timekeeper.schedules.dispatcher import WHOLE_OWNER, DispatchSettings, Partition
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.recurrence import Recurrence, parse_rule
from timekeeper.topology import ACCOUNTING

UTC = timezone.utc
OWNER = "accounting"
WORK_KIND = "batch.roll"
#: The simulated clock of every pass: a Monday in the week London and Berlin spring forward
#: (28 March 2027), so some backlog iterations cross a DST transition (the slow path).
NOW = datetime(2027, 3, 29, 9, 7, 30, tzinfo=UTC)
WORKSPACES = 1000
DATA_DIR = Path(".timekeeper/bench-pg")

#: The shared rule mix: cron and calendar rules over several zones, including the
#: last day of the month, a 30-minute DST zone (Lord Howe) and a non-DST zone (Kolkata).
SHARED_RULES: list[dict[str, Any]] = [
    {"cron": "0 9 * * 1-5", "timezone": "America/New_York"},
    {"cron": "*/15 * * * *", "timezone": "UTC"},
    {"cron": "30 2 * * *", "timezone": "Europe/London"},
    {"cron": "0 0 L * *", "timezone": "Asia/Kolkata"},
    {"cron": "15 8 1 * *", "timezone": "Australia/Lord_Howe"},
    {"cron": "0 */2 * * *", "timezone": "Asia/Tokyo"},
    {"cron": "45 6 * * 1", "timezone": "Europe/Berlin"},
    {"cron": "0 18 * * 1-5", "timezone": "America/Sao_Paulo"},
    {"calendar": {"frequency": "daily", "times": ["02:30"]}, "timezone": "Europe/London"},
    {"calendar": {"frequency": "daily", "times": ["09:00", "17:30"]}, "timezone": "America/Los_Angeles"},
    {"calendar": {"frequency": "weekly", "weekdays": ["MO", "WE", "FR"], "times": ["07:45"]},
     "timezone": "Europe/Berlin"},
    {"calendar": {"frequency": "monthly", "month_day": "last", "times": ["23:00"]}, "timezone": "Asia/Kolkata"},
    {"calendar": {"frequency": "monthly", "nth_weekday": [2, "TU"], "times": ["10:00"]},
     "timezone": "Australia/Lord_Howe"},
    {"calendar": {"frequency": "monthly", "month_day": 31, "times": ["06:00"]}, "timezone": "America/Chicago"},
    {"calendar": {"frequency": "daily", "interval": 2, "times": ["12:00", "18:00"]},
     "timezone": "Australia/Sydney"},
    {"calendar": {"frequency": "yearly", "month": 3, "month_day": "last", "times": ["08:00"]},
     "timezone": "Europe/Paris"},
]

#: Zones of the generated one-of-a-kind rules (the "unique" worst case).
UNIQUE_ZONES = ("America/New_York", "Europe/London", "Asia/Kolkata", "Australia/Lord_Howe", "Asia/Tokyo",
                "Europe/Berlin", "America/Los_Angeles", "Australia/Sydney")
#: Every non-empty subset of the cron weekdays 0-6, as a cron list (127 of them).
_DOWS = tuple(",".join(map(str, combo)) for k in range(1, 8) for combo in itertools.combinations(range(7), k))


def dispatch_settings(*, owner: str = OWNER, claim_limit: int | None = None,
                      time_budget_s: float | None = None) -> DispatchSettings:
    """The accounting pipeline's dispatcher settings for ``owner``, with the claim limit and
    the time budget (seconds) a benchmark chooses (None: the pipeline's)."""
    settings = DispatchSettings.of(ACCOUNTING)
    return dataclasses.replace(
        settings, owner=owner, claim_limit=settings.claim_limit if claim_limit is None else claim_limit,
        time_budget_s=settings.time_budget_s if time_budget_s is None else time_budget_s)


def due_slot(seq: int) -> int:
    """Which of a rule's last three occurrences schedule ``seq`` is due at: 80 % the
    latest (on time), 10 % the one before (one occurrence of backlog), 10 % the one
    before that (two). Independent of the shared rule (``seq % 16``)."""
    r = (seq // len(SHARED_RULES)) % 10
    return 0 if r < 8 else (1 if r == 8 else 2)


def unique_rule(i: int) -> dict[str, Any]:
    """The ``i``-th of > 1.2 million pairwise different rules (distinct JSON text), cycling
    through four forms: cron on a set of weekdays, cron on a day of the month, calendar
    daily, calendar weekly or last-day-of-month (x local time of day x zone x variant)."""
    form, k = i % 4, i // 4
    minute, k = k % 1440, k // 1440
    zone, variant = UNIQUE_ZONES[k % len(UNIQUE_ZONES)], k // len(UNIQUE_ZONES)
    hh, mm = divmod(minute, 60)
    if form == 0:
        return {"cron": f"{mm} {hh} * * {_DOWS[variant % len(_DOWS)]}", "timezone": zone}
    if form == 1:
        return {"cron": f"{mm} {hh} {1 + variant % 28} * *", "timezone": zone}
    times = [f"{hh:02d}:{mm:02d}"]
    if form == 2:
        calendar: dict[str, Any] = {"frequency": "daily", "times": times}
        start = date(2020, 1, 1) + timedelta(days=variant)
    elif variant % 2 == 0:
        calendar = {"frequency": "weekly", "weekdays": ["MO", "TH"], "times": times}
        start = date(2020, 1, 1) + timedelta(days=variant // 2)
    else:
        calendar = {"frequency": "monthly", "month_day": "last", "times": times}
        start = date(2020, 1, 1) + timedelta(days=variant // 2)
    calendar["start_date"] = start.isoformat()
    return {"calendar": calendar, "timezone": zone}


def last_occurrences(rule: Recurrence, now: datetime, k: int) -> list[datetime]:
    """The last ``k`` occurrence instants of ``rule`` at or before ``now``, newest first."""
    for days in (1, 8, 40, 120, 800, 3000):
        window: deque[datetime] = deque(maxlen=k)
        for occurrence in rule.occurrences_after(now - timedelta(days=days)):
            if occurrence.at > now:
                break
            window.append(occurrence.at)
        if len(window) == k:
            return list(reversed(window))
    raise ValueError(f"{rule!r} has fewer than {k} occurrences before {now}")


def future_occurrences(rule: Recurrence, now: datetime, k: int) -> list[datetime]:
    """The first ``k`` occurrence instants of ``rule`` after ``now``."""
    return [o.at for o in itertools.islice(rule.occurrences_after(now), k)]


# ----------------------------------------------------------------------------- database


def open_database(name: str = "bench") -> str:
    """(Re)create database ``name`` on the benchmark server, migrate it, return its URL."""
    url = embedded.create_database(embedded.server_url(DATA_DIR), name)
    with psycopg.connect(url) as conn:
        apply_migrations(conn)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("""CREATE UNLOGGED TABLE bench_plan (
                            seq integer PRIMARY KEY, id uuid NOT NULL,
                            due_at timestamptz, future_at timestamptz NOT NULL)""")
        conn.execute("""CREATE UNLOGGED TABLE bench_rules (
                            idx integer PRIMARY KEY, recurrence jsonb NOT NULL, timezone text NOT NULL,
                            due timestamptz[] NOT NULL, future timestamptz[] NOT NULL)""")
    return url


@dataclass
class Dataset:
    """What :func:`load_schedules` loaded: ``n`` schedules, of which the first ``d_max``
    (by ``seq``) can be armed due; ``variant`` is ``shared``, ``unique`` or ``history``;
    ``history`` finished runs of earlier days are kept in ``schedule_runs``."""

    n: int
    d_max: int
    variant: str
    load_s: float
    history: int = 0
    armed: int = 0


def load_schedules(conn: psycopg.Connection, *, n: int, d_max: int, variant: str = "shared",
                   history: int = 0, now: datetime = NOW) -> Dataset:
    """Replace the schedules with ``n`` active ones (none due yet; see :func:`arm`).

    ``shared``: every schedule uses one of the 16 :data:`SHARED_RULES` (``seq % 16``); its
    due instant is one of the rule's last three real occurrences (:func:`due_slot`) and
    its future instant one of the rule's next 40 occurrences.
    ``unique``: as ``shared``, except that schedules ``1..d_max`` each have their own rule
    (:func:`unique_rule`), so no two due schedules share a rule text or a computation.
    ``history``: that many finished (succeeded) runs of earlier days, spread over the
    schedules, as a production ``schedule_runs`` table accumulates them.
    Loading is ``INSERT ... SELECT`` from ``generate_series`` (plus ``COPY`` of the unique
    rules), then ``VACUUM ANALYZE``.
    """
    started = time.perf_counter()
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, bench_plan, "
                 "bench_rules CASCADE")
    with conn.cursor() as cur:
        for idx, rule_dict in enumerate(SHARED_RULES):
            rule = parse_rule(rule_dict)
            cur.execute("INSERT INTO bench_rules VALUES (%s, %s, %s, %s, %s)",
                        (idx, Jsonb(rule_dict), rule.timezone, last_occurrences(rule, now, 3),
                         future_occurrences(rule, now, 40)))
    nrules = len(SHARED_RULES)
    with conn.transaction():
        conn.execute(
            """INSERT INTO bench_plan (seq, id, due_at, future_at)
               SELECT g, gen_random_uuid(),
                      CASE WHEN g <= %(d_max)s THEN r.due[1 + CASE WHEN (g / %(nrules)s) %% 10 < 8 THEN 0
                                                                WHEN (g / %(nrules)s) %% 10 = 8 THEN 1
                                                                ELSE 2 END] END,
                      r.future[1 + (g / %(nrules)s) %% 40]
                 FROM generate_series(1, %(n)s) AS g
                 JOIN bench_rules AS r ON r.idx = g %% %(nrules)s""",
            {"n": n, "d_max": d_max, "nrules": nrules})
        if variant == "unique":
            conn.execute("CREATE TEMP TABLE bench_unique (seq integer PRIMARY KEY, recurrence jsonb, "
                         "timezone text, due_at timestamptz, future_at timestamptz) ON COMMIT DROP")
            with conn.cursor().copy("COPY bench_unique FROM STDIN") as copy:
                for seq in range(1, d_max + 1):
                    rule_dict = unique_rule(seq)
                    rule = parse_rule(rule_dict)
                    due = last_occurrences(rule, now, due_slot(seq) + 1)[-1]
                    copy.write_row((seq, Jsonb(rule_dict), rule.timezone, due, rule.next_after(now).at))
            conn.execute("""UPDATE bench_plan AS p SET due_at = u.due_at, future_at = u.future_at
                              FROM bench_unique AS u WHERE u.seq = p.seq""")
        conn.execute(
            f"""INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status,
                                       next_due_at, definition_version, created_at, updated_at)
               SELECT p.id,
                      ('00000000-0000-4000-8000-' || lpad(to_hex(p.seq %% {WORKSPACES}), 12, '0'))::uuid,
                      %(owner)s, %(kind)s, {'COALESCE(u.recurrence, r.recurrence)' if variant == 'unique'
                                            else 'r.recurrence'},
                      {'COALESCE(u.timezone, r.timezone)' if variant == 'unique' else 'r.timezone'},
                      'active', p.future_at, 1, %(created)s, %(created)s
                 FROM bench_plan AS p
                 JOIN bench_rules AS r ON r.idx = p.seq %% {nrules}
                 {'LEFT JOIN bench_unique AS u ON u.seq = p.seq' if variant == 'unique' else ''}""",
            {"owner": OWNER, "kind": WORK_KIND, "created": now - timedelta(days=30)})
    if history:
        conn.execute(
            """INSERT INTO schedule_runs (
                   schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at, occurrence_local,
                   trigger, definition_version, state, queued_at, offered_at, offer_count, attempts,
                   started_at, finished_at, outcome_code, detail)
               SELECT s.id, s.workspace_id, s.owner, s.work_kind, 'history-' || g, h.at, h.at AT TIME ZONE 'UTC',
                      'scheduled', 1, 'succeeded', h.at, h.at, 1, 1, h.at, h.at + interval '2 seconds',
                      'succeeded', '{}'::jsonb
                 FROM generate_series(1, %(history)s) AS g
                 JOIN bench_plan AS p ON p.seq = 1 + g %% %(n)s
                 JOIN schedules AS s ON s.id = p.id
                 CROSS JOIN LATERAL (SELECT %(now)s::timestamptz - (1 + g / %(n)s) * interval '1 day' AS at) AS h""",
            {"history": history, "n": n, "now": now})
        conn.execute("VACUUM ANALYZE schedule_runs")
    conn.execute("VACUUM ANALYZE schedules")
    conn.execute("VACUUM ANALYZE bench_plan")
    conn.execute("CHECKPOINT")
    return Dataset(n=n, d_max=d_max, variant=variant, history=history, load_s=time.perf_counter() - started)


def arm(conn: psycopg.Connection, data: Dataset, d: int, *, keep_rules: bool = False) -> None:
    """Make exactly schedules ``1..d`` due again (their planned due instant; the rest at
    their future instant), forget the runs of earlier passes (keeping the loaded history)
    and all events, then VACUUM ANALYZE and CHECKPOINT
    so every repeat starts from the same clean state (as autovacuum would leave it).
    ``keep_rules``: keep the process's compiled rules (a warm dispatcher) instead of
    starting the pass with none."""
    if d > data.d_max:
        raise ValueError(f"d={d} exceeds the loaded d_max={data.d_max}")
    touched = max(d, data.armed)
    if data.history:
        conn.execute("DELETE FROM schedule_runs WHERE queued_at >= %s", (NOW - timedelta(hours=12),))
        conn.execute("TRUNCATE schedule_events, schedule_notifications")
    else:
        conn.execute("TRUNCATE schedule_runs, schedule_events, schedule_notifications CASCADE")
    conn.execute(
        """UPDATE schedules AS s
              SET next_due_at = CASE WHEN p.seq <= %(d)s THEN p.due_at ELSE p.future_at END,
                  status = 'active', pause_reason = NULL, consecutive_failures = 0,
                  last_run_id = NULL, last_outcome = NULL, last_run_at = NULL
             FROM bench_plan AS p
            WHERE p.seq <= %(touched)s AND s.id = p.id""",
        {"d": d, "touched": touched})
    data.armed = d
    # A cold rule cache unless asked: the loader compiled these rules in this process, and
    # the product keeps compiled rules per process (recurrence.COMPILED_RULES_KEPT).
    if not keep_rules:
        recurrence._compile_cached.cache_clear()
    conn.execute("VACUUM ANALYZE schedules")
    conn.execute("VACUUM ANALYZE schedule_runs")
    conn.execute("CHECKPOINT")


def distinct_pairs(conn: psycopg.Connection, now: datetime = NOW) -> tuple[int, int]:
    """(distinct rule texts, distinct (rule text, next_due_at) pairs) among the due schedules:
    the dispatcher's per-pass cache computes each pair once."""
    row = conn.execute(
        """SELECT count(DISTINCT recurrence::text) AS rules,
                  count(DISTINCT (recurrence::text, next_due_at)) AS pairs
             FROM schedules WHERE owner = %s AND status = 'active' AND next_due_at <= %s""",
        (OWNER, now)).fetchone()
    return row["rules"], row["pairs"]


def wal_lsn(conn: psycopg.Connection) -> str:
    return conn.execute("SELECT pg_current_wal_lsn()::text AS lsn").fetchone()["lsn"]


def wal_bytes_since(conn: psycopg.Connection, lsn: str) -> int:
    """WAL bytes written by the whole server since ``lsn`` (from :func:`wal_lsn`)."""
    return int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn) AS d", (lsn,)).fetchone()["d"])


@dataclass
class ClaimPlan:
    """One claim statement under EXPLAIN (ANALYZE, BUFFERS): its execution time (ms), the
    shared buffers it found in PostgreSQL's cache (``hit``) and read from the OS
    (``read``), and the rows it returned."""

    ms: float
    hit: int
    read: int
    rows: int

    @property
    def buffers(self) -> int:
        """Shared buffers touched (hit + read)."""
        return self.hit + self.read


def claim_plan(conn: psycopg.Connection, partition: Partition = WHOLE_OWNER, limit: int = 200, *,
               owner: str = OWNER, now: datetime = NOW) -> ClaimPlan:
    """The dispatcher's real claim statement (``claim_due_schedules``) for ``partition``,
    ``limit`` rows, under EXPLAIN (ANALYZE, BUFFERS) in a transaction that is rolled back
    (so every repeat claims the same rows)."""
    conn.execute("BEGIN")
    try:
        row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + DISPATCHER_SQL["claim_due_schedules"],
                           {"owner": owner, "now": now, "limit": limit, "slot_from": partition.slot_from,
                            "slot_to": partition.slot_to}, prepare=False).fetchone()
    finally:
        conn.execute("ROLLBACK")
    [plan] = next(iter(row.values()))
    top = plan["Plan"]
    return ClaimPlan(plan["Execution Time"], top["Shared Hit Blocks"], top["Shared Read Blocks"],
                     int(top["Actual Rows"]))


def bench_connect(url: str) -> psycopg.Connection:
    """The product's connection: autocommit, dict rows."""
    return connect(url, application_name="timekeeper-bench")


# ----------------------------------------------------------------------------- measuring


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process; False if unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def backend_cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) used so far by the server process ``pid`` (the
    connection's backend), read from /proc; None when it is not a local postgres process
    (e.g. ``DATABASE_URL`` names another host)."""
    if not pid:
        return None
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return None
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def _proc_stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def postmaster_pid(conn: psycopg.Connection) -> int | None:
    """The pid of the server's postmaster (the parent of ``conn``'s backend), or None when
    the server is not a local process."""
    pid = conn.info.backend_pid
    if backend_cpu_s(pid) is None:
        return None
    try:
        return int(_proc_stat(pid)[1])
    except (OSError, IndexError, ValueError):
        return None


def server_cpu_s(postmaster: int | None) -> float | None:
    """CPU seconds (user + system) the whole server has used so far: the postmaster, its
    live children (backends, checkpointer, WAL writer, autovacuum workers, ...) and the
    children that have exited (the postmaster's ``cutime`` + ``cstime``), from /proc. The
    difference of two readings is the server's CPU over the interval, backends that ended
    in it included. None when ``postmaster`` is None or unreadable."""
    if not postmaster:
        return None
    try:
        fields = _proc_stat(postmaster)
        total = sum(int(fields[i]) for i in (11, 12, 13, 14))
    except (OSError, IndexError, ValueError):
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _proc_stat(int(entry.name))
            if int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue  # the process ended while we looked: its time is in cutime now
    return total / _CLK_TCK


def wal_stats(conn: psycopg.Connection) -> dict[str, int]:
    """The server's ``pg_stat_wal`` counters (``wal_records``, ``wal_fpi``, ``wal_bytes``)
    and the current WAL position in bytes (``lsn_bytes``). Backends report their WAL
    counters at the end of their transactions (and at least once a second), so take the
    difference of two readings around work whose connections have finished."""
    row = conn.execute("""SELECT wal_records, wal_fpi, wal_bytes::bigint AS wal_bytes,
                                 pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS lsn_bytes
                            FROM pg_stat_wal""").fetchone()
    return {k: int(v) for k, v in row.items()}


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


@dataclass
class Measured:
    """One measured call: wall ``seconds``, its result, the peak RSS growth over the RSS
    before the call (KiB; from VmHWM after resetting it, else ``getrusage`` ru_maxrss),
    the tracemalloc peak of Python allocations (KiB; only when traced), the CPU seconds of
    this process and of the server backends named, and the 1-minute load average before."""

    seconds: float
    result: Any
    rss_growth_kib: int
    traced_peak_kib: int | None = None
    client_cpu_s: float = 0.0
    server_cpu_s: float | None = None
    load_before: float = 0.0


def measure(call: Callable[[], Any], *, trace: bool = False, backend_pids: tuple[int, ...] = ()) -> Measured:
    """Run ``call`` once and measure it. ``trace=True`` adds tracemalloc (which slows
    allocation-heavy code, so timed repeats run untraced and one extra run is traced)."""
    gc.collect()
    load = load_average()
    hwm_reset = _reset_peak_rss()
    rss_before = _status_kib("VmRSS") if hwm_reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if trace:
        tracemalloc.start()
        tracemalloc.reset_peak()
    server_before = [backend_cpu_s(pid) for pid in backend_pids]
    cpu_started = time.process_time()
    started = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - started
    client_cpu = time.process_time() - cpu_started
    server_after = [backend_cpu_s(pid) for pid in backend_pids]
    server_cpu = None
    if backend_pids and None not in server_before and None not in server_after:
        server_cpu = sum(a - b for a, b in zip(server_after, server_before, strict=True))
    traced = None
    if trace:
        traced = tracemalloc.get_traced_memory()[1] // 1024
        tracemalloc.stop()
    peak = _status_kib("VmHWM") if hwm_reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return Measured(seconds, result, max(0, (peak or 0) - (rss_before or 0)), traced, client_cpu, server_cpu, load)


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain, aligned text table (also valid Markdown)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = io.StringIO()
    for n, row in enumerate(cells):
        out.write("| " + " | ".join(c.rjust(w) if n else c.ljust(w) for c, w in zip(row, widths, strict=True))
                  + " |\n")
        if n == 0:
            out.write("|" + "|".join("-" * (w + 2) for w in widths) + "|\n")
    return out.getvalue()


def machine(conn: psycopg.Connection) -> str:
    """One line describing the machine and the server."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = (_meminfo_kib("MemTotal") or 0) / 1024 / 1024
    version = conn.execute("SHOW server_version").fetchone()["server_version"]
    settings = {r["name"]: r["setting"] for r in conn.execute(
        "SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync')")}
    return (f"{os.cpu_count()} CPUs ({model}), {mem_gib:.0f} GiB RAM, Python {platform.python_version()}, "
            f"PostgreSQL {version} (shared_buffers={int(settings['shared_buffers']) * 8 // 1024} MiB, "
            f"fsync={settings['fsync']}, synchronous_commit={settings['synchronous_commit']})")


def _meminfo_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def git_revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class CountingSink:
    """A RunPublisher that only counts."""

    def __init__(self) -> None:
        self.count = 0

    def publish(self, messages: list[RunMessage]) -> set[UUID]:
        self.count += len(messages)
        return set()
