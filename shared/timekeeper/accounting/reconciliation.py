"""Reconciliation sweep: match unreconciled bank lines to posted ledger entries.

The rule behind the ``reconciliation.sweep`` work kind (:func:`match_lines`): a bank line
matches a POSTED, unreconciled ledger entry whose ``account`` equals the line's ``bank_account`` and
whose ``amount`` equals the line's amount exactly, when either their non-empty references
are equal or the entry date is within ``window_days`` of the line's booking date.
Among several candidates the reference match wins, then the nearest date, then the
earliest entry; each entry matches at most one line and each line at most one entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import psycopg

from timekeeper.accounting.models import BankLine, LedgerEntry
from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_all, fetch_value

#: Days either side of the booking date within which an entry date may match.
DEFAULT_WINDOW_DAYS = 3
#: Bank lines examined by one sweep (the oldest first); the rest wait for the next sweep.
MAX_LINES_PER_SWEEP = 5000


SQL = load_queries("timekeeper.accounting", "reconciliation.sql")


def match_lines(lines: Sequence[BankLine], entries: Sequence[LedgerEntry], *,
                window_days: int = DEFAULT_WINDOW_DAYS) -> list[tuple[BankLine, LedgerEntry]]:
    """Pair bank lines with ledger entries by the module's matching rule (pure, deterministic).

    Lines are taken in (booked_on, id) order; returns ``(line, entry)`` pairs. Entries
    that are unposted or already reconciled are ignored.
    """
    free = [e for e in entries if e.posted and e.reconciled_by_bank_line_id is None]
    used: set[UUID] = set()
    pairs = []
    for line in sorted(lines, key=lambda ln: (ln.booked_on, str(ln.id))):
        if line.matched_entry_id is not None:
            continue
        best: tuple[tuple, LedgerEntry] | None = None
        for entry in free:
            if entry.id in used or entry.account != line.bank_account or entry.amount != line.amount:
                continue
            by_reference = bool(line.reference) and entry.reference == line.reference
            distance = abs((entry.entry_date - line.booked_on).days)
            if not by_reference and distance > window_days:
                continue
            rank = (0 if by_reference else 1, distance, entry.entry_date, str(entry.id))
            if best is None or rank < best[0]:
                best = (rank, entry)
        if best is not None:
            used.add(best[1].id)
            pairs.append((line, best[1]))
    return pairs


@dataclass(frozen=True)
class SweepResult:
    """Outcome of :func:`sweep`.

    ``matched_now``: ``(bank_line_id, entry_id)`` pairs this call reconciled;
    ``matched_by_run``: every line reconciled by the run so far (this call and any earlier
    execution of the same run); ``unmatched``: the workspace's lines still unreconciled.
    ``examined``: unreconciled lines this call looked at.
    """

    matched_now: list[tuple[UUID, UUID]]
    matched_by_run: int
    unmatched: int
    examined: int


def sweep(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID, now: datetime,
          window_days: int = DEFAULT_WINDOW_DAYS) -> SweepResult:
    """Reconcile the workspace's unreconciled bank lines in the caller's transaction.

    Takes a per-workspace advisory transaction lock so concurrent sweeps serialize, locks
    the lines and candidate entries, marks each matched pair on both sides
    (``bank_lines.matched_entry_id``/``reconciled_at``/``reconciled_by_run_id`` and
    ``ledger_entries.reconciled_by_bank_line_id``/``reconciled_at``; ``now`` is aware UTC).
    Only rows of ``workspace_id`` are read or written.
    """
    scope = {"workspace_id": workspace_id}
    fetch_value(conn, SQL["lock_workspace_sweep"], scope)
    lines = fetch_all(conn, SQL["unreconciled_lines"], {**scope, "limit": MAX_LINES_PER_SWEEP}, BankLine)
    matched_now: list[tuple[UUID, UUID]] = []
    if lines:
        window = timedelta(days=window_days)
        entries = fetch_all(conn, SQL["candidate_entries"], {
            **scope,
            "accounts": sorted({ln.bank_account for ln in lines}),
            "amounts": sorted({ln.amount for ln in lines}),
            "from_date": min(ln.booked_on for ln in lines) - window,
            "to_date": max(ln.booked_on for ln in lines) + window,
            "references": sorted({ln.reference for ln in lines if ln.reference}),
        }, LedgerEntry)
        for line, entry in match_lines(lines, entries, window_days=window_days):
            params = {**scope, "line_id": line.id, "entry_id": entry.id, "now": now, "run_id": run_id}
            # Both rows are locked above, so both updates apply; a miss is a broken invariant
            # and raises (the caller's transaction rolls back, no half-marked pair).
            if not execute(conn, SQL["reconcile_line"], params) or not execute(conn, SQL["reconcile_entry"], params):
                raise RuntimeError(f"bank line {line.id} / entry {entry.id} changed during the sweep")
            matched_now.append((line.id, entry.id))
    matched_by_run = fetch_value(conn, SQL["count_reconciled_by_run"], {**scope, "run_id": run_id})
    unmatched = fetch_value(conn, SQL["count_unreconciled"], scope)
    return SweepResult(matched_now, matched_by_run, unmatched, len(lines))
