"""Export throughput and memory: the real ``timekeeper.reporting.exports.run_export`` on
100,000 and 1,000,000 invoices, CSV and XLSX, and the plan of a filtered, sorted query.

    python benchmarks/exports.py                 # CSV 100k and 1M, XLSX 100k
    python benchmarks/exports.py --xlsx-1m       # also XLSX at 1M
    python benchmarks/exports.py --sizes 100000  # only one size

What runs: the database ``bench_exports`` (dropped and re-created) on the server
``timekeeper.local.embedded.server_url(Path(".timekeeper/bench-pg"))`` returns
(``DATABASE_URL`` wins), filled with COPY by ``timekeeper.local.platform_data.load_volume``
(1,000 members, the invoices and their payments); one workspace per size. The
files bucket is a moto server in its own process, so the uploaded bytes are not held by
the measured process. Each measurement runs in a fresh Python process: it imports
everything, connects, resets the kernel's peak-RSS counter (``/proc/self/clear_refs``),
then runs ``run_export`` (stream rows through a server-side cursor into a temporary file,
hash it, upload it with boto3's managed transfer, record the result) and reports the
peak RSS growth over its starting RSS (VmHWM - VmRSS) and ``ru_maxrss``. Rows/s is data
rows / the whole ``run_export`` wall time (upload included); the upload's own time is
shown beside it, and the CPU seconds of the measured process and of its database backend
(so a loaded machine's wait can be told from the work).

The export's query: every invoice column (the member's name through the join), sorted
by issue date. The plan: status = open, sorted by due date, limit 1000, on the 1M
workspace, ``EXPLAIN (ANALYZE, BUFFERS)``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import time
import uuid
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

import boto3  # noqa: E402
import psycopg  # noqa: E402

from benchmarks._bench import DATA_DIR, backend_cpu_s, git_revision, load_average, table  # noqa: E402
from timekeeper.db.connection import connect  # noqa: E402
from timekeeper.db.migrate import apply_migrations  # noqa: E402
from timekeeper.local import embedded  # noqa: E402

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)
BUCKET = "bench-files"
USER = "bench-user"
EXPORT_DEFINITION = {"entity": "invoices", "columns": ["id", "number", "member_id", "member_name", "issue_date",
                                                       "due_date", "amount_minor", "currency", "status", "voided_on"],
                     "sort": [{"column": "issue_date"}]}
PLAN_DEFINITION = {"entity": "invoices", "columns": ["number", "member_name", "due_date", "amount_minor", "status"],
                   "filters": [{"column": "status", "op": "eq", "value": "open"}],
                   "sort": [{"column": "due_date"}], "limit": 1000}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    """A moto server in its own process; returns it and its endpoint."""
    port = _free_port()
    process = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                process.terminate()
                raise RuntimeError("moto_server did not start") from None
            time.sleep(0.2)
    s3_client(endpoint).create_bucket(Bucket=BUCKET)
    return process, endpoint


def s3_client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                        aws_secret_access_key="bench")


class _AcceptAll:
    def publish(self, messages: list[Any]) -> set[uuid.UUID]:
        return set()


def reuse(sizes: list[int]) -> tuple[str, dict[int, tuple[uuid.UUID, uuid.UUID]], float]:
    """The workspaces and queries an earlier :func:`prepare` left in ``bench_exports``."""
    url = embedded.with_database(embedded.server_url(DATA_DIR), "bench_exports")
    made = {}
    with connect(url) as conn:
        for size in sizes:
            row = conn.execute("""SELECT w.id AS ws, q.id AS query FROM workspaces w
                                    JOIN saved_queries q ON q.workspace_id = w.id WHERE w.name = %s""",
                               (f"bench {size}",)).fetchone()
            made[size] = (row["ws"], row["query"])
    return url, made, 0.0


def prepare(sizes: list[int], seed: int) -> tuple[str, dict[int, tuple[uuid.UUID, uuid.UUID]], float]:
    """Create the database, one workspace per size with its invoices, the user and the
    saved query; returns the URL, size -> (workspace, query) and the fill seconds."""
    from timekeeper.local.platform_data import load_volume
    from timekeeper.platform.directory import add_member, create_workspace, upsert_user
    from timekeeper.reporting import store

    url = embedded.create_database(embedded.server_url(DATA_DIR), "bench_exports")
    with psycopg.connect(url) as raw:
        apply_migrations(raw)
    made: dict[int, tuple[uuid.UUID, uuid.UUID]] = {}
    started = time.monotonic()
    with connect(url) as conn:
        upsert_user(conn, user_id=USER, now=NOW)
        for size in sizes:
            with conn.transaction():
                ws = create_workspace(conn, name=f"bench {size}", timezone="UTC", currency="EUR", now=NOW).id
                add_member(conn, workspace_id=ws, user_id=USER, roles=["queries:read"], now=NOW)
            load_volume(conn, workspace_id=ws, invoices=size, seed=seed + size, members=1000, now=NOW)
            query, _ = store.create_query(conn, workspace_id=ws, name="all invoices", definition=EXPORT_DEFINITION,
                                          actor=USER, now=NOW)
            made[size] = (ws, query.id)
        conn.execute("VACUUM ANALYZE invoices")
        conn.execute("VACUUM ANALYZE members")
    return url, made, time.monotonic() - started


def explain(url: str, workspace_id: uuid.UUID) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the plan query compiled for ``workspace_id``."""
    from psycopg import sql

    from timekeeper.reporting.compiler import compile_query

    compiled = compile_query(PLAN_DEFINITION, workspace_id=workspace_id)
    with connect(url) as conn:
        text = psycopg.ClientCursor(conn).mogrify(compiled.statement, compiled.params)
        rows = conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + compiled.statement, compiled.params).fetchall()
    return text + "\n\n" + "\n".join(r["QUERY PLAN"] for r in rows)


# ----------------------------------------------------------------------------- the child


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class _TimedS3:
    """The S3 client, with the time spent in ``upload_file`` recorded."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.upload_s = 0.0

    def upload_file(self, **kwargs: Any) -> None:
        started = time.monotonic()
        try:
            self.client.upload_file(**kwargs)
        finally:
            self.upload_s += time.monotonic() - started


def child(args: argparse.Namespace) -> None:
    """One measured export in this fresh process; prints a JSON line."""
    import xlsxwriter  # noqa: F401 - imported before the baseline, as a warm Lambda would have it

    from timekeeper.reporting import exports as ex

    s3 = _TimedS3(s3_client(args.endpoint))
    conn = connect(args.url)
    workspace, export_id = uuid.UUID(args.workspace), uuid.UUID(args.export)
    conn.execute("SELECT 1")
    backend = conn.info.backend_pid
    server_cpu_before = backend_cpu_s(backend)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    rss_before = _status_kib("VmRSS")
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    done = ex.run_export(conn, s3, BUCKET, workspace_id=workspace, export_id=export_id, now=NOW)
    seconds = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    server_cpu_after = backend_cpu_s(backend)
    print(json.dumps({
        "client_cpu_s": usage.ru_utime + usage.ru_stime - cpu_before,
        "server_cpu_s": (server_cpu_after - server_cpu_before) if server_cpu_before is not None else None,
        "state": done.state, "rows": done.row_count, "bytes": done.byte_size, "seconds": seconds,
        "upload_s": s3.upload_s, "rss_before_kib": rss_before, "peak_growth_kib": _status_kib("VmHWM") - rss_before,
        "maxrss_before_kib": maxrss_before,
        "maxrss_after_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def measure(url: str, endpoint: str, workspace: uuid.UUID, query: uuid.UUID, fmt: str) -> dict[str, Any]:
    """Request an export (committed, not published) and run it in a fresh process."""
    from timekeeper.reporting import exports as ex

    with connect(url) as conn:
        export, _ = ex.request_export(conn, workspace_id=workspace, query_id=query, version=None, format=fmt,
                                      requested_by=USER, idempotency_key=None, now=NOW, publisher=_AcceptAll())
    load = load_average()
    out = subprocess.run([sys.executable, __file__, "--child", "--url", url, "--endpoint", endpoint,
                          "--workspace", str(workspace), "--export", str(export.id)],
                         check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(format=fmt, load_before=load, load_after=load_average())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=[100_000, 1_000_000])
    parser.add_argument("--xlsx-1m", action="store_true", help="also XLSX at the largest size")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="reuse the data of an earlier run (no fill)")
    parser.add_argument("--formats", default="csv,xlsx", help="formats to measure (default csv,xlsx)")
    parser.add_argument("--out", default=None, help="JSON results file (default results/exports-<date>.json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("url", "endpoint", "workspace", "export"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    print(f"revision {git_revision()}, load average {os.getloadavg()}")
    moto, endpoint = start_moto()
    try:
        url, made, fill_s = reuse(args.sizes) if args.reuse else prepare(args.sizes, args.seed)
        print(f"filled {sum(args.sizes):,} invoices with COPY in {fill_s:.1f} s")
        plan = explain(url, made[max(args.sizes)][0])
        print("\nEXPLAIN (ANALYZE, BUFFERS) of status = open, sort by due date, limit 1000:\n")
        print(plan)
        formats = args.formats.split(",")
        runs = [("csv", size) for size in args.sizes] if "csv" in formats else []
        if "xlsx" in formats:
            runs.append(("xlsx", min(args.sizes)))
            if args.xlsx_1m and max(args.sizes) != min(args.sizes):
                runs.append(("xlsx", max(args.sizes)))
        results = []
        for fmt, size in runs:
            ws, query = made[size]
            result = measure(url, endpoint, ws, query, fmt)
            result["size"] = size
            results.append(result)
            print(f"  {fmt} {size:,}: {result['rows'] / result['seconds']:,.0f} rows/s, "
                  f"peak RSS growth {result['peak_growth_kib'] / 1024:.1f} MB", flush=True)
    finally:
        moto.terminate()
        moto.wait(timeout=10)
    rows = [[r["format"].upper(), f"{r['size']:,}", f"{r['seconds']:.1f}", f"{r['upload_s']:.1f}",
             f"{r['rows'] / r['seconds']:,.0f}", f"{r['rows'] / r['client_cpu_s']:,.0f}",
             f"{r['client_cpu_s']:.1f} / {r['server_cpu_s'] or 0:.1f}",
             f"{r['bytes'] / 1e6:.1f}", f"{r['peak_growth_kib'] / 1024:.1f}",
             f"{(r['maxrss_after_kib'] - r['maxrss_before_kib']) / 1024:.1f}",
             f"{r['load_before']:.2f} / {r['load_after']:.2f}"] for r in results]
    print()
    print(table(["format", "rows", "run_export s", "upload s", "rows/s", "rows per client CPU s",
                 "CPU s client / server", "file MB", "peak RSS growth MB",
                 "ru_maxrss growth MB", "load avg before / after"], rows))
    target = Path(args.out or ROOT / "benchmarks" / "results" / f"exports-{date.today().isoformat()}.json")
    target.write_text(json.dumps({"revision": git_revision(), "plan": plan, "results": results}, indent=2) + "\n")
    print(f"\nresults: {target}")


if __name__ == "__main__":
    main()
