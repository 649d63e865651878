"""Rendering a report version to a PDF in the files bucket, keyed by an idempotency key.

Two steps, run by different processes:

* :func:`request_render` (the API, or a delivery run) inserts -- or finds -- the
  ``report_renders`` row of ``(workspace, idempotency key)``, pinning the report's
  CURRENT version at the first request. The caller then asks the renderer function to run
  it (:class:`timekeeper.aws.renderer.RendererClient`) after its commit, and polls the
  row. Asking again for a row that is not terminal is harmless.
* :func:`render` (the renderer function) runs the row: a succeeded row is returned as it
  is (its object was written once); otherwise the attempt is counted durably
  (``rendering``, ``attempts + 1``), the requester's access is checked with THE access
  rule (:func:`timekeeper.platform.access.check_report`), each section's query runs
  (compiled, workspace-scoped, in one read-only snapshot; a table shows at most
  :data:`TABLE_ROW_CAP` rows, a chart :data:`CHART_POINT_CAP` points, and the PDF says
  when rows were left out), the PDF is built
  (:func:`timekeeper.reporting.pdf.build_pdf`) and written to
  :func:`object_key` ``reports/<workspace>/<sha256(idempotency key)>.pdf``, and the row
  records the key, the size, the page count and the object's SHA-256.

A section over a snapshot entity shows one published version, resolved in the sections'
snapshot from its period choice (:class:`~timekeeper.reporting.reports.PeriodChoice`);
the row records each such section's basis (``snapshot_basis``: type, period, version,
publication instant, run id and the choice), and the PDF names it under the heading.

The PDF is deterministic: its creation date is the render's ``requested_at`` and its
producer fixed, so the same version over the same rows gives the same bytes. A retry after
a crash between the upload and the record overwrites the same key with the same content.

Failure codes recorded on the row (``error_code``; ``error_message`` says more, never
personal data):

=========================  ==========================================================
an access reason           the requester may no longer read the report: one of
                           :data:`ACCESS_CODES` (``not_a_member``, ``left_workspace``,
                           ``user_deactivated``, ``missing_role``, ``not_found``: the
                           report was deleted), exactly the access rule's reason
``definition_invalid``     a section's query version no longer compiles, its query
                           was deleted (unpinned section) or a chart column is gone
``snapshot_unpublished``   a snapshot section's chosen period has no published version
                           (the latest: none yet; a named month: not published yet)
``attempts_exhausted``     earlier attempts died without a record (timeouts) and the
                           attempt limit is reached
``unexpected_error``       the final attempt raised (the exception's type is kept)
=========================  ==========================================================

Expected failures are recorded and returned, never raised; an unexpected fault on an
attempt below the limit is raised so the invoker (Lambda's asynchronous retries) tries
again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db import load_queries
from timekeeper.db.attempts import AttemptRule, Failure, Fence, Lease, Lifecycle, record_outcome, settle_failed
from timekeeper.db.connection import set_tenant, walled_query
from timekeeper.db.idempotency import KeyReused
from timekeeper.db.rows import fetch_one, fetch_value
from timekeeper.observability import logger
from timekeeper.platform import access
from timekeeper.reporting.compiler import compile_query
from timekeeper.reporting.definition import InvalidDefinition
from timekeeper.reporting.objects import RENDER_FILES, ObjectStore
from timekeeper.reporting.pdf import CHART_POINT_CAP, TABLE_ROW_CAP, SectionData, build_pdf
from timekeeper.reporting.presentation import Presentation, presentation_of
from timekeeper.reporting.reports import (
    Display,
    ReportDefinition,
    ReportNotFound,
    Section,
    check_section_columns,
    check_section_period,
    get_report_version,
    query_columns,
    query_snapshot,
)
from timekeeper.reporting.store import QueryNotFound, get_version
from timekeeper.snapshots import ledger
from timekeeper.topology import REPORT_RENDERER

#: The content type of a rendered report.
PDF_CONTENT_TYPE = "application/pdf"

DEFINITION_INVALID = "definition_invalid"
SNAPSHOT_UNPUBLISHED = "snapshot_unpublished"
ATTEMPTS_EXHAUSTED = "attempts_exhausted"
UNEXPECTED_ERROR = "unexpected_error"
#: The failure codes that mean "the requester may not read the report now" (the access
#: rule's reasons): a delivery treats them as loss of access to its source.
ACCESS_CODES = frozenset({access.NOT_A_MEMBER, access.LEFT_WORKSPACE, access.USER_DEACTIVATED,
                          access.MISSING_ROLE, access.NOT_FOUND})
TERMINAL_STATES = frozenset({"succeeded", "failed"})


class RenderNotFound(LookupError):
    """No such render in the workspace."""


@dataclass(frozen=True)
class ReportRender:
    """A ``report_renders`` row. ``state``: ``requested`` -> ``rendering`` -> ``succeeded`` |
    ``failed``; ``object_key``, ``byte_size`` (bytes), ``sha256`` (hex) and ``page_count``
    are set when it succeeded; ``error_code`` / ``error_message`` when it failed. Instants
    are aware UTC."""

    id: UUID
    workspace_id: UUID
    idempotency_key: str
    report_id: UUID
    report_version: int
    requested_by: str
    state: str
    attempts: int
    object_key: str | None
    byte_size: int | None
    sha256: str | None
    page_count: int | None
    error_code: str | None
    error_message: str | None
    requested_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    #: The rows each section showed, in section order (set when it succeeded; None for a
    #: render recorded before the counts were kept).
    section_row_counts: list[int] | None = None
    #: Per section, in order, the published snapshot version it showed (``owner``,
    #: ``snapshot_type``, ``period`` YYYY-MM-DD, ``version``, ``published_at`` ISO 8601 UTC,
    #: ``run_id``, ``choice``) or None for a section over other data; None when no section
    #: reads a snapshot (or the render has not succeeded).
    snapshot_basis: list[dict[str, Any] | None] | None = None
    #: The month (its first day) the request picked for the snapshot sections, or None:
    #: each section's own choice (see :func:`request_render`).
    period: date | None = None

    @property
    def empty(self) -> bool:
        """Whether the report came out empty: every section returned no rows (False while
        the counts are unknown)."""
        return self.section_row_counts is not None and all(count == 0 for count in self.section_row_counts)

    @property
    def terminal(self) -> bool:
        """Whether the render succeeded or failed (nothing will change it again)."""
        return self.state in TERMINAL_STATES


SQL = load_queries("timekeeper.reporting", "rendering.sql")


#: The renders' declaration to the one lifecycle (:mod:`timekeeper.db.attempts`): fenced by
#: the attempt number, leased from the attempt's start for the renderer's timeout.
RENDER_LIFECYCLE = Lifecycle(name="render", table="report_renders", open_states=("requested", "rendering"),
                             fence=Fence.ATTEMPT_NUMBER, lease=Lease.STARTED_PLUS_TIMEOUT, error_message_limit=1000,
                             row=ReportRender, statements={"finish_failed": SQL["finish_failed"],
                                                           "row_by_id": SQL["render_by_id"]})


def object_key(workspace_id: UUID, idempotency_key: str) -> str:
    """The files-bucket key of a render: ``reports/<workspace_id>/<sha256 hex of the key>.pdf``
    (:data:`~timekeeper.reporting.objects.RENDER_FILES`: the key itself may hold any
    printable text; its hash is a safe, fixed-length name)."""
    return RENDER_FILES.key(workspace_id, idempotency_key, "pdf")


def _fetch(conn: psycopg.Connection, query: str, params: Sequence[Any] | dict[str, Any]) -> ReportRender | None:
    return fetch_one(conn, query, params, ReportRender)


def get_render(conn: psycopg.Connection, *, workspace_id: UUID, render_id: UUID) -> ReportRender:
    """The render ``render_id`` of the workspace; raises :class:`RenderNotFound`."""
    with conn.transaction():
        row = _fetch(conn, SQL["get_render"], (workspace_id, render_id))
    if row is None:
        raise RenderNotFound(render_id)
    return row


def request_render(conn: psycopg.Connection, *, workspace_id: UUID, report_id: UUID, idempotency_key: str,
                   requested_by: str, now: datetime, period: date | None = None) -> ReportRender:
    """Insert or return the render of ``(workspace_id, idempotency_key)``.

    The first request pins the report's current version and records ``requested_by`` (the
    person whose access :func:`render` checks), ``requested_at`` = ``now`` and ``period``
    (a month's first day: every snapshot section whose choice is ``latest`` or ``month``
    shows that month; a section pinned to a version keeps it; None: each section's own
    choice); a repeated request returns that row unchanged, whatever its state. The
    caller's own permission is the caller's to check (the API checks its caller with the
    access rule first). Raises :class:`ReportNotFound` (no such undeleted report),
    :class:`~timekeeper.db.idempotency.KeyReused` (the key names a render of another report, or of another
    period) and ``ValueError`` for a ``period`` that is not a month's first day.
    """
    if period is not None and period.day != 1:
        raise ValueError(f"period: {period} is not a month's first day")
    with conn.transaction():
        select = SQL["render_by_key"]
        existing = _fetch(conn, select, (workspace_id, idempotency_key))
        if existing is None:
            existing = _fetch(
                conn, SQL["insert_render"],
                (idempotency_key, requested_by, now, period, workspace_id, report_id))
            if existing is None:
                # Either no such report, or a concurrent request inserted the key first.
                existing = _fetch(conn, select, (workspace_id, idempotency_key))
                if existing is None:
                    raise ReportNotFound(report_id)
    if existing.report_id != report_id or existing.period != period:
        raise KeyReused("a render of another report or month")
    return existing


# ------------------------------------------------------------------------------ rendering


@dataclass(frozen=True)
class _Read:
    """What an attempt read in its one snapshot: the definition, each section's rows and
    the workspace's presentation."""

    definition: ReportDefinition
    sections: list[SectionData]
    presentation: Presentation


def _section_data(conn: psycopg.Connection, workspace_id: UUID, section: Section, index: int,
                  picked: date | None = None) -> SectionData | Failure:
    """Section ``index``'s rows, or the :class:`~timekeeper.db.attempts.Failure` that
    refuses the render (``definition_invalid``, ``snapshot_unpublished``)."""
    where = f"sections[{index}]"
    try:
        version = get_version(conn, workspace_id=workspace_id, query_id=section.query_id,
                              version=section.query_version)
    except QueryNotFound:
        return Failure(DEFINITION_INVALID, f"{where}.query_id: the saved query was deleted or does not exist")
    try:
        snapshot = query_snapshot(version.definition)
        check_section_columns(section, query_columns(version.definition), index)
        check_section_period(section, snapshot, index)
        basis = None if snapshot is None else _snapshot_basis(conn, workspace_id, section, snapshot, where, picked)
        if isinstance(basis, Failure):
            return basis
        compiled = compile_query(version.definition, workspace_id=workspace_id,
                                 snapshot_run=None if basis is None else UUID(basis["run_id"]))
    except InvalidDefinition as error:
        field = error.field if error.field.startswith(where) else f"{where} (query version {version.version}): " \
                                                                   f"{error.field}"
        return Failure(DEFINITION_INVALID, f"{field}: {error.reason}")
    query_name = fetch_value(conn, SQL["query_name"], (workspace_id, section.query_id))
    cap = TABLE_ROW_CAP if section.display is Display.TABLE else CHART_POINT_CAP
    columns = tuple(c.name for c in compiled.columns)
    with walled_query(conn, workspace_id), \
            conn.cursor(name=f"report_section_{index}", row_factory=psycopg.rows.tuple_row) as cur:
        cur.execute(compiled.statement, compiled.params)
        fetched = cur.fetchmany(cap + 1)
    return SectionData(section=section, query_name=query_name if query_name is not None else "",
                       query_version=version.version,
                       columns=columns, headers=tuple(compiled.headers), rows=tuple(fetched[:cap]),
                       truncated=len(fetched) > cap, basis=basis, kinds=compiled.columns)


def _snapshot_basis(conn: psycopg.Connection, workspace_id: UUID, section: Section, snapshot: tuple[str, str],
                    where: str, picked: date | None = None) -> dict[str, Any] | Failure:
    """The published version a snapshot section shows, resolved now from its period choice
    (None: latest) or, unless the section pins a version, from the month the render
    ``picked`` (its choice is then ``month``); refused ``snapshot_unpublished`` when there
    is none."""
    chosen = section.period
    choice = "latest" if chosen is None else chosen.choice
    period = None if chosen is None else chosen.period
    version = None if chosen is None else chosen.version
    if picked is not None and choice != "version":
        choice, period = "month", picked
    found = ledger.published_version(conn, owner=snapshot[0], snapshot_type=snapshot[1], workspace_id=workspace_id,
                                     period=period, version=version)
    if found is None:
        wanted = "any month" if period is None else f"{period:%Y-%m}" + (
            f" version {version}" if version is not None else "")
        return Failure(SNAPSHOT_UNPUBLISHED, f"{where}.period: {snapshot[0]}/{snapshot[1]} has no published "
                                             f"version of {wanted}")
    assert found.published_at is not None
    return {"owner": found.owner, "snapshot_type": found.snapshot_type, "period": found.period.isoformat(),
            "version": found.version, "published_at": found.published_at.astimezone(UTC).isoformat(),
            "run_id": str(found.id), "choice": choice}


def _start(conn: psycopg.Connection, workspace_id: UUID, render_id: UUID, now: datetime,
           max_attempts: int) -> ReportRender:
    with conn.transaction():
        row = _fetch(conn, SQL["lock_render"], (workspace_id, render_id))
        if row is None:
            raise RenderNotFound(render_id)
        if row.terminal:
            return row
        if AttemptRule(max_attempts=max_attempts).exhausted(row.attempts):
            return _finish_failed(conn, row, Failure(ATTEMPTS_EXHAUSTED, f"{row.attempts} attempts ended without a "
                                                                         "result (timeouts?)"), now)
        started = _fetch(conn, SQL["start_render"], (now, render_id))
    assert started is not None
    return started


def _finish_failed(conn: psycopg.Connection, row: ReportRender, failure: Failure, now: datetime) -> ReportRender:
    """Record ``failure`` of attempt ``row.attempts`` in a transaction of its own (fenced: a
    later attempt wins)."""
    with conn.transaction():
        return settle_failed(conn, RENDER_LIFECYCLE, row, failure, now=now)


def render(conn: psycopg.Connection, s3: ObjectStore, bucket: str, *, workspace_id: UUID, render_id: UUID,
           now: datetime, max_attempts: int = REPORT_RENDERER.max_attempts,
           reconnect: Callable[[], psycopg.Connection] | None = None) -> ReportRender:
    """Run render ``render_id`` of ``workspace_id`` once (see the module docstring) and
    return its row as it stands afterwards.

    ``conn``: an idle autocommit connection (the workers' login); ``s3``: an S3 client;
    ``bucket``: the files bucket; ``now``: the clock (aware UTC); ``max_attempts``: the
    attempts the invoker makes in all (1 + Lambda's asynchronous retries); ``reconnect``:
    returns a fresh idle autocommit connection (the edge's provider), used when ``conn``
    was lost (a failover, a network cut) before the attempt's outcome was recorded: the
    outcome (succeeded, or the last attempt's failure) is then recorded once more on a
    new connection, so a cut cannot leave the render ``rendering`` (fenced by the
    attempt: a later attempt's record wins). Without it, or when the new connection fails
    too, the fault is raised and the render is left to the renderers' sweep
    (:func:`sweep_renders`).

    Idempotency: a succeeded render does nothing and returns its row (its object was
    written once); a retry of an unfinished one writes the same key again, with the same
    bytes for the same data. Raises :class:`RenderNotFound` for an unknown render; an
    unexpected fault (database, S3) on an attempt below ``max_attempts`` is raised for
    the invoker to retry, on the last attempt recorded as ``unexpected_error``.
    """
    row = _start(conn, workspace_id, render_id, now, max_attempts)
    if row.terminal:
        return row
    try:
        read = _read(conn, row)
        if isinstance(read, Failure):
            failure = read
            return _settle(conn, reconnect, lambda on: _finish_failed(on, row, failure, now))
        sections = read.sections
        pdf, pages = build_pdf(read.definition, sections, report_version=row.report_version,
                               requested_at=row.requested_at, presentation=read.presentation)
        key = object_key(workspace_id, row.idempotency_key)
        digest = hashlib.sha256(pdf).hexdigest()
        s3.put_object(Bucket=bucket, Key=key, Body=pdf, ContentType=PDF_CONTENT_TYPE,
                      Metadata={"sha256": digest, "render-id": str(row.id)})
        succeeded = (key, len(pdf), digest, pages, now, [len(data.rows) for data in sections],
                     _basis_column(sections), row.id, row.attempts)
    except Exception as error:
        if AttemptRule(max_attempts=max_attempts).final(attempt=row.attempts):
            last = Failure(UNEXPECTED_ERROR, f"{type(error).__name__} on the last attempt")
            return _settle(conn, reconnect, lambda on: _finish_failed(on, row, last, now))
        raise
    return _settle(conn, reconnect, lambda on: _finish_succeeded(on, row, succeeded))


def _read(conn: psycopg.Connection, row: ReportRender) -> _Read | Failure:
    """Read what attempt ``row`` renders, in one read-only snapshot of the workspace: the
    requester's access (THE access rule), the pinned report version and each section's
    rows. Returns the first :class:`~timekeeper.db.attempts.Failure` met instead (an
    access reason, ``definition_invalid``, ``snapshot_unpublished``, ``not_found`` for a
    report version that is gone); the database's faults propagate."""
    workspace_id = row.workspace_id
    with conn.transaction():
        conn.execute(SQL["begin_snapshot"])
        set_tenant(conn, workspace_id)
        decision = access.check_report(conn, workspace_id=workspace_id, user_id=row.requested_by,
                                       report_id=row.report_id, permission=access.REPORTS_READ)
        if not decision:
            return Failure(decision.reason or access.NOT_FOUND, f"the requester may not read the report: "
                                                                f"{decision.reason}")
        try:
            version = get_report_version(conn, workspace_id=workspace_id, report_id=row.report_id,
                                         version=row.report_version)
        except ReportNotFound:
            return Failure(access.NOT_FOUND, "the report version is gone")
        try:
            definition = version.parsed()
        except InvalidDefinition as error:
            return Failure(DEFINITION_INVALID, f"report version {version.version}: {error}")
        sections: list[SectionData] = []
        for i, section in enumerate(definition.sections):
            data = _section_data(conn, workspace_id, section, i, row.period)
            if isinstance(data, Failure):
                return data
            sections.append(data)
        return _Read(definition, sections, presentation_of(conn, workspace_id))


def _finish_succeeded(conn: psycopg.Connection, row: ReportRender, values: tuple[Any, ...]) -> ReportRender:
    """Record attempt ``row.attempts``'s PDF (fenced: a later attempt's record wins)."""
    with conn.transaction():
        done = _fetch(conn, SQL["finish_succeeded"], values)
        if done is None:  # another attempt took over and settled it
            done = _fetch(conn, SQL["render_by_id"], {"id": row.id})
    assert done is not None
    return done


def _settle(conn: psycopg.Connection, reconnect: Callable[[], psycopg.Connection] | None,
            record: Callable[[psycopg.Connection], ReportRender]) -> ReportRender:
    """Record an attempt's outcome, once more on a new connection when ``conn`` was lost
    (:func:`~timekeeper.db.attempts.record_outcome`)."""
    return record_outcome(conn, reconnect, record, name="render")


class RenderRequester(Protocol):
    """Asks the renderer for a committed render (:class:`timekeeper.aws.renderer.RendererClient`)."""

    def request(self, *, workspace_id: UUID, render_id: UUID) -> None: ...


@dataclass(frozen=True)
class SweepResult:
    """What one pass of :func:`sweep_renders` did: ``settled`` renders failed
    ``attempts_exhausted``, ``reoffered`` asked for again (``refused``: of those, the asks
    the renderer's client refused; they are asked again a re-offer period later)."""

    settled: int = 0
    reoffered: int = 0
    refused: int = 0


def sweep_renders(conn: psycopg.Connection, renderer: RenderRequester, *, now: datetime, lease: timedelta,
                  reoffer_after: timedelta, max_attempts: int,
                  limit: int = REPORT_RENDERER.sweep_per_pass) -> SweepResult:
    """Settle or re-offer up to ``limit`` unfinished renders nothing will finish otherwise
    (the renderers' one recovery path, run by a dispatcher's owner-wide pass), oldest
    first, and return what it did.

    * A render whose attempts ran out (``attempts >= max_attempts``) and whose last
      attempt started at least ``lease`` before ``now`` (the renderer's timeout: that
      attempt has ended) is settled ``failed`` / ``attempts_exhausted``: its last attempt
      died, or lost its connection, before recording an outcome.
    * A render (``requested`` or ``rendering``) whose request, last attempt start and last
      re-offer are all at least ``reoffer_after`` before ``now`` (nothing of the invoker's
      can still run it: a refused or lost invocation, an attempt that died before it
      started) is asked for again with ``renderer`` after the pass commits
      (``reoffered_at`` = ``now``, ``reoffers`` + 1); one already re-offered
      ``max_attempts`` times is settled ``attempts_exhausted`` instead.

    ``conn``: an idle autocommit connection; instants aware UTC; durations
    ``timedelta``. Every decision is on the database's timestamps and ``now``, never on
    how fast anything ran. A re-offered render that an old attempt finishes meanwhile
    ignores the ask (a finished render does nothing). Raises ``psycopg.Error`` when the
    database fails (nothing is committed then); an ask the renderer refuses is logged and
    counted in ``refused``.
    """
    with conn.transaction(), conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        stale = cur.execute(SQL["stale_renders"], {
            "max_attempts": max_attempts, "lease_before": now - lease, "idle_before": now - reoffer_after,
            "limit": limit}).fetchall()
        rule = AttemptRule(max_attempts=max_attempts)  # a re-offer counts against the same limit
        exhausted = [r["id"] for r in stale if rule.exhausted(r["attempts"]) or rule.exhausted(r["reoffers"])]
        again = [r["id"] for r in stale if r["id"] not in set(exhausted)]
        settled = cur.execute(SQL["settle_stale_renders"], {"now": now, "ids": exhausted}).fetchall() \
            if exhausted else []
        asked = cur.execute(SQL["mark_reoffered"], {"now": now, "ids": again}).fetchall() if again else []
    refused = 0
    for row in asked:
        try:
            renderer.request(workspace_id=row["workspace_id"], render_id=row["id"])
        except Exception as error:  # noqa: BLE001 - asked again a re-offer period later (bounded)
            refused += 1
            logger.warning("render not re-offered; asked again later",
                           extra={"render_id": str(row["id"]), "error_type": type(error).__name__})
    if settled or asked:
        logger.info("renders swept", extra={"settled": [str(r["id"]) for r in settled],
                                            "reoffered": [str(r["id"]) for r in asked]})
    return SweepResult(settled=len(settled), reoffered=len(asked), refused=refused)


def _basis_column(sections: Sequence[SectionData]) -> Jsonb | None:
    """The render's ``snapshot_basis`` value: per section its basis, NULL when none has one."""
    bases = [data.basis for data in sections]
    return Jsonb(bases) if any(b is not None for b in bases) else None
