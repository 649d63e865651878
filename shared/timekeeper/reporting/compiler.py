"""Compile a checked query definition to one parameterized, workspace-scoped statement.

The statement is composed with psycopg's :mod:`psycopg.sql`: table, alias and column
identifiers come only from the catalogue (:class:`psycopg.sql.Identifier`), every value
(the workspace, each filter value, the limit) is a named placeholder bound at execution.
Nothing the user wrote is ever spliced into the text, so a filter value such as
``"x'); DROP TABLE invoices; --"`` is just a string compared with a column.

Shape of the statement::

    SELECT t.number AS "number", m.display_name AS "member_name", ...
      FROM invoices t
      LEFT JOIN members m ON m.workspace_id = t.workspace_id AND m.id = t.member_id
     WHERE t.workspace_id = %(workspace_id)s AND <filter> AND ...
     ORDER BY <sort keys>, t.id
     LIMIT %(limit)s

Every sort ends with the base row's id (an entity's ``order_key``), so an export's order
is total and repeatable.

A snapshot entity's statement always joins the version's ledger row (alias ``r``) and
reads published rows only: every period's current version (``r.is_current``), or the one
version a report section chose (``t.run_id = %(snapshot_run)s``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from timekeeper.db.connection import walled_query
from timekeeper.reporting.catalogue import CATALOGUE, SNAPSHOT_RUN, Column, Entity, Operator
from timekeeper.reporting.definition import QueryDefinition, check_definition
from timekeeper.topology import WORKER_STATEMENT_TIMEOUT_S

_COMPARISONS = {Operator.EQ: "=", Operator.NE: "<>", Operator.LT: "<", Operator.LTE: "<=", Operator.GT: ">",
                Operator.GTE: ">="}


@dataclass(frozen=True)
class CompiledQuery:
    """A statement ready to run: ``statement`` (composed SQL with named placeholders),
    ``params`` (name -> value, including ``workspace_id``), ``columns`` (the selected
    catalogue columns, in output order) and ``workspace_id``, the workspace it was compiled
    for: the runner walls the statement to it by row-level security as well
    (:func:`timekeeper.db.connection.walled_query`)."""

    statement: sql.Composed
    params: dict[str, Any]
    columns: tuple[Column, ...]
    workspace_id: UUID

    @property
    def headers(self) -> list[str]:
        """The output's column labels, in order."""
        return [c.label for c in self.columns]


def _like_pattern(text: str, *, prefix_only: bool) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%" if prefix_only else f"%{escaped}%"


class _Builder:
    def __init__(self, entity: Entity) -> None:
        self.entity = entity
        self.params: dict[str, Any] = {}
        self.joins: list[str] = []

    def ref(self, column: Column) -> sql.Composable:
        alias = column.join or "t"
        if column.join and column.join not in self.joins:
            self.joins.append(column.join)
        return sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(column.source))

    def bind(self, value: Any) -> sql.Placeholder:
        name = f"p{len(self.params)}"
        self.params[name] = value
        return sql.Placeholder(name)

    def condition(self, column: Column, op: Operator, value: Any) -> sql.Composable:
        ref = self.ref(column)
        if op in _COMPARISONS:
            return sql.SQL("{} {} {}").format(ref, sql.SQL(_COMPARISONS[op]), self.bind(value))
        if op is Operator.BETWEEN:
            return sql.SQL("{} BETWEEN {} AND {}").format(ref, self.bind(value[0]), self.bind(value[1]))
        if op is Operator.IN:
            return sql.SQL("{} = ANY({})").format(ref, self.bind(list(value)))
        if op is Operator.NOT_IN:
            return sql.SQL("NOT ({} = ANY({}))").format(ref, self.bind(list(value)))
        if op in (Operator.CONTAINS, Operator.STARTS_WITH):
            pattern = _like_pattern(value, prefix_only=op is Operator.STARTS_WITH)
            return sql.SQL("{} ILIKE {} ESCAPE '\\'").format(ref, self.bind(pattern))
        if op is Operator.IS_NULL:
            return sql.SQL("{} IS NULL").format(ref)
        if op is Operator.IS_NOT_NULL:
            return sql.SQL("{} IS NOT NULL").format(ref)
        raise AssertionError(op)


def compile_query(definition: QueryDefinition | Any, *, workspace_id: UUID,
                  snapshot_run: UUID | None = None) -> CompiledQuery:
    """Check ``definition`` against the catalogue and compile it for ``workspace_id``.

    ``snapshot_run``: for a snapshot entity, the one published version (its ledger run id)
    whose rows to read; None reads every period's current version. Raises
    :class:`~timekeeper.reporting.definition.InvalidDefinition` when it does not check (e.g.
    a stored version naming a column the catalogue no longer has), ``ValueError`` for a
    ``snapshot_run`` of an entity that is not a snapshot's.
    """
    checked = check_definition(definition)
    entity = CATALOGUE[checked.entity]
    if snapshot_run is not None and entity.snapshot is None:
        raise ValueError(f"{entity.name} is not a snapshot entity: it has no versions to choose")
    b = _Builder(entity)
    selected = tuple(entity.columns[name] for name in checked.columns)
    select = sql.SQL(", ").join(sql.SQL("{} AS {}").format(b.ref(c), sql.Identifier(c.name)) for c in selected)
    conditions: list[sql.Composable] = [
        sql.SQL("t.workspace_id = {}").format(sql.Placeholder("workspace_id"))]
    if entity.snapshot is not None:
        if SNAPSHOT_RUN.alias not in b.joins:
            b.joins.append(SNAPSHOT_RUN.alias)
        conditions.append(sql.SQL("r.state = 'published'"))
        conditions.append(sql.SQL("r.owner = {} AND r.snapshot_type = {}").format(b.bind(entity.snapshot[0]),
                                                                                   b.bind(entity.snapshot[1])))
        conditions.append(sql.SQL("r.is_current") if snapshot_run is None
                          else sql.SQL("t.run_id = {}").format(b.bind(snapshot_run)))
    for item in checked.filters:
        conditions.append(b.condition(entity.columns[item.column], item.op, item.value))
    order: list[sql.Composable] = []
    for key in checked.sort:
        order.append(sql.SQL("{} {}").format(b.ref(entity.columns[key.column]),
                                             sql.SQL("DESC" if key.direction == "desc" else "ASC")))
    order.extend(sql.SQL("t.{}").format(sql.Identifier(name)) for name in entity.order_key)
    joins = [sql.SQL("LEFT JOIN {table} {alias} ON {alias}.workspace_id = t.workspace_id "
                     "AND {alias}.id = t.{via}").format(table=sql.Identifier(entity.joins[a].table),
                                                        alias=sql.Identifier(a),
                                                        via=sql.Identifier(entity.joins[a].via))
             for a in b.joins]
    parts = [sql.SQL("SELECT {} FROM {} t").format(select, sql.Identifier(entity.table)), *joins,
             sql.SQL("WHERE {}").format(sql.SQL(" AND ").join(conditions)),
             sql.SQL("ORDER BY {}").format(sql.SQL(", ").join(order))]
    params = dict(b.params, workspace_id=workspace_id)
    if checked.limit is not None:
        parts.append(sql.SQL("LIMIT {}").format(sql.Placeholder("limit")))
        params["limit"] = checked.limit
    return CompiledQuery(statement=sql.SQL(" ").join(parts), params=params, columns=selected,
                         workspace_id=workspace_id)


def preview_rows(conn: psycopg.Connection, compiled: CompiledQuery, *, limit: int,
                 timeout_s: int = WORKER_STATEMENT_TIMEOUT_S) -> tuple[list[tuple[Any, ...]], bool]:
    """The first ``limit`` rows (tuples, in ``compiled.columns`` order) of ``compiled``
    and whether more follow, read inside the transaction open on ``conn`` (``RuntimeError``
    when none is) as an export reads them: walled to the query's workspace by row-level
    security (:func:`timekeeper.db.connection.walled_query`), under the export's statement
    timeout (``timeout_s`` seconds, transaction-local), and read-only: the transaction can
    write nothing from here on. Raises ``psycopg.errors.QueryCanceled`` when the statement
    outlasts the timeout."""
    conn.execute("SELECT set_config('transaction_read_only', 'on', true), "
                 "set_config('statement_timeout', %s, true)", (f"{int(timeout_s)}s",))
    limited = compiled.statement
    params = dict(compiled.params)
    if "limit" in params:
        params["limit"] = min(int(params["limit"]), limit + 1)
    else:
        limited = sql.SQL("{} LIMIT {}").format(compiled.statement, sql.Placeholder("limit"))
        params["limit"] = limit + 1
    with walled_query(conn, compiled.workspace_id), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(limited, params).fetchall()
    return rows[:limit], len(rows) > limit
