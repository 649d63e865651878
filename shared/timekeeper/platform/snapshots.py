"""The Platform's snapshot types, registered with the snapshot ledger.

* ``membership_counts``: month-end membership counts by type and status (one chunk);
* ``ar_aging``: accounts-receivable aging at month end, one row per invoice outstanding
  then, bucketed 0-30, 31-60, 61-90 and over 90 days past due, in the workspace's
  currency; generated in chunks of invoices by id (resumable);
* ``selftest``: a synthetic sequence in chunks, enabled in development only, that checks
  the machinery end to end (and can be told to fail validation, for drills).

Each type validates what it wrote against the source in the publishing transaction
(counts and totals) and stores them as the version's ``basis``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from timekeeper.db.rows import execute, fetch_row, fetch_rows, fetch_value
from timekeeper.db.sql import load_queries
from timekeeper.snapshots.registry import (
    Chunk,
    PersonalData,
    PublishedRows,
    RowColumn,
    SnapshotRegistry,
    SnapshotType,
    ValidationFailed,
)
from timekeeper.snapshots.run import SnapshotRun

SQL = load_queries("timekeeper.platform", "snapshots.sql")
OWNER = "platform"
STAFF_ROLE = "platform:staff"


def _one(conn: psycopg.Connection, name: str, params: dict[str, Any]) -> dict[str, Any]:
    row = fetch_row(conn, SQL[name], params)
    assert row is not None
    return row


def _currency(conn: psycopg.Connection, run: SnapshotRun) -> str:
    currency = fetch_value(conn, SQL["workspace_currency"], (run.workspace_id,))
    assert currency is not None
    return currency


class MembershipCounts:
    """Month-end membership counts (a single chunk)."""

    def choose_mode(self, conn: psycopg.Connection, run: SnapshotRun) -> str:
        """Always ``single``: the counts are one grouped statement."""
        return "single"

    def generate(self, conn: psycopg.Connection, run: SnapshotRun, cursor: dict[str, Any] | None) -> Chunk:
        """Write every count row of the period's month end."""
        rows = execute(conn, SQL["membership_counts"], {"run_id": run.id, "workspace_id": run.workspace_id,
                                                       "as_of": run.period_end})
        return Chunk(rows=rows, next_cursor=None)

    def validate(self, conn: psycopg.Connection, run: SnapshotRun) -> dict[str, Any]:
        """The counts must add up to the memberships started by the month end."""
        totals = _one(conn, "membership_totals", {"run_id": run.id, "workspace_id": run.workspace_id,
                                                  "as_of": run.period_end})
        if totals["source"] != totals["written"]:
            raise ValidationFailed("totals_mismatch", f"counted {totals['written']} memberships, "
                                   f"the source has {totals['source']}")
        return {"as_of": run.period_end.isoformat(), "memberships": totals["source"], "rows": totals["rows"]}


class ReceivableAging:
    """Accounts-receivable aging at month end, in chunks of ``chunk_size`` invoices by id."""

    def __init__(self, chunk_size: int) -> None:
        self.chunk_size = chunk_size

    def choose_mode(self, conn: psycopg.Connection, run: SnapshotRun) -> str:
        """``single`` when the workspace's invoices fit in one chunk, else ``chunked``."""
        count = _one(conn, "invoice_count", {"workspace_id": run.workspace_id})["n"]
        return "single" if count <= self.chunk_size else "chunked"

    def generate(self, conn: psycopg.Connection, run: SnapshotRun, cursor: dict[str, Any] | None) -> Chunk:
        """Age the next slice of invoices after ``cursor["after"]`` (an invoice id)."""
        limit = self.chunk_size if run.generation_mode != "single" else 2**31 - 1
        row = _one(conn, "aging_chunk", {
            "run_id": run.id, "workspace_id": run.workspace_id, "as_of": run.period_end,
            "after": (cursor or {}).get("after"), "chunk": limit, "currency": _currency(conn, run)})
        done = row["scanned"] < limit
        return Chunk(rows=row["written"], next_cursor=None if done else {"after": str(row["last_id"])})

    def validate(self, conn: psycopg.Connection, run: SnapshotRun) -> dict[str, Any]:
        """The written rows must match the source's outstanding invoices: count and total."""
        params = {"run_id": run.id, "workspace_id": run.workspace_id, "as_of": run.period_end,
                  "currency": _currency(conn, run)}
        source = _one(conn, "aging_source_totals", params)
        written = _one(conn, "aging_written_totals", params)
        if (source["invoices"], source["outstanding"]) != (written["invoices"], written["outstanding"]):
            raise ValidationFailed("totals_mismatch", f"aged {written['invoices']} invoices totalling "
                                   f"{written['outstanding']}, the source has {source['invoices']} totalling "
                                   f"{source['outstanding']}")
        buckets = fetch_rows(conn, SQL["aging_buckets"], params)
        return {"as_of": run.period_end.isoformat(), "currency": params["currency"],
                "invoices": source["invoices"], "outstanding_minor": int(source["outstanding"]),
                "buckets": {b["bucket"]: {"invoices": b["invoices"], "outstanding_minor": int(b["outstanding"])}
                            for b in buckets}}


@dataclass
class SelfTest:
    """``total`` synthetic rows in chunks of ``chunk_size``; ``fail_validation(run)`` True
    makes validation fail (a drill of the final-failure path)."""

    total: int = 1_000
    chunk_size: int = 250
    fail_validation: Callable[[SnapshotRun], bool] = lambda run: False

    def choose_mode(self, conn: psycopg.Connection, run: SnapshotRun) -> str:
        """Always ``chunked``."""
        return "chunked"

    def generate(self, conn: psycopg.Connection, run: SnapshotRun, cursor: dict[str, Any] | None) -> Chunk:
        """Write rows ``next .. next + chunk_size - 1``."""
        start = (cursor or {}).get("next", 1)
        stop = min(start + self.chunk_size - 1, self.total)
        execute(conn, SQL["selftest_chunk"], {"run_id": run.id, "workspace_id": run.workspace_id, "start": start,
                                            "stop": stop})
        return Chunk(rows=stop - start + 1, next_cursor=None if stop >= self.total else {"next": stop + 1})

    def validate(self, conn: psycopg.Connection, run: SnapshotRun) -> dict[str, Any]:
        """Every row once, and no drill asking for a failure."""
        count = _one(conn, "selftest_count", {"run_id": run.id})["n"]
        if count != self.total:
            raise ValidationFailed("selftest_mismatch", f"it wrote {count:,} rows where {self.total:,} were "
                                   "expected")
        if self.fail_validation(run):
            raise ValidationFailed("selftest_mismatch", f"a drill: all {count:,} rows were written, but version "
                                   f"{run.version} of this month is set to fail its check on purpose; a re-run "
                                   "publishes a new version")
        return {"rows": count}


#: The published rows of each type as readers (the reporting catalogue) see them.
MEMBERSHIP_COUNT_ROWS = PublishedRows("snapshot_membership_counts", (
    RowColumn("membership_type", "text", "Membership type"),
    RowColumn("status", "enum", "Status at month end", values=("active", "lapsed", "cancelled")),
    RowColumn("members", "integer", "Members"),
), key=("membership_type", "status"))
AR_AGING_ROWS = PublishedRows("snapshot_ar_aging", (
    RowColumn("invoice_id", "uuid", "Invoice id"),
    RowColumn("member_id", "uuid", "Member id"),
    RowColumn("due_date", "date", "Due"),
    RowColumn("days_past_due", "integer", "Days past due at month end"),
    RowColumn("bucket", "enum", "Aging bucket", values=("0-30", "31-60", "61-90", "over_90")),
    RowColumn("outstanding_minor", "money", "Outstanding", currency="currency"),
    RowColumn("currency", "text", "Currency"),
), key=("invoice_id",))
SELFTEST_ROWS = PublishedRows("snapshot_selftest_rows", (RowColumn("n", "integer", "Row number"),), key=("n",))


#: The aging rows' personal data: each row is one member's invoice. Kept 400 days after the
#: month end (a year-on-year comparison of the same month, with a month to spare), then
#: pseudonymised (docs/snapshots.md "Personal data").
AR_AGING_PERSONAL_DATA = PersonalData(
    columns=("member_id", "invoice_id"), retention_days=400,
    kept_for="a report listing a month's outstanding invoices per member; the bucket totals, counts and amounts "
             "need neither column")


def register(registry: SnapshotRegistry, *, aging_chunk_size: int = 50_000, selftest: SelfTest | None = None) -> None:
    """Register the Platform's three types (the self-test in development only)."""
    staff = frozenset({STAFF_ROLE})
    registry.register(SnapshotType(owner=OWNER, name="membership_counts", label="Membership counts",
                                   generator=MembershipCounts(), staff_roles=staff, rows=MEMBERSHIP_COUNT_ROWS))
    registry.register(SnapshotType(owner=OWNER, name="ar_aging", label="Receivables aging",
                                   generator=ReceivableAging(aging_chunk_size), staff_roles=staff,
                                   chunk_size=aging_chunk_size, rows=AR_AGING_ROWS,
                                   personal_data=AR_AGING_PERSONAL_DATA))
    chosen = selftest or SelfTest()
    registry.register(SnapshotType(owner=OWNER, name="selftest", label="Self-test", generator=chosen,
                                   staff_roles=staff, chunk_size=chosen.chunk_size,
                                   environments=frozenset({"development"}), rows=SELFTEST_ROWS))
