"""Snapshot types: what an owner module registers with the ledger.

A :class:`SnapshotType` names its owner and type, the staff roles that may request
re-runs and backfills, its chunk size, the environments it is enabled in, and its
:class:`Generator` -- the type's own behaviour, called by the run job:

* ``choose_mode(conn, run) -> str`` once, at the run's first start (the mode is retained by
  every later attempt, so a resumed run never switches strategy half way);
* ``generate(conn, run, cursor) -> Chunk`` repeatedly, inside one transaction per chunk: write
  the rows after ``cursor`` (None at the start) and return the next cursor (None when done);
* ``validate(conn, run) -> dict`` inside the publishing transaction: compare the written
  rows with the source (row counts, totals) and return the ``basis`` stored with the
  version, or raise :class:`ValidationFailed` (final at once: the run fails, the previous
  version stays current).

Generators receive a :class:`~timekeeper.snapshots.run.SnapshotRun` and a connection
inside the transaction; they never commit.

A type also declares its published rows (:class:`PublishedRows`): the table its generator
writes (keyed by ``run_id``, scoped by ``workspace_id``), the columns readers may see and
the columns that order its rows within a version. The reporting catalogue derives one
entity per registered type from it, so a new type is queryable without being listed there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from timekeeper.snapshots.run import SnapshotRun

#: Environments a type may be enabled in (the deployment's ``stage`` maps onto one).
ENVIRONMENTS = ("development", "production")


class ValidationFailed(Exception):
    """The generated rows do not match the source: ``code`` (machine-readable) and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Chunk:
    """One committed chunk: ``rows`` written, ``next_cursor`` (JSON-ready) or None when done."""

    rows: int
    next_cursor: dict[str, Any] | None


class Generator(Protocol):
    """A snapshot type's generation behaviour (see the module docstring)."""

    def choose_mode(self, conn: psycopg.Connection, run: SnapshotRun) -> str: ...

    def generate(self, conn: psycopg.Connection, run: SnapshotRun, cursor: dict[str, Any] | None) -> Chunk: ...

    def validate(self, conn: psycopg.Connection, run: SnapshotRun) -> dict[str, Any]: ...


#: The kinds a published column may have (the reporting catalogue's column types of the same names).
ROW_KINDS = ("text", "integer", "money", "date", "uuid", "enum")


@dataclass(frozen=True)
class RowColumn:
    """One column of a type's published rows: ``name`` (the table's column), ``kind`` (one
    of :data:`ROW_KINDS`; ``money`` is an integer amount in minor units), ``label`` and, for
    ``enum``, its ``values``; for ``money``, ``currency`` may name the column of the same
    rows holding the amount's ISO 4217 currency (None: the workspace's currency)."""

    name: str
    kind: str
    label: str
    values: tuple[str, ...] = ()
    currency: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ROW_KINDS:
            raise ValueError(f"kind must be one of {ROW_KINDS}")
        if (self.kind == "enum") != bool(self.values):
            raise ValueError("an enum column, and only one, lists its values")


@dataclass(frozen=True)
class PublishedRows:
    """Where a type's rows are and how readers see them: ``table`` (columns ``run_id`` and
    ``workspace_id`` beside ``columns``), and ``key``: the columns that, with ``run_id``,
    order the rows of a version totally (the table's primary key after ``run_id``)."""

    table: str
    columns: tuple[RowColumn, ...]
    key: tuple[str, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names) or {"period", "version"} & set(names):
            raise ValueError("column names are unique and not period or version (the catalogue adds those)")
        if not self.key or not set(self.key) <= set(names):
            raise ValueError("the key is one or more of the columns")


@dataclass(frozen=True)
class PersonalData:
    """What of a type's rows names a person, and for how long: ``columns`` (the row columns
    that identify a person, directly or through the platform's records, e.g. a member id
    and an invoice id), ``kept_for`` (what published reports still need of them, in words,
    for the documentation) and ``retention_days``: once a period's month ended more than
    that many days ago, the retention pass pseudonymises those columns in every version's
    rows (:func:`timekeeper.db.retention.expire_snapshot_personal_data`); the rows stay, so
    every count, total and bucket a version published still adds up. ``ValueError`` for
    no columns or a retention under one day."""

    columns: tuple[str, ...]
    kept_for: str
    retention_days: int

    def __post_init__(self) -> None:
        if not self.columns or self.retention_days < 1:
            raise ValueError("personal data names its columns and is kept at least one day")


@dataclass(frozen=True)
class SnapshotType:
    """A registered type. ``staff_roles``: claims roles that may request manual re-runs and
    backfills of it; ``chunk_size``: rows per chunk (the generator's unit);
    ``environments``: where it is enabled (:data:`ENVIRONMENTS`); ``rows``: its published
    rows as readers see them (None: not readable outside the ledger); ``personal_data``:
    what of its rows names a person and its retention (None: its rows name no one)."""

    owner: str
    name: str
    label: str
    generator: Generator
    staff_roles: frozenset[str] = frozenset({"snapshots:staff"})
    chunk_size: int = 50_000
    environments: frozenset[str] = frozenset(ENVIRONMENTS)
    rows: PublishedRows | None = None
    personal_data: PersonalData | None = None

    @property
    def key(self) -> tuple[str, str]:
        """``(owner, name)``."""
        return (self.owner, self.name)


class UnknownSnapshotType(LookupError):
    """No type of that owner and name is registered (``reason`` ``unsupported_type``) or it
    is not enabled in this environment (``type_disabled``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class SnapshotRegistry:
    """The registered types of a deployment in one ``environment``."""

    environment: str = "development"
    _types: dict[tuple[str, str], SnapshotType] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.environment not in ENVIRONMENTS:
            raise ValueError(f"environment must be one of {ENVIRONMENTS}")

    def register(self, snapshot_type: SnapshotType) -> None:
        """Add a type; raises ``ValueError`` when its key is registered already."""
        if snapshot_type.key in self._types:
            raise ValueError(f"snapshot type {snapshot_type.key} registered twice")
        self._types[snapshot_type.key] = snapshot_type

    def get(self, owner: str, name: str) -> SnapshotType:
        """The enabled type ``(owner, name)``; raises :class:`UnknownSnapshotType`."""
        found = self._types.get((owner, name))
        if found is None:
            raise UnknownSnapshotType("unsupported_type", f"no snapshot type {owner}/{name}")
        if self.environment not in found.environments:
            raise UnknownSnapshotType("type_disabled", f"snapshot type {owner}/{name} is disabled in "
                                      f"{self.environment}")
        return found

    def enabled(self) -> list[SnapshotType]:
        """The types enabled in this environment, in registration order."""
        return [t for t in self._types.values() if self.environment in t.environments]

    def all(self) -> Iterable[SnapshotType]:
        """Every registered type, enabled or not."""
        return self._types.values()
