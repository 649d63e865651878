"""The catalogue: the only entities, columns and operators a saved query may name.

A saved query never carries SQL. Its entity and column names are looked up here, and
only the catalogue's identifiers reach the compiled statement (through psycopg's ``sql``
composition); filter values are always bound parameters. Removing a column from the
catalogue makes the stored versions that name it fail to compile with
:class:`~timekeeper.reporting.definition.InvalidDefinition` (an export fails with a clear
code), never with a database error.

Each entity reads one base table (alias ``t``) of the Platform data, scoped by
``t.workspace_id``, and may borrow columns of a referenced row through a declared join
(included only when a chosen column, filter or sort uses it).

Snapshot entities (``snapshot.<owner>.<type>``) are derived from the snapshot registry,
one per registered type that declares its published rows
(:class:`~timekeeper.snapshots.registry.PublishedRows`): the type's columns plus the
version's ``period`` (its month's first day) and ``version``, read from the ledger's row
(alias ``r``). They show published rows only: by default those of every period's current
version; a report section chooses one version (the compiler's ``snapshot_run``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from timekeeper.snapshots.registry import SnapshotRegistry, SnapshotType


class ColumnType(StrEnum):
    """The types a column may have; each allows its own operators (:data:`OPERATORS`)."""

    TEXT = "text"
    INTEGER = "integer"
    #: An integer amount in minor units of a currency (cents); files show it in major units
    #: (:mod:`timekeeper.reporting.presentation`), queries filter it in minor units.
    MONEY = "money"
    DATE = "date"
    TIMESTAMP = "timestamp"
    BOOLEAN = "boolean"
    UUID = "uuid"
    #: Text with a fixed set of values (``Column.values``).
    ENUM = "enum"


class Operator(StrEnum):
    """Filter operators. ``in``/``not_in`` take a list, ``between`` a ``[low, high]`` pair
    (both inclusive), ``is_null``/``is_not_null`` no value, the rest one value."""

    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LTE = "lte"
    GT = "gt"
    GTE = "gte"
    BETWEEN = "between"
    IN = "in"
    NOT_IN = "not_in"
    CONTAINS = "contains"
    STARTS_WITH = "starts_with"
    IS_NULL = "is_null"
    IS_NOT_NULL = "is_not_null"


_ORDERED = frozenset({Operator.EQ, Operator.NE, Operator.LT, Operator.LTE, Operator.GT, Operator.GTE,
                      Operator.BETWEEN})
_NULLS = frozenset({Operator.IS_NULL, Operator.IS_NOT_NULL})

#: The operators each column type allows.
OPERATORS: dict[ColumnType, frozenset[Operator]] = {
    ColumnType.TEXT: frozenset({Operator.EQ, Operator.NE, Operator.IN, Operator.NOT_IN, Operator.CONTAINS,
                                Operator.STARTS_WITH}) | _NULLS,
    ColumnType.INTEGER: _ORDERED | {Operator.IN, Operator.NOT_IN} | _NULLS,
    ColumnType.MONEY: _ORDERED | _NULLS,
    ColumnType.DATE: _ORDERED | _NULLS,
    ColumnType.TIMESTAMP: _ORDERED | _NULLS,
    ColumnType.BOOLEAN: frozenset({Operator.EQ, Operator.NE}) | _NULLS,
    ColumnType.UUID: frozenset({Operator.EQ, Operator.NE, Operator.IN, Operator.NOT_IN}) | _NULLS,
    ColumnType.ENUM: frozenset({Operator.EQ, Operator.NE, Operator.IN, Operator.NOT_IN}),
}


@dataclass(frozen=True)
class Join:
    """A referenced row: ``LEFT JOIN <table> <alias> ON alias.workspace_id = t.workspace_id
    AND alias.id = t.<via>``."""

    alias: str
    table: str
    via: str


@dataclass(frozen=True)
class Column:
    """A column a query may select, filter and sort by: ``source`` is the table column,
    read from the base table (``join`` None) or from the named join's alias. A money
    column's ``currency`` names the entity's column holding each amount's ISO 4217
    currency (None: the amounts are in the workspace's currency)."""

    name: str
    type: ColumnType
    label: str
    source: str
    join: str | None = None
    values: tuple[str, ...] = ()
    nullable: bool = False
    currency: str | None = None


@dataclass(frozen=True)
class Entity:
    """A queryable entity: its base ``table``, ``columns`` by name, and ``joins`` by alias;
    ``order_key``: the base table's columns that end every sort (a total order);
    ``snapshot``: ``(owner, type)`` of a snapshot entity (its rows are published versions'),
    None for Platform data."""

    name: str
    label: str
    table: str
    columns: dict[str, Column]
    joins: dict[str, Join] = field(default_factory=dict)
    order_key: tuple[str, ...] = ("id",)
    snapshot: tuple[str, str] | None = None


def _entity(name: str, label: str, table: str, columns: list[Column], joins: list[Join] = ()) -> Entity:
    return Entity(name=name, label=label, table=table, columns={c.name: c for c in columns},
                  joins={j.alias: j for j in joins})


T = ColumnType
_MEMBER = Join("m", "members", "member_id")

#: The ledger's row of a snapshot version, joined to every snapshot entity's rows.
SNAPSHOT_RUN = Join("r", "snapshot_runs", "run_id")
#: The prefix of a snapshot entity's name: ``snapshot.<owner>.<type>``.
SNAPSHOT_PREFIX = "snapshot."


def snapshot_entity_name(owner: str, snapshot_type: str) -> str:
    """The catalogue name of a snapshot type's entity: ``snapshot.<owner>.<type>``."""
    return f"{SNAPSHOT_PREFIX}{owner}.{snapshot_type}"


def snapshot_entity(snapshot_type: SnapshotType) -> Entity:
    """The entity of a registered type's published rows (it must declare ``rows``)."""
    rows = snapshot_type.rows
    if rows is None:
        raise ValueError(f"snapshot type {snapshot_type.key} declares no published rows")
    columns = [Column("period", T.DATE, "Period (month)", "period", join=SNAPSHOT_RUN.alias),
               Column("version", T.INTEGER, "Snapshot version", "version", join=SNAPSHOT_RUN.alias)]
    columns += [Column(c.name, ColumnType(c.kind), c.label, c.name, values=c.values, currency=c.currency)
                for c in rows.columns]
    entity = _entity(snapshot_entity_name(*snapshot_type.key), f"{snapshot_type.label} (snapshot)", rows.table,
                     columns, [SNAPSHOT_RUN])
    return Entity(name=entity.name, label=entity.label, table=entity.table, columns=entity.columns,
                  joins=entity.joins, order_key=("run_id", *rows.key), snapshot=snapshot_type.key)


def registered_snapshot_types() -> list[SnapshotType]:
    """Every snapshot type the deployment registers that declares its published rows, in
    registration order, enabled anywhere (the catalogue is one for every environment: a
    type disabled here has no published rows to show). The owners' registration functions
    are the ones the edge assembles the deployment's registry with."""
    from timekeeper.platform.snapshots import register as register_platform

    registry = SnapshotRegistry(environment="development")
    register_platform(registry)
    return [t for t in registry.all() if t.rows is not None]


#: Every entity a saved query may read, by name: the Platform's data, then the published
#: rows of each registered snapshot type.
CATALOGUE: dict[str, Entity] = {e.name: e for e in (
    _entity("members", "Members", "members", [
        Column("id", T.UUID, "Member id", "id"),
        Column("member_number", T.TEXT, "Member number", "member_number"),
        Column("display_name", T.TEXT, "Name", "display_name"),
        Column("email", T.TEXT, "Email", "email", nullable=True),
        Column("city", T.TEXT, "City", "city", nullable=True),
        Column("joined_on", T.DATE, "Joined on", "joined_on"),
    ]),
    _entity("membership_types", "Membership types", "membership_types", [
        Column("id", T.UUID, "Membership type id", "id"),
        Column("name", T.TEXT, "Name", "name"),
        Column("annual_fee_minor", T.MONEY, "Annual fee", "annual_fee_minor", currency="currency"),
        Column("currency", T.TEXT, "Currency", "currency"),
        Column("active", T.BOOLEAN, "Active", "active"),
    ]),
    _entity("memberships", "Memberships", "memberships", [
        Column("id", T.UUID, "Membership id", "id"),
        Column("member_id", T.UUID, "Member id", "member_id"),
        Column("member_name", T.TEXT, "Member", "display_name", join="m"),
        Column("membership_type", T.TEXT, "Membership type", "name", join="mt"),
        Column("status", T.ENUM, "Status", "status", values=("pending", "active", "lapsed", "cancelled")),
        Column("start_date", T.DATE, "Starts", "start_date"),
        Column("end_date", T.DATE, "Ends", "end_date", nullable=True),
        Column("cancelled_on", T.DATE, "Cancelled on", "cancelled_on", nullable=True),
    ], [_MEMBER, Join("mt", "membership_types", "membership_type_id")]),
    _entity("invoices", "Invoices", "invoices", [
        Column("id", T.UUID, "Invoice id", "id"),
        Column("number", T.TEXT, "Number", "number"),
        Column("member_id", T.UUID, "Member id", "member_id"),
        Column("member_name", T.TEXT, "Member", "display_name", join="m"),
        Column("issue_date", T.DATE, "Issued", "issue_date"),
        Column("due_date", T.DATE, "Due", "due_date"),
        Column("amount_minor", T.MONEY, "Amount", "amount_minor", currency="currency"),
        Column("currency", T.TEXT, "Currency", "currency"),
        Column("status", T.ENUM, "Status", "status", values=("draft", "open", "paid", "void")),
        Column("voided_on", T.DATE, "Voided on", "voided_on", nullable=True),
        Column("created_at", T.TIMESTAMP, "Recorded at", "created_at"),
    ], [_MEMBER]),
    _entity("payments", "Payments", "payments", [
        Column("id", T.UUID, "Payment id", "id"),
        Column("invoice_id", T.UUID, "Invoice id", "invoice_id"),
        Column("invoice_number", T.TEXT, "Invoice number", "number", join="i"),
        Column("received_on", T.DATE, "Received on", "received_on"),
        Column("amount_minor", T.MONEY, "Amount", "amount_minor", currency="currency"),
        Column("currency", T.TEXT, "Currency", "currency"),
        Column("method", T.ENUM, "Method", "method", values=("card", "bank_transfer", "cash", "check")),
        Column("created_at", T.TIMESTAMP, "Recorded at", "created_at"),
    ], [Join("i", "invoices", "invoice_id")]),
    *(snapshot_entity(t) for t in registered_snapshot_types()),
)}
