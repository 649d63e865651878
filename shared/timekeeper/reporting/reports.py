"""Reports: a title and 1..20 sections, each showing one saved query as a table or a chart.

A report has a name and a current version; each version's definition is checked when it
is saved and never changed afterwards. Editing appends version n + 1 and moves
``current_version`` (concurrent edits are serialized by the report's row lock, so versions
are numbered without gaps); deleting marks the report (``deleted_at``): it disappears from
listings and reads, and its versions stay for the renders that pinned them and for audit.

Two layers of checks, both naming the offending field with a dotted path:

* shape (pydantic, :class:`ReportDefinition`): title and heading lengths, 1..20 sections,
  the display kinds, no unknown keys (the API's request models embed it);
* meaning (:func:`check_report_definition`, against the workspace's saved queries): each
  section's query exists in the workspace (``sections[1].query_id``), a pinned version
  exists (``sections[1].query_version``), a chart names its columns and a table none, and
  a chart's columns are columns of that query
  version (``sections[0].label_column``), the value column numeric
  (``sections[0].value_column``). An unpinned section is checked against the query's
  current version at save time; at render time it runs whatever version is current then.

Both raise :class:`~timekeeper.reporting.definition.InvalidDefinition` (``field``,
``reason``). Functions take the caller's workspace and filter by it, run in the caller's
transaction or their own savepoint, and return frozen dataclasses. Instants are aware UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from timekeeper.db import load_queries
from timekeeper.db.rows import fetch_all, fetch_value
from timekeeper.reporting.catalogue import CATALOGUE, ColumnType
from timekeeper.reporting.definition import InvalidDefinition, _path
from timekeeper.reporting.store import QueryNotFound, get_version
from timekeeper.reporting.versioned import Document, DocumentVersion, VersionedDocuments
from timekeeper.schema_forms import whole_forms
from timekeeper.snapshots import ledger
from timekeeper.strict_input import JSON_INTEGER

#: Bounds of a report definition.
MIN_SECTIONS = 1
MAX_SECTIONS = 20
MAX_TITLE = 200
MAX_HEADING = 200
#: Column types a chart's value column may have (drawn as numbers).
NUMERIC_TYPES = frozenset({ColumnType.INTEGER, ColumnType.MONEY})

_Text = r"^[^\x00]*$"


class Display(StrEnum):
    """How a section shows its query's rows."""

    TABLE = "table"
    BAR_CHART = "bar_chart"
    LINE_CHART = "line_chart"


class ReportNotFound(LookupError):
    """No such (undeleted) report, or version, in the workspace."""


class PeriodChoice(BaseModel):
    """Which published version of a snapshot a section shows: ``latest`` (the current
    version of the latest published month, whichever that is when rendered), ``month``
    (the current version of ``month``, ``YYYY-MM``, when rendered) or ``version`` (version
    ``version`` of ``month``, pinned: it never changes)."""

    model_config = ConfigDict(extra="forbid")

    choice: Literal["latest", "month", "version"]
    month: Annotated[str, StringConstraints(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])$")] | None = Field(
        None, description="YYYY-MM, the workspace-local month (choices month and version)")
    version: Annotated[int, Field(ge=1), JSON_INTEGER] | None = Field(
        None, description="the pinned version of the month (choice version)")

    @property
    def period(self) -> date | None:
        """The chosen month's first day (None for ``latest``)."""
        return None if self.month is None else date(int(self.month[:4]), int(self.month[5:]), 1)


class Section(BaseModel):
    """One section: ``heading``, the saved query ``query_id`` at ``query_version`` (None:
    the query's current version at render time), shown as ``display``. Charts name the
    query column giving each point's label (``label_column``) and the numeric column giving
    its value (``value_column``); a table shows every column and names neither (checked
    by :func:`check_section_columns`; the schema says the same as two forms). ``period``:
    the version of a snapshot entity's rows the section shows (None: ``latest``); only for
    a query over a snapshot entity."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema: _section_forms(schema))

    heading: Annotated[str, StringConstraints(min_length=1, max_length=MAX_HEADING, pattern=_Text)]
    query_id: UUID
    query_version: Annotated[int, Field(ge=1), JSON_INTEGER] | None = Field(
        None, description="None: the query's current version when rendered")
    display: Display = Display.TABLE
    label_column: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    value_column: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    period: PeriodChoice | None = Field(None, description="a snapshot query's version: latest (the default), "
                                        "a named month or a pinned version")


def _section_forms(schema: dict[str, Any]) -> None:
    """Publish the table/chart rule of :func:`check_section_columns` that JSON Schema can
    say: a table (``display`` left out or ``table``) names no label or value column, a
    chart names both (whether the query selects them, the value numeric, is checked
    against the stored query)."""
    column = {"type": "string", "minLength": 1, "maxLength": 64}
    # null or left out (an enum of null: some generators cannot type a ``type: null`` property)
    no_column = {"enum": [None], "description": "a table names no column"}
    whole_forms(schema, [
        {"title": "TableSection", "properties": {
            "display": {"type": "string", "const": Display.TABLE.value, "default": Display.TABLE.value},
            "label_column": no_column, "value_column": no_column}},
        {"title": "ChartSection", "required": ["display", "label_column", "value_column"],
         "properties": {"display": {"type": "string", "enum": [Display.BAR_CHART.value, Display.LINE_CHART.value]},
                        "label_column": column, "value_column": column}},
    ])


class ReportDefinition(BaseModel):
    """What a report version shows: ``title`` and 1..20 ``sections``, in order."""

    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TITLE, pattern=_Text)]
    sections: list[Section] = Field(min_length=MIN_SECTIONS, max_length=MAX_SECTIONS)


def parse_report_definition(data: Any) -> ReportDefinition:
    """Shape-check ``data`` (JSON-like, or a :class:`ReportDefinition`); raises
    :class:`InvalidDefinition` naming the first offending field (``"sections[2].display"``)."""
    if isinstance(data, ReportDefinition):
        return data
    try:
        return ReportDefinition.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = list(first.get("loc") or ())
        reason = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        if first.get("type") == "extra_forbidden":
            reason = "unknown field"
        elif first.get("type") == "missing":
            reason = "required"
        raise InvalidDefinition(_path(loc) or "definition", reason) from None


def query_columns(definition: dict[str, Any]) -> dict[str, ColumnType]:
    """Name -> type of the columns a stored query definition selects (empty when its entity
    is unknown)."""
    entity = CATALOGUE.get(str(definition.get("entity")))
    if entity is None:
        return {}
    return {name: entity.columns[name].type for name in definition.get("columns") or []
            if isinstance(name, str) and name in entity.columns}


def check_section_columns(section: Section, columns: dict[str, ColumnType], index: int) -> None:
    """Raise :class:`InvalidDefinition` unless a chart names its label and value columns,
    both among ``columns`` (the query version's selected columns), the value column
    numeric; a table names neither."""
    where = f"sections[{index}]"
    if section.display is Display.TABLE:
        for name in ("label_column", "value_column"):
            if getattr(section, name) is not None:
                raise InvalidDefinition(f"{where}.{name}", "a table shows every column; this is for charts")
        return
    for name in ("label_column", "value_column"):
        if getattr(section, name) is None:
            raise InvalidDefinition(f"{where}.{name}", "a chart needs its label and value columns")
    if section.label_column not in columns:
        raise InvalidDefinition(f"{where}.label_column",
                                f"the query selects no column {section.label_column!r}")
    if section.value_column not in columns:
        raise InvalidDefinition(f"{where}.value_column",
                                f"the query selects no column {section.value_column!r}")
    if columns[section.value_column] not in NUMERIC_TYPES:
        raise InvalidDefinition(f"{where}.value_column",
                                f"{section.value_column!r} is not numeric (integer or money)")


def query_snapshot(definition: dict[str, Any]) -> tuple[str, str] | None:
    """``(owner, type)`` of the snapshot a stored query definition reads, None for other data."""
    entity = CATALOGUE.get(str(definition.get("entity")))
    return None if entity is None else entity.snapshot


def section_snapshots(conn: psycopg.Connection, *, workspace_id: UUID,
                      definition: ReportDefinition) -> list[tuple[str, str] | None]:
    """Per section of ``definition`` (in order), ``(owner, type)`` of the snapshot its query
    reads at the section's version (its pinned ``query_version``, else the query's current
    one), None for a section over other data or whose query is gone."""
    found: list[tuple[str, str] | None] = []
    for section in definition.sections:
        try:
            version = get_version(conn, workspace_id=workspace_id, query_id=section.query_id,
                                  version=section.query_version)
        except QueryNotFound:
            found.append(None)
            continue
        found.append(query_snapshot(version.definition))
    return found


def check_section_period(section: Section, snapshot: tuple[str, str] | None, index: int) -> None:
    """Raise :class:`InvalidDefinition` unless the section's ``period`` fits its query: none
    for other data; for a snapshot, ``month`` with choices ``month`` and ``version`` only,
    ``version`` with choice ``version`` only."""
    where = f"sections[{index}].period"
    chosen = section.period
    if chosen is None:
        return
    if snapshot is None:
        raise InvalidDefinition(where, "the section's query reads no snapshot; a period is for snapshot queries")
    if chosen.choice == "latest" and chosen.month is not None:
        raise InvalidDefinition(f"{where}.month", "latest takes no month (choose month or version)")
    if chosen.choice in ("month", "version") and chosen.month is None:
        raise InvalidDefinition(f"{where}.month", f"{chosen.choice} needs the month (YYYY-MM)")
    if chosen.choice == "version" and chosen.version is None:
        raise InvalidDefinition(f"{where}.version", "version needs the version number to pin")
    if chosen.choice != "version" and chosen.version is not None:
        raise InvalidDefinition(f"{where}.version", "only the version choice pins a version")


def check_report_definition(conn: psycopg.Connection, *, workspace_id: UUID,
                            definition: ReportDefinition | Any) -> ReportDefinition:
    """Shape-check ``definition`` and check each section against the workspace's saved
    queries (see the module docstring); return the parsed definition. Raises
    :class:`InvalidDefinition` naming the field."""
    parsed = parse_report_definition(definition)
    for index, section in enumerate(parsed.sections):
        try:
            version = get_version(conn, workspace_id=workspace_id, query_id=section.query_id,
                                  version=section.query_version)
        except QueryNotFound:
            live = fetch_value(conn, SQL["query_liveness"], (workspace_id, section.query_id))
            if section.query_version is not None and live is not None:
                raise InvalidDefinition(f"sections[{index}].query_version",
                                        f"the query has no version {section.query_version}") from None
            raise InvalidDefinition(f"sections[{index}].query_id", "no such saved query in this workspace") from None
        check_section_columns(section, query_columns(version.definition), index)
        snapshot = query_snapshot(version.definition)
        check_section_period(section, snapshot, index)
        chosen = section.period
        if snapshot is not None and chosen is not None and chosen.choice == "version":
            found = ledger.published_version(conn, owner=snapshot[0], snapshot_type=snapshot[1],
                                             workspace_id=workspace_id, period=chosen.period, version=chosen.version)
            if found is None:
                raise InvalidDefinition(f"sections[{index}].period.version",
                                        f"{chosen.month} has no published version {chosen.version}")
    return parsed


@dataclass(frozen=True)
class Report(Document):
    """A report: a :class:`~timekeeper.reporting.versioned.Document`."""


@dataclass(frozen=True)
class ReportVersion(DocumentVersion):
    """One immutable version of the report ``report_id``."""

    report_id: UUID

    def parsed(self) -> ReportDefinition:
        """The stored definition, shape-checked (raises :class:`InvalidDefinition`)."""
        return parse_report_definition(self.definition)


SQL = load_queries("timekeeper.reporting", "reports.sql")
_REPORTS = VersionedDocuments(SQL, Report, ReportVersion, ReportNotFound, "report")


def _stored(conn: psycopg.Connection, workspace_id: UUID, definition: ReportDefinition | Any) -> Jsonb:
    checked = check_report_definition(conn, workspace_id=workspace_id, definition=definition)
    return Jsonb(checked.model_dump(mode="json"))


def create_report(conn: psycopg.Connection, *, workspace_id: UUID, name: str, definition: ReportDefinition | Any,
                  actor: str, now: datetime) -> tuple[Report, ReportVersion]:
    """Save a new report with version 1 of ``definition``. Raises
    :class:`InvalidDefinition` naming the field (``sections[0].query_id``)."""
    return _REPORTS.create(conn, workspace_id=workspace_id, fields=(name,),
                           stored=_stored(conn, workspace_id, definition), actor=actor, now=now)


def update_report(conn: psycopg.Connection, *, workspace_id: UUID, report_id: UUID,
                  definition: ReportDefinition | Any, actor: str, now: datetime,
                  name: str | None = None) -> tuple[Report, ReportVersion]:
    """Append a version with ``definition`` and make it current (``name`` changes too when
    given). Concurrent updates are serialized by the report's row lock. Raises
    :class:`ReportNotFound`, :class:`InvalidDefinition`."""
    return _REPORTS.append(conn, workspace_id=workspace_id, document_id=report_id, changes=(name,),
                           stored=_stored(conn, workspace_id, definition), actor=actor, now=now)


def get_report(conn: psycopg.Connection, *, workspace_id: UUID, report_id: UUID) -> tuple[Report, ReportVersion]:
    """The undeleted report ``report_id`` and its current version; raises :class:`ReportNotFound`."""
    with conn.transaction():
        report = _REPORTS.get(conn, workspace_id=workspace_id, document_id=report_id)
        version = _REPORTS.get_version(conn, workspace_id=workspace_id, document_id=report_id,
                                       version=report.current_version)
    return report, version


def get_report_version(conn: psycopg.Connection, *, workspace_id: UUID, report_id: UUID,
                       version: int) -> ReportVersion:
    """Version ``version`` of the report (readable even when the report was deleted: a
    render pinned it). Raises :class:`ReportNotFound`."""
    return _REPORTS.get_version(conn, workspace_id=workspace_id, document_id=report_id, version=version)


def list_report_versions(conn: psycopg.Connection, *, workspace_id: UUID, report_id: UUID) -> list[ReportVersion]:
    """Every version of the report, oldest first (empty when there is no such report)."""
    return _REPORTS.versions(conn, workspace_id=workspace_id, document_id=report_id)


def list_reports(conn: psycopg.Connection, *, workspace_id: UUID, after: tuple[datetime, UUID] | None = None,
                 limit: int = 50) -> list[Report]:
    """A page of the workspace's undeleted reports, oldest first, after the keyset
    ``(created_at, id)`` of the previous page's last row (:func:`timekeeper.db.keyset.keyset_rows`)."""
    return _REPORTS.page(conn, workspace_id=workspace_id, after=after, limit=limit)


def delete_report(conn: psycopg.Connection, *, workspace_id: UUID, report_id: UUID, now: datetime,
                  actor: str = "timekeeper") -> None:
    """Mark the report deleted (its versions and renders stay). Raises
    :class:`ReportNotFound` when there is no such undeleted report."""
    _REPORTS.delete(conn, workspace_id=workspace_id, document_id=report_id, now=now, actor=actor)


@dataclass(frozen=True)
class ReportSummary:
    """What a report list shows of a report's current version: its ``sections`` count and
    who saved it (``updated_by``)."""

    report_id: UUID
    sections: int
    updated_by: str


def report_summaries(conn: psycopg.Connection, *, workspace_id: UUID,
                     report_ids: list[UUID]) -> dict[UUID, ReportSummary]:
    """Report id -> :class:`ReportSummary` of its current version, for the workspace's
    reports among ``report_ids`` (others are left out)."""
    if not report_ids:
        return {}
    with conn.transaction():
        rows = fetch_all(conn, SQL["report_summaries"], (workspace_id, list(report_ids)), ReportSummary)
    return {row.report_id: row for row in rows}


@dataclass(frozen=True)
class ReportUse:
    """A delivery schedule whose source is a report: its ``schedule_id`` and ``name``."""

    schedule_id: UUID
    name: str


def report_deliveries(conn: psycopg.Connection, *, workspace_id: UUID, report_id: UUID) -> list[ReportUse]:
    """The workspace's undeleted delivery schedules whose source is ``report_id`` (they
    render its current version when they run), by name."""
    with conn.transaction():
        return fetch_all(conn, SQL["report_deliveries"], (workspace_id, report_id), ReportUse)
