"""XLSX writers side by side: the product's (XlsxWriter, constant memory) and the openpyxl
write-only workbook exports used before, over the same generated rows, each run in a
fresh Python process.

    PYTHONPATH=shared python benchmarks/xlsx_writers.py                  # 100k and 300k rows
    PYTHONPATH=shared python benchmarks/xlsx_writers.py --sizes 20000    # smoke

The rows have the shape of the invoice export (`benchmarks/exports.py`): ten columns --
UUID text, number text, UUID text, name text, two dates, an amount in minor units, its
currency, status and a date that is NULL in two rows of three -- as the export's cursor
loads them (dates as ``datetime.date``; the sheet gets date cells and the amount a
number in major units with its currency's format, in the workspace's locale). The
rows are generated as they are written (not held), so the peak RSS growth is the
writer's; the CPU of generating them alone is measured too and taken off. No database:
this isolates the writer; `exports.py` measures the whole export.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

from benchmarks._bench import git_revision, load_average, table  # noqa: E402

WRITERS = ("generate-only", "xlsxwriter", "openpyxl")


def _rows(n: int):
    from datetime import date

    for i in range(n):
        yield (f"{i:08x}-1111-4000-8000-000000000000", f"INV-{i:07d}", f"{i % 1000:08x}-2222-4000-8000-000000000000",
               f"Member {i % 1000}", date(2027, 1, i % 28 + 1), date(2027, 2, i % 28 + 1), i * 137, "EUR",
               ("open", "paid", "void")[i % 3], None if i % 3 else date(2027, 3, 1))


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def child(writer: str, n: int) -> None:
    from tests.support import openpyxl_xlsx
    from timekeeper.reporting.catalogue import CATALOGUE
    from timekeeper.reporting.presentation import Presentation
    from timekeeper.reporting.writers import write_xlsx

    presentation = Presentation("Bench", "Europe/Berlin", "de_DE", "EUR")

    entity = CATALOGUE["invoices"]
    names = ["id", "number", "member_id", "member_name", "issue_date", "due_date", "amount_minor", "currency",
             "status", "voided_on"]
    columns = [entity.columns[name] for name in names]
    headers = [c.label for c in columns]
    path = tempfile.mktemp(suffix=".xlsx")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    rss_before = _status_kib("VmRSS")
    cpu, wall = time.process_time(), time.perf_counter()
    if writer == "generate-only":
        for _ in _rows(n):
            pass
        size = 0
    else:
        (write_xlsx if writer == "xlsxwriter" else openpyxl_xlsx)(path, headers, columns, _rows(n), presentation)
        size = os.path.getsize(path)
        os.unlink(path)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(json.dumps({"writer": writer, "rows": n, "cpu_s": cpu, "wall_s": wall, "bytes": size,
                      "rss_growth_kib": _status_kib("VmHWM") - rss_before,
                      "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,300000")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each writer (the least CPU is kept)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    print(f"revision {git_revision()}; load {load_average():.1f}", flush=True)
    results = []
    for n in (int(s) for s in args.sizes.split(",")):
        for writer in WRITERS:
            best = None
            for _ in range(args.repeats):
                out = subprocess.run([sys.executable, __file__, "--child", writer, str(n)], check=True,
                                     capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                         [str(ROOT / "shared"), str(ROOT)])}).stdout
                result = json.loads(out.strip().splitlines()[-1])
                result["load"] = load_average()
                if best is None or result["cpu_s"] < best["cpu_s"]:
                    best = result
            results.append(best)
            print(json.dumps(best), flush=True)
    generate = {r["rows"]: r["cpu_s"] for r in results if r["writer"] == "generate-only"}
    rows = []
    for r in results:
        if r["writer"] == "generate-only":
            continue
        writer_cpu = r["cpu_s"] - generate[r["rows"]]
        rows.append([r["writer"], f"{r['rows']:,}", f"{r['cpu_s']:.2f}", f"{writer_cpu:.2f}",
                     f"{r['rows'] / writer_cpu:,.0f}", f"{r['rows'] / r['wall_s']:,.0f}", f"{r['bytes']:,}",
                     f"{r['rss_growth_kib'] / 1024:.1f}", f"{r['load']:.1f}"])
    print(table(["writer", "rows", "CPU s", "writer CPU s", "rows per writer CPU s", "rows/s wall", "file bytes",
                 "peak RSS growth MiB", "load"], rows))


if __name__ == "__main__":
    main()
