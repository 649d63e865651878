"""History retention: finished history is deleted once it is older than its kind's
retention (:class:`timekeeper.topology.HistoryRetention`), in batches whose cost does not
grow with the table.

The rule (what is pruned and what is always kept) is the SQL of ``retention.sql``:

- **runs** of one owner finished before the cutoff, with their delivery rows (sources,
  per-recipient outcomes, attempts, the outbox). Always kept: each schedule's latest
  settled run, the latest run of each trigger, the runs that make up a failure streak,
  and a delivered run while one of its links is open. A run not yet finished is never a
  candidate, and a run another transaction holds (being settled, or a delivery row being
  written for it) is skipped;
- **events** recorded before the cutoff, except those of a kept run and the pause that
  holds a schedule paused;
- **exports** finished before the cutoff;
- **recipient addresses** of delivery rows last written before the personal-data cutoff:
  the address is removed (``address_erased_at`` set), the row kept with its outcome,
  counts and instants; only rows of finished runs no other transaction holds;
- **the generated rows of failed snapshot runs** (the ledger row stays, marked
  ``rows_pruned_at``; published, current and captured versions are never touched);
- **personal data in snapshot rows** of a period whose month ended longer ago than its
  type's retention (``SnapshotType.personal_data``): the columns naming a person are
  pseudonymised in every version, the rows kept, so published figures still add up
  (``0063_snapshot_personal_data.sql``).

Each batch is one statement of at most ``batch_rows`` rows, oldest first through the
retention indexes (``0036_history_retention.sql``), committed on its own; a pass runs at
most ``max_batches_per_pass`` batches per kind and starts none after ``time_budget_s``.
This module lives beside the schema because its rule reads every owner's history tables,
as the migrations that define them do; the edge registers it as each owner's
maintenance task.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from timekeeper.db.sql import load_queries

SQL = load_queries("timekeeper.db", "retention.sql")

#: Kinds a pass changes without deleting the rows.
_NOT_DELETED = frozenset({"snapshot_runs", "addresses_erased", "snapshot_rows_pseudonymised"})

#: Failed snapshot runs per batch: each carries up to a whole month's generated rows.
SNAPSHOT_RUNS_PER_BATCH = 1


@dataclass
class Pruned:
    """What one pass pruned: rows by kind (``runs``, ``delivery_rows``, ``events``,
    ``exports``, ``snapshot_runs``, ``snapshot_rows``, ``addresses_erased``,
    ``snapshot_rows_pseudonymised``), the batches it ran, and whether it
    stopped at a bound (``more``: the last batch of some kind was full, so rows past
    retention may remain for the next pass)."""

    rows: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    more: bool = False

    @property
    def total(self) -> int:
        """Every row deleted (marked snapshot runs and delivery rows whose address was
        erased are not deleted and not counted)."""
        return sum(n for kind, n in self.rows.items() if kind not in _NOT_DELETED)

    def summary(self) -> dict[str, Any] | None:
        """The JSON-ready summary a maintenance task returns, or None when nothing was pruned."""
        if not self.total and not self.more and not any(self.rows.get(k) for k in _NOT_DELETED):
            return None
        return {"pruned": self.total, **{k: v for k, v in self.rows.items() if v}, "batches": self.batches,
                "more": self.more}

    def add(self, kind: str, n: int) -> None:
        self.rows[kind] = self.rows.get(kind, 0) + n


class _Budget:
    """The pass's bounds: batches per kind and a time budget on a monotonic clock."""

    def __init__(self, max_batches: int, time_budget_s: float, clock: Callable[[], float]) -> None:
        self.max_batches, self.clock = max_batches, clock
        self.deadline = clock() + time_budget_s

    def spent(self) -> bool:
        return self.clock() >= self.deadline


#: A batch's counter: the statement's cursor -> (rows of the batch's own kind, counts by kind).
Counter = Callable[[Any], tuple[int, dict[str, int]]]


def _deleted(kind: str) -> Counter:
    """The counter of a plain DELETE: its row count."""
    return lambda cursor: (cursor.rowcount, {kind: cursor.rowcount})


def _batches(conn: psycopg.Connection, name: str, params: dict[str, Any], limit: int, budget: _Budget,
             pruned: Pruned, count: Counter) -> None:
    """Run ``name`` batch after batch, each in its own committed transaction, until a batch
    is not full, the kind's batch limit is reached or the time budget is spent."""
    for _ in range(budget.max_batches):
        if budget.spent():
            pruned.more = True
            return
        with conn.transaction():
            conn.execute(SQL["plan_in_index_order"])
            size, counts = count(conn.execute(SQL[name], {**params, "limit": limit}))
        pruned.batches += 1
        for kind, n in counts.items():
            pruned.add(kind, n)
        if size < limit:
            return
    pruned.more = True


def prune_owner_history(conn: psycopg.Connection, *, owner: str, now: datetime, runs_retention: timedelta,
                        events_retention: timedelta, batch_rows: int, max_batches: int, time_budget_s: float,
                        clock: Callable[[], float] = time.monotonic) -> Pruned:
    """Prune ``owner``'s runs that finished more than ``runs_retention`` before ``now`` (aware
    UTC) and its schedules' events recorded more than ``events_retention`` before it, on
    the idle ``conn`` (not walled by row-level security; each batch commits).

    Bounded: batches of ``batch_rows``, at most ``max_batches`` per kind, none started
    after ``time_budget_s`` seconds (of ``clock``, monotonic seconds). Returns what was
    pruned (:class:`Pruned`). Raises ``ValueError`` for a naive ``now``; database errors
    propagate (the batches committed before stay committed).
    """
    if now.tzinfo is None:
        raise ValueError("now must be an aware UTC instant")
    pruned, budget = Pruned(), _Budget(max_batches, time_budget_s, clock)

    def runs(cursor: Any) -> tuple[int, dict[str, int]]:
        row = cursor.fetchone()
        return row["runs"], {"runs": row["runs"], "delivery_rows": row["delivery_rows"]}

    _batches(conn, "prune_runs", {"owner": owner, "now": now, "cutoff": now - runs_retention},
             batch_rows, budget, pruned, runs)
    _batches(conn, "prune_events", {"owner": owner, "cutoff": now - events_retention},
             batch_rows, budget, pruned, _deleted("events"))
    return pruned


def prune_exports(conn: psycopg.Connection, *, now: datetime, exports_days: int, batch_rows: int,
                  max_batches: int, time_budget_s: float, clock: Callable[[], float] = time.monotonic) -> Pruned:
    """Prune exports that finished more than ``exports_days`` days before ``now`` (aware
    UTC); bounded as :func:`prune_owner_history`. Returns what was pruned."""
    pruned, budget = Pruned(), _Budget(max_batches, time_budget_s, clock)
    _batches(conn, "prune_exports", {"cutoff": now - timedelta(days=exports_days)}, batch_rows, budget, pruned,
             _deleted("exports"))
    return pruned


def prune_failed_snapshot_rows(conn: psycopg.Connection, *, now: datetime, days: int, max_batches: int,
                               time_budget_s: float, clock: Callable[[], float] = time.monotonic) -> Pruned:
    """Delete the generated rows of snapshot runs that failed more than ``days`` days before
    ``now`` (aware UTC), :data:`SNAPSHOT_RUNS_PER_BATCH` run per batch, and mark each such
    run ``rows_pruned_at = now``. Bounded by ``max_batches`` and ``time_budget_s``. Returns
    what was pruned (``snapshot_runs`` marked, ``snapshot_rows`` deleted)."""

    def marked(cursor: Any) -> tuple[int, dict[str, int]]:
        row = cursor.fetchone()
        return row["runs"], {"snapshot_runs": row["runs"], "snapshot_rows": row["rows"]}

    pruned, budget = Pruned(), _Budget(max_batches, time_budget_s, clock)
    _batches(conn, "prune_failed_snapshot_rows", {"now": now, "cutoff": now - timedelta(days=days)},
             SNAPSHOT_RUNS_PER_BATCH, budget, pruned, marked)
    return pruned


def erase_old_addresses(conn: psycopg.Connection, *, now: datetime, personal_data_days: int, batch_rows: int,
                        max_batches: int, time_budget_s: float, clock: Callable[[], float] = time.monotonic) -> Pruned:
    """Remove the recipient address of every delivery row last written more than
    ``personal_data_days`` days before ``now`` (aware UTC): ``address`` NULL,
    ``address_erased_at = now``; the rows stay (status, skip reason, error code, provider
    message id, attempt, instants), so counts and outcomes are unchanged. Only rows of a
    finished run that no other transaction holds (a run in flight is never touched).

    Bounded as :func:`prune_owner_history` (``batch_rows`` rows a batch, ``max_batches``,
    ``time_budget_s`` seconds of ``clock``). Returns what was changed (``addresses_erased``
    rows). Raises ``ValueError`` for a naive ``now``.
    """
    if now.tzinfo is None:
        raise ValueError("now must be an aware UTC instant")
    pruned, budget = Pruned(), _Budget(max_batches, time_budget_s, clock)
    _batches(conn, "erase_old_addresses", {"now": now, "cutoff": now - timedelta(days=personal_data_days)},
             batch_rows, budget, pruned, _deleted("addresses_erased"))
    return pruned


#: The statement that pseudonymises each snapshot row table's personal data
#: (``0063_snapshot_personal_data.sql``): one per table that carries any.
PERSONAL_DATA_STATEMENTS = {"snapshot_ar_aging": "expire_personal_data_snapshot_ar_aging"}


def expire_snapshot_personal_data(conn: psycopg.Connection, *, now: datetime, retention_days: dict[str, int],
                                  batch_rows: int, max_batches: int, time_budget_s: float,
                                  clock: Callable[[], float] = time.monotonic) -> Pruned:
    """Pseudonymise the personal data of snapshot rows past their type's retention:
    ``retention_days`` maps a row table (``SnapshotType.rows.table``) to its type's days
    (``SnapshotType.personal_data.retention_days``); the rows of every version of a period
    whose month ended more than that many days before ``now`` (aware UTC; counted in whole
    months: periods before the month of ``now - days``) are changed as
    ``0063_snapshot_personal_data.sql`` says, the rows kept.

    Bounded as :func:`prune_owner_history`. Returns what was changed
    (``snapshot_rows_pseudonymised`` rows). Raises ``ValueError`` for a naive ``now`` and
    ``KeyError`` for a table without its statement (:data:`PERSONAL_DATA_STATEMENTS`).
    """
    if now.tzinfo is None:
        raise ValueError("now must be an aware UTC instant")
    pruned, budget = Pruned(), _Budget(max_batches, time_budget_s, clock)
    for table, days in sorted(retention_days.items()):
        name = PERSONAL_DATA_STATEMENTS.get(table, "")
        if name not in SQL:
            raise KeyError(f"no retention statement {name} for the personal data of {table}")
        cutoff = (now - timedelta(days=days)).date().replace(day=1)
        _batches(conn, name, {"now": now, "cutoff_period": cutoff}, batch_rows, budget, pruned,
                 _deleted("snapshot_rows_pseudonymised"))
    return pruned
