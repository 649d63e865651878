"""Scheduled delivery of a saved query (CSV/XLSX) or a report (PDF) to workspace users.

A query schedule is a ``schedules`` row of owner ``queries`` (work kind
``queries.deliver``, see :mod:`timekeeper.queries.work_kinds`) with its settings in
``query_schedules`` and its recipients in ``query_schedule_recipients``. One run
(:func:`deliver`, a ``leased`` work kind: its effects leave the database):

1. **Acts for** the schedule's owner (automatic runs) or the person who clicked Run now
   (``requested_by``), and asks the access rule for that person now: lost ->
   ``Refused("source_access_lost", pause_reason="source_access_lost")`` (the library
   pauses the schedule for an automatic run only).
2. **The file.** A query source streams its pinned version to
   ``deliveries/<workspace>/<run id>.<csv|xlsx>`` with the exports' writer; a report source
   requests a render with the run id as its idempotency key and polls ``report_renders``
   for up to :data:`RENDER_POLL_S` seconds (unfinished: raise, the queue retries within
   its three receives; the consumer settles ``failed`` on the last). The complete file is
   recorded in ``query_delivery_sources`` (key, size, sha256, rows, report version and
   whether it changed since the schedule's previous run); a retry reuses it when the
   object is still there with that checksum.
3. **Empty**: a query with no rows and ``skip_when_empty`` -> ``Skipped("skipped_empty")``,
   no message.
4. **Each recipient**, resolved now: deactivated, left the workspace, no longer allowed
   to read the source, or without an address -> a ``skipped`` delivery row with the
   reason; otherwise a personal signed link (:mod:`timekeeper.queries.links`), the
   sandboxed templates (:mod:`timekeeper.queries.templates`) and a submission through the
   communications adapter via the outbox: claim the communication key ``<run>:<user>``
   (``INSERT ... ON CONFLICT DO NOTHING``), submit, record the provider's message id (the
   record statement also confirms the attempt still holds the run and the next
   recipient's claim: a taken-over attempt stops before its next submission). A recorded
   submission is never submitted again. A permanent provider refusal of one recipient
   (:data:`PERMANENT_REFUSALS`) is that recipient's ``failed`` outcome, never retried; the
   run goes on and succeeds (``refused`` in its detail). Any other failed submission is
   recorded ``failed`` and the run raises after the other recipients, so the queue retries
   the rest while the completed outcomes stay; a retry settles a failed recipient removed
   from the schedule (``removed``) or skipped now as ``skipped``. Errors are stored as a
   code and a fixed message, never the provider's text.
5. **The file is immutable once linked**: a retry that finds the recorded object gone or
   changed after any message of the run may have been submitted fails ``file_lost`` rather
   than writing other contents under the key those links name.

**The journal.** Files, outbox rows and delivery rows are written on a second connection
(``DeliveryServices.journal``), each step committed at once and fenced by the run's
attempt (a write whose run is no longer ``running`` under this attempt is refused, except
the record of a message already submitted, which is the truth whatever happens next). The
run's own transaction (``ctx.conn``) only reads and settles, so a crash after some
recipients keeps their outcomes; it is touched at least every :data:`KEEPALIVE_S` seconds
because the workers' login ends a session idle in a transaction for 60 s.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg.rows import class_row, dict_row

from timekeeper import observability as obs
from timekeeper.db.durability import commit_without_flush_wait
from timekeeper.faults import crash_point
from timekeeper.platform import access
from timekeeper.queries import rendering, store
from timekeeper.queries.compiler import compile_query
from timekeeper.queries.definition import InvalidDefinition
from timekeeper.queries.exports import CONTENT_TYPES, _transfer_config, file_digest, write_file
from timekeeper.queries.links import DownloadLink, LinkSigner
from timekeeper.queries.templates import Message
from timekeeper.schedules.work import Outcome, Refused, RunContext, Skipped, Succeeded
from timekeeper.settings import DELIVERIES_PREFIX

OWNER = "queries"
DELIVER = "queries.deliver"
#: A scheduled delivery whose occurrence is older than this when claimed is skipped stale.
STALENESS = timedelta(hours=6)
#: How long a report run polls its render (seconds): inside the 900 s consumer.
RENDER_POLL_S = 720
#: Seconds between two reads of a render's state.
RENDER_POLL_INTERVAL_S = 5
#: The run's transaction is used at least this often (seconds) while the handler works.
KEEPALIVE_S = 20

SOURCE_ACCESS_LOST = "source_access_lost"
SKIPPED_EMPTY = "skipped_empty"
#: Skip reasons of a delivery row (``removed``: a recipient whose submission failed and who
#: was taken off the schedule before the retry).
DEACTIVATED, NO_ADDRESS, LEFT_WORKSPACE, NO_ACCESS = "deactivated", "no_address", "left_workspace", "no_access"
REMOVED = "removed"
#: The run's file is gone (or changed) on a retry after messages linking to it may have
#: been submitted: it is not written again with other contents under links already sent.
FILE_LOST = "file_lost"
#: Every recipient the run tried was refused permanently and none was sent to: a sender or
#: account problem more likely than bad addresses, so the run fails (and counts).
RECIPIENTS_REFUSED = "recipients_refused"
#: Provider error codes that refuse one recipient for good -> the delivery row's
#: ``error_code``. Such a recipient is ``failed`` and never retried; the run goes on.
PERMANENT_REFUSALS = {"MessageRejected": "rejected", "InvalidParameterValue": "invalid_address"}
#: Provider error codes of a transient refusal (retried with the run).
_THROTTLING = frozenset({"Throttling", "ThrottlingException", "TooManyRequestsException"})
_PERMANENT_CODES = frozenset(PERMANENT_REFUSALS.values())
_ERROR_MESSAGES = {
    "rejected": "the provider rejected the message to this recipient; not retried",
    "invalid_address": "the provider refused this recipient's address; not retried",
    "throttled": "the provider throttled the submission; retried",
    "provider_error": "the provider failed to accept the submission; retried",
    "submission_error": "the submission failed before the provider answered; retried",
}
_SKIP_REASON = {access.USER_DEACTIVATED: DEACTIVATED, access.LEFT_WORKSPACE: LEFT_WORKSPACE}


class Mailer(Protocol):
    """The communications adapter: submits one message, returns the provider's message id."""

    def send(self, *, to: str, subject: str, html: str, text: str) -> str: ...


class RendererClient(Protocol):
    """Asks the report renderer for a render (asynchronous)."""

    def request(self, *, workspace_id: UUID, render_id: UUID) -> None: ...


@dataclass
class DeliveryServices:
    """The adapters a delivery run uses, passed in by the edge as ``services["delivery"]``.

    ``journal()`` returns an idle connection beside the run's (the same database; not
    walled by row-level security); ``s3``/``bucket`` the files bucket; ``renderer`` the
    report renderer (report sources); ``mailer`` the communications adapter; ``links``
    the link signer; ``download_base_url`` ends with ``/``. ``sleep``/``monotonic``
    (seconds) drive the render poll; ``render_poll_s`` bounds it.
    """

    journal: Callable[[], psycopg.Connection]
    s3: Any
    bucket: str
    mailer: Mailer
    links: LinkSigner
    download_base_url: str
    renderer: RendererClient | None = None
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    render_poll_s: float = RENDER_POLL_S
    render_poll_interval_s: float = RENDER_POLL_INTERVAL_S
    on_failed: Callable[[int], None] | None = None
    tmp_dir: str | None = None


@dataclass(frozen=True)
class QuerySchedule:
    """A query schedule's delivery settings (``query_schedules``) with its schedule's name."""

    schedule_id: UUID
    workspace_id: UUID
    name: str
    owner_user_id: str
    source_kind: str
    query_id: UUID | None
    query_version: int | None
    report_id: UUID | None
    format: str
    skip_when_empty: bool
    subject_template: str
    body_template: str
    link_ttl_hours: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DeliverySource:
    """What a run delivered (``query_delivery_sources``)."""

    run_id: UUID
    workspace_id: UUID
    schedule_id: UUID
    source_kind: str
    format: str
    object_key: str
    byte_size: int
    sha256: str
    row_count: int | None
    query_id: UUID | None
    query_version: int | None
    report_id: UUID | None
    report_version: int | None
    render_id: UUID | None
    version_changed: bool
    acted_for: str
    created_at: datetime


@dataclass(frozen=True)
class Delivery:
    """One recipient's outcome of a run (``query_deliveries``): ``status`` sent | skipped |
    failed, ``skip_reason`` when skipped."""

    run_id: UUID
    user_id: str
    workspace_id: UUID
    schedule_id: UUID
    status: str
    skip_reason: str | None
    address: str | None
    provider_message_id: str | None
    link_expires_at: datetime | None
    error: str | None
    attempt: int
    updated_at: datetime
    #: A failed recipient's reason (:data:`PERMANENT_REFUSALS` values are permanent).
    error_code: str | None = None


class RunTakenOver(Exception):  # noqa: N818 - a signal: another attempt holds the run
    """A journal write found the run no longer held by this attempt."""


class RenderUnfinished(Exception):  # noqa: N818 - retried by the queue
    """The report's render did not finish within the poll."""


class DeliveryIncomplete(Exception):  # noqa: N818 - retried by the queue
    """Some recipients' submissions failed; the run is retried for them."""


SCHEDULE_COLUMNS = ("q.schedule_id, q.workspace_id, s.name, q.owner_user_id, q.source_kind, q.query_id, "
                    "q.query_version, q.report_id, q.format, q.skip_when_empty, q.subject_template, "
                    "q.body_template, q.link_ttl_hours, q.created_at, q.updated_at")
_SOURCE_COLUMNS = ("run_id, workspace_id, schedule_id, source_kind, format, object_key, byte_size, sha256, row_count, "
                   "query_id, query_version, report_id, report_version, render_id, version_changed, acted_for, "
                   "created_at")
_DELIVERY_COLUMNS = ("run_id, user_id, workspace_id, schedule_id, status, skip_reason, address, provider_message_id, "
                     "link_expires_at, error, attempt, updated_at, error_code")
#: The fence of every journal write: the run is still running under this attempt.
_HELD = ("EXISTS (SELECT 1 FROM schedule_runs WHERE id = %(run_id)s AND state = 'running' "
         "AND attempts = %(attempt)s)")


def get_query_schedule(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> QuerySchedule | None:
    """The delivery settings of ``schedule_id`` in ``workspace_id`` (None when it has none)."""
    with conn.cursor(row_factory=class_row(QuerySchedule)) as cur:
        return cur.execute(f"""SELECT {SCHEDULE_COLUMNS} FROM query_schedules q JOIN schedules s ON s.id = q.schedule_id
                               WHERE q.workspace_id = %s AND q.schedule_id = %s""",
                           (workspace_id, schedule_id)).fetchone()


def list_recipients(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> list[str]:
    """The recipients' user ids of a query schedule, sorted."""
    rows = conn.execute("""SELECT user_id FROM query_schedule_recipients WHERE workspace_id = %s AND schedule_id = %s
                           ORDER BY user_id""", (workspace_id, schedule_id)).fetchall()
    return [_first(row) for row in rows]


def get_source(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID) -> DeliverySource | None:
    """The file run ``run_id`` delivered, or None."""
    with conn.cursor(row_factory=class_row(DeliverySource)) as cur:
        return cur.execute(f"SELECT {_SOURCE_COLUMNS} FROM query_delivery_sources WHERE workspace_id = %s "
                           "AND run_id = %s", (workspace_id, run_id)).fetchone()


def list_deliveries(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID) -> list[Delivery]:
    """The recipients' outcomes of run ``run_id``, by user id."""
    with conn.cursor(row_factory=class_row(Delivery)) as cur:
        return cur.execute(f"SELECT {_DELIVERY_COLUMNS} FROM query_deliveries WHERE workspace_id = %s AND run_id = %s "
                           "ORDER BY user_id", (workspace_id, run_id)).fetchall()


def get_delivery(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID, user_id: str) -> Delivery | None:
    """One recipient's outcome of a run, or None."""
    with conn.cursor(row_factory=class_row(Delivery)) as cur:
        return cur.execute(f"SELECT {_DELIVERY_COLUMNS} FROM query_deliveries WHERE workspace_id = %s AND run_id = %s "
                           "AND user_id = %s", (workspace_id, run_id, user_id)).fetchone()


def object_key(workspace_id: UUID, run_id: UUID, fmt: str) -> str:
    """The object key of a query source's file: a function of the run only."""
    return f"{DELIVERIES_PREFIX}{workspace_id}/{run_id}.{fmt}"


def check_source_access(conn: psycopg.Connection, schedule: QuerySchedule, user_id: str) -> access.Decision:
    """The access rule for ``user_id`` on the schedule's source (``queries:read`` on the
    query, ``reports:read`` on the report), now."""
    if schedule.source_kind == "query":
        assert schedule.query_id is not None
        return access.check_query(conn, workspace_id=schedule.workspace_id, user_id=user_id,
                                  query_id=schedule.query_id)
    assert schedule.report_id is not None
    return access.check_report(conn, workspace_id=schedule.workspace_id, user_id=user_id,
                               report_id=schedule.report_id)


def _first(row: Any) -> Any:
    return row[next(iter(row))] if isinstance(row, dict) else row[0]


class _Run:
    """One attempt's view: the context, the services, the journal and the keepalive."""

    def __init__(self, ctx: RunContext, services: DeliveryServices) -> None:
        self.ctx = ctx
        self.services = services
        self.journal = services.journal()
        self.params = {"run_id": ctx.run_id, "attempt": ctx.attempt}
        self._touched = services.monotonic()

    def keepalive(self) -> None:
        """Use the run's transaction when it has been idle for :data:`KEEPALIVE_S`."""
        now = self.services.monotonic()
        if now - self._touched >= KEEPALIVE_S:
            self.ctx.conn.execute("SELECT 1")
            self._touched = now

    def write(self, statement: str, params: dict[str, Any], *, fenced: bool = True) -> dict[str, Any] | None:
        """Run one journal statement in a transaction of its own; returns its first row.
        ``fenced``: a statement that returns no row means the run was taken over."""
        with self.journal.transaction(), self.journal.cursor(row_factory=dict_row) as cur:
            row = cur.execute(statement, {**self.params, **params}).fetchone()
        if fenced and row is None:
            raise RunTakenOver(f"run {self.ctx.run_id} is no longer held by attempt {self.ctx.attempt}")
        return row


def deliver(ctx: RunContext) -> Outcome:
    """Work kind ``queries.deliver``: deliver the schedule's query file or report to its
    recipients (see the module's description for each step).

    Outcomes: ``Succeeded`` (detail: ``acted_for``, ``source``, ``recipients``, ``sent``,
    ``skipped`` by reason, ``version_changed``), ``Skipped("skipped_empty")``,
    ``Refused("source_access_lost", pause_reason=...)``, ``Refused("definition_invalid")``,
    ``Refused("render_failed")``, ``Refused("delivery_settings_missing")``; raises
    :class:`RenderUnfinished`, :class:`DeliveryIncomplete`, :class:`RunTakenOver` or an
    adapter's error for the queue to retry.

    Idempotency: a second execution of the same run reuses the recorded file (same key and
    checksum) and its recipients' recorded outcomes; a recipient whose submission was
    recorded is never submitted again. The one window: the provider accepted a message and
    the process died before its id was recorded; the retry submits that recipient again.
    """
    services: DeliveryServices = ctx.services["delivery"]
    schedule = get_query_schedule(ctx.conn, workspace_id=ctx.workspace_id, schedule_id=ctx.schedule_id)
    if schedule is None:
        return Refused("delivery_settings_missing", "the schedule has no delivery settings (query_schedules)")
    actor = schedule.owner_user_id if ctx.trigger == "scheduled" or not ctx.requested_by else ctx.requested_by
    decision = check_source_access(ctx.conn, schedule, actor)
    if not decision:
        return Refused(SOURCE_ACCESS_LOST, f"{actor} may no longer read the {schedule.source_kind}: {decision.reason}",
                       detail={"acted_for": actor, "reason": decision.reason}, pause_reason=SOURCE_ACCESS_LOST)
    run = _Run(ctx, services)
    try:
        if schedule.source_kind == "query":
            source = _query_source(run, schedule, actor)
        else:
            source = _report_source(run, schedule, actor)
    except _Refusal as refusal:
        return refusal.outcome
    summary = {"acted_for": actor, "trigger": ctx.trigger,
               "source": {"kind": source.source_kind, "object_key": source.object_key, "sha256": source.sha256,
                          "row_count": source.row_count, "report_version": source.report_version},
               "version_changed": source.version_changed}
    if source.source_kind == "query" and source.row_count == 0 and schedule.skip_when_empty:
        return Skipped(SKIPPED_EMPTY, detail=summary)
    outcomes = _deliver_to_recipients(run, schedule, source)
    failed = [user for user, status in outcomes.items() if status == "failed"]
    skipped: dict[str, int] = {}
    refused: dict[str, int] = {}
    for status in outcomes.values():
        if status.startswith(_REFUSED):
            code = status.removeprefix(_REFUSED)
            refused[code] = refused.get(code, 0) + 1
        elif status not in ("sent", "failed"):
            skipped[status] = skipped.get(status, 0) + 1
    if failed:
        if services.on_failed is not None:
            services.on_failed(len(failed))
        raise DeliveryIncomplete(f"{len(failed)} of {len(outcomes)} recipients' submissions failed; retried")
    sent = sum(1 for s in outcomes.values() if s == "sent")
    detail = {**summary, "recipients": len(outcomes), "sent": sent, "skipped": skipped}
    if refused:
        detail["refused"] = refused
        if sent == 0:
            return Refused(RECIPIENTS_REFUSED, "the provider refused every recipient the run tried and none was sent "
                           "to", detail=detail)
    return Succeeded(detail)


class _Refusal(Exception):  # noqa: N818 - carries an outcome out of a step
    def __init__(self, outcome: Refused) -> None:
        super().__init__(outcome.code)
        self.outcome = outcome


# ---------------------------------------------------------------------------- the file


def _object_intact(services: DeliveryServices, key: str, sha256: str) -> bool:
    """Whether the files bucket still holds ``key`` with metadata ``sha256`` (False: gone
    or changed). Any other error of the request propagates (the queue retries)."""
    try:
        head = services.s3.head_object(Bucket=services.bucket, Key=key)
    except Exception as error:
        if _error_code(error) in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return (head.get("Metadata") or {}).get("sha256") == sha256


def _error_code(error: BaseException) -> str | None:
    """An AWS client error's code (``MessageRejected``, ``404``), or None for other errors."""
    response = getattr(error, "response", None)
    code = (response.get("Error") or {}).get("Code") if isinstance(response, dict) else None
    return str(code) if code is not None else None


def _record_source(run: _Run, schedule: QuerySchedule, actor: str, **values: Any) -> DeliverySource:
    row = run.write(f"""
        INSERT INTO query_delivery_sources (run_id, workspace_id, schedule_id, source_kind, format, object_key,
                                            byte_size, sha256, row_count, query_id, query_version, report_id,
                                            report_version, render_id, version_changed, acted_for, created_at)
        SELECT %(run_id)s, %(workspace_id)s, %(schedule_id)s, %(source_kind)s, %(format)s, %(object_key)s,
               %(byte_size)s, %(sha256)s, %(row_count)s, %(query_id)s, %(query_version)s, %(report_id)s,
               %(report_version)s, %(render_id)s, %(version_changed)s, %(acted_for)s, %(now)s
         WHERE {_HELD}
        ON CONFLICT (run_id) DO UPDATE SET object_key = EXCLUDED.object_key, byte_size = EXCLUDED.byte_size,
               sha256 = EXCLUDED.sha256, row_count = EXCLUDED.row_count, acted_for = EXCLUDED.acted_for
        RETURNING {_SOURCE_COLUMNS}""", {
        "workspace_id": schedule.workspace_id, "schedule_id": schedule.schedule_id,
        "source_kind": schedule.source_kind, "format": schedule.format, "acted_for": actor, "now": run.ctx.now,
        "row_count": None, "query_id": None, "query_version": None, "report_id": None, "report_version": None,
        "render_id": None, "version_changed": False, **values})
    assert row is not None
    return DeliverySource(**row)


def _query_source(run: _Run, schedule: QuerySchedule, actor: str) -> DeliverySource:
    """The run's query file: the recorded one when intact, else streamed and uploaded now."""
    ctx, services = run.ctx, run.services
    with run.journal.transaction():
        recorded = get_source(run.journal, workspace_id=ctx.workspace_id, run_id=ctx.run_id)
    if recorded is not None and _object_intact(services, recorded.object_key, recorded.sha256):
        return recorded
    if recorded is not None:
        with run.journal.transaction():
            claimed = run.journal.execute("SELECT EXISTS (SELECT 1 FROM query_delivery_outbox WHERE run_id = %s)",
                                          (ctx.run_id,)).fetchone()
        if _first(claimed):  # a message may link to the recorded file: never other contents under its key
            raise _Refusal(Refused(FILE_LOST, "the run's file is gone or changed after messages linking to it may have "
                                   "been sent; it is not made again with other contents",
                                   detail={"object_key": recorded.object_key, "sha256": recorded.sha256}))
    assert schedule.query_id is not None and schedule.query_version is not None
    with run.journal.transaction():
        version = store.get_version(run.journal, workspace_id=ctx.workspace_id, query_id=schedule.query_id,
                                    version=schedule.query_version)
    try:
        compiled = compile_query(version.parsed(), workspace_id=ctx.workspace_id)
    except InvalidDefinition as error:
        raise _Refusal(Refused("definition_invalid", f"{error.field}: {error.reason}")) from None
    key = object_key(ctx.workspace_id, ctx.run_id, schedule.format)
    with tempfile.TemporaryDirectory(prefix="delivery-", dir=services.tmp_dir) as folder:
        path = os.path.join(folder, f"delivery.{schedule.format}")
        rows = write_file(run.journal, compiled, schedule.format, path)
        run.keepalive()
        size, digest = file_digest(path)
        services.s3.upload_file(Filename=path, Bucket=services.bucket, Key=key, Config=_transfer_config(),
                                ExtraArgs={"ContentType": CONTENT_TYPES[schedule.format],
                                           "Metadata": {"sha256": digest, "run-id": str(ctx.run_id)}})
    run.keepalive()
    return _record_source(run, schedule, actor, object_key=key, byte_size=size, sha256=digest, row_count=rows,
                          query_id=schedule.query_id, query_version=schedule.query_version)


def _report_source(run: _Run, schedule: QuerySchedule, actor: str) -> DeliverySource:
    """The run's report PDF: a render keyed by the run id, polled until it is terminal."""
    ctx, services = run.ctx, run.services
    assert schedule.report_id is not None
    with run.journal.transaction():
        recorded = get_source(run.journal, workspace_id=ctx.workspace_id, run_id=ctx.run_id)
    if recorded is not None:
        return recorded
    try:
        render = rendering.request_render(run.journal, workspace_id=ctx.workspace_id, report_id=schedule.report_id,
                                          idempotency_key=str(ctx.run_id), requested_by=actor, now=ctx.now)
    except rendering.ReportNotFound:
        raise _Refusal(Refused(SOURCE_ACCESS_LOST, "the report was deleted", detail={"reason": access.NOT_FOUND},
                               pause_reason=SOURCE_ACCESS_LOST)) from None
    if render.state not in rendering.TERMINAL_STATES:
        if services.renderer is None:
            raise RuntimeError("no report renderer configured")
        services.renderer.request(workspace_id=ctx.workspace_id, render_id=render.id)
        with run.journal.transaction():  # a render that finished at once needs no wait
            render = rendering.get_render(run.journal, workspace_id=ctx.workspace_id, render_id=render.id)
    deadline = services.monotonic() + services.render_poll_s
    while render.state not in rendering.TERMINAL_STATES:
        if services.monotonic() >= deadline:
            raise RenderUnfinished(f"render {render.id} still {render.state} after {services.render_poll_s:.0f} s")
        services.sleep(services.render_poll_interval_s)
        run.keepalive()
        with run.journal.transaction():
            render = rendering.get_render(run.journal, workspace_id=ctx.workspace_id, render_id=render.id)
    if render.state == "failed":
        code = render.error_code or rendering.UNEXPECTED_ERROR
        if code in rendering.ACCESS_CODES:
            raise _Refusal(Refused(SOURCE_ACCESS_LOST, f"the render refused {actor}: {code}",
                                   detail={"acted_for": actor, "reason": code}, pause_reason=SOURCE_ACCESS_LOST))
        if code == rendering.DEFINITION_INVALID:
            raise _Refusal(Refused("definition_invalid", render.error_message or code))
        raise _Refusal(Refused("render_failed", f"the report render failed: {code}"))
    with run.journal.transaction():
        previous = run.journal.execute(
            """SELECT report_version FROM query_delivery_sources
                WHERE workspace_id = %s AND schedule_id = %s AND run_id <> %s AND report_version IS NOT NULL
                ORDER BY created_at DESC LIMIT 1""", (ctx.workspace_id, schedule.schedule_id, ctx.run_id)).fetchone()
    previous_version = _first(previous) if previous is not None else None
    assert render.object_key is not None and render.sha256 is not None
    return _record_source(run, schedule, actor, object_key=render.object_key, byte_size=render.byte_size or 0,
                          sha256=render.sha256, report_id=schedule.report_id, report_version=render.report_version,
                          render_id=render.id,
                          version_changed=previous_version is not None and previous_version != render.report_version)


# ---------------------------------------------------------------------- the recipients


@dataclass(frozen=True)
class _Recipient:
    """A recipient resolved now: ``skip_reason`` (None: deliver), the name and address."""

    user_id: str
    skip_reason: str | None
    display_name: str
    email: str | None


def _resolve(conn: psycopg.Connection, schedule: QuerySchedule, user_ids: list[str]) -> dict[str, _Recipient]:
    """Resolve the recipients now with the access rule (:func:`access.check_people`, and
    the source's existence once): deactivated, left, any other refusal (``no_access``),
    then an address (``no_address``)."""
    permission = access.QUERIES_READ if schedule.source_kind == "query" else access.REPORTS_READ
    decisions = access.check_people(conn, workspace_id=schedule.workspace_id, user_ids=user_ids,
                                    permission=permission)
    source_id = schedule.query_id if schedule.source_kind == "query" else schedule.report_id
    assert source_id is not None
    exists = access.object_exists(conn, schedule.source_kind, schedule.workspace_id, source_id)
    users = {r["id"]: r for r in conn.execute("SELECT id, display_name, email FROM users WHERE id = ANY(%s)",
                                              (user_ids,)).fetchall()}
    out: dict[str, _Recipient] = {}
    for user_id in user_ids:
        decision, user = decisions[user_id], users.get(user_id) or {}
        reason = None
        if not decision:
            reason = _SKIP_REASON.get(decision.reason or "", NO_ACCESS)
        elif not exists:
            reason = NO_ACCESS
        elif not user.get("email"):
            reason = NO_ADDRESS
        out[user_id] = _Recipient(user_id, reason, user.get("display_name") or user_id, user.get("email"))
    return out


def _record_skips(run: _Run, schedule: QuerySchedule, skips: list[_Recipient]) -> None:
    """Record the skipped recipients in one fenced statement; a recipient whose earlier
    submission failed (and was to be retried) is settled ``skipped`` with the reason."""
    if not skips:
        return
    run.write(f"""
        WITH held AS (SELECT 1 WHERE {_HELD}),
             written AS (
                INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, skip_reason, attempt,
                                              updated_at)
                SELECT %(run_id)s, u.user_id, %(workspace_id)s, %(schedule_id)s, 'skipped', u.reason, %(attempt)s,
                       %(now)s
                  FROM unnest(%(users)s::text[], %(reasons)s::text[]) AS u (user_id, reason), held
                ON CONFLICT (run_id, user_id) DO UPDATE SET status = 'skipped', skip_reason = EXCLUDED.skip_reason,
                       error = NULL, error_code = NULL, attempt = EXCLUDED.attempt, updated_at = EXCLUDED.updated_at
                 WHERE query_deliveries.status = 'failed'
                RETURNING 1)
        SELECT count(*) FROM held""", {
        "workspace_id": schedule.workspace_id, "schedule_id": schedule.schedule_id, "now": run.ctx.now,
        "users": [r.user_id for r in skips], "reasons": [r.skip_reason for r in skips]})
    held = run.write(f"SELECT 1 AS held WHERE {_HELD}", {}, fenced=False)
    if held is None:
        raise RunTakenOver(f"run {run.ctx.run_id} is no longer held by attempt {run.ctx.attempt}")


def _claim_all(run: _Run, schedule: QuerySchedule, user_ids: list[str]) -> dict[str, str | None]:
    """Claim the outbox rows of every recipient to send in one fenced statement (rows an
    earlier attempt claimed without a recorded submission are taken over). Returns each
    recipient's recorded provider message id, or None (claimed: send). Raises
    :class:`RunTakenOver`."""
    if not user_ids:
        return {}
    with run.journal.transaction(), run.journal.cursor(row_factory=dict_row) as cur:
        commit_without_flush_wait(run.journal)  # a lost claim is claimed again
        held = cur.execute(f"SELECT 1 AS held WHERE {_HELD}", run.params).fetchone()
        if held is None:
            raise RunTakenOver(f"run {run.ctx.run_id} is no longer held by attempt {run.ctx.attempt}")
        rows = cur.execute("""
            INSERT INTO query_delivery_outbox (communication_key, run_id, user_id, workspace_id, claimed_attempt,
                                               claimed_at)
            SELECT %(run_id)s::text || ':' || u, %(run_id)s, u, %(workspace_id)s, %(attempt)s, %(now)s
              FROM unnest(%(users)s::text[]) AS u
            ON CONFLICT (communication_key) DO UPDATE SET claimed_attempt = EXCLUDED.claimed_attempt,
                   claimed_at = EXCLUDED.claimed_at
             WHERE query_delivery_outbox.provider_message_id IS NULL
            RETURNING user_id""", {**run.params, "workspace_id": schedule.workspace_id, "now": run.ctx.now,
                                   "users": user_ids}).fetchall()
        claimed = {r["user_id"] for r in rows}
        recorded = {r["user_id"]: r["provider_message_id"] for r in cur.execute(
            """SELECT user_id, provider_message_id FROM query_delivery_outbox
                WHERE run_id = %(run_id)s AND provider_message_id IS NOT NULL""", run.params).fetchall()}
    return {user_id: (None if user_id in claimed else recorded.get(user_id)) for user_id in user_ids}


#: The fence folded into each record statement: this attempt still holds the run and, when
#: another recipient follows, that recipient's outbox claim (taken over by no later attempt,
#: no submission recorded). ``held`` False: stop before the next submission.
_STILL_HELD = (f"SELECT {_HELD} AND (%(next_key)s::text IS NULL OR EXISTS (SELECT 1 FROM query_delivery_outbox "
               "WHERE communication_key = %(next_key)s AND claimed_attempt = %(attempt)s "
               "AND provider_message_id IS NULL)) AS held")


def _next_key(run: _Run, next_user: str | None) -> str | None:
    return None if next_user is None else f"{run.ctx.run_id}:{next_user}"


def _record_sent(run: _Run, schedule: QuerySchedule, recipient: _Recipient, message_id: str,
                 link_expires_at: datetime | None, *, submitted: bool, next_user: str | None) -> bool:
    """Record an accepted submission: the outbox's provider id and a ``sent`` delivery row,
    in one statement (not fenced: the message was sent whatever happens to the run; an id
    already recorded, e.g. by an attempt that took the run over, is kept). ``submitted``:
    this attempt made the submission (counted in ``submissions``; False when it re-records
    an earlier attempt's). Returns whether the attempt still holds the run and
    ``next_user``'s claim (:data:`_STILL_HELD`), the fence before the next submission, in the
    same round trip. It commits without waiting for the WAL flush: a process crash cannot
    lose it, a database crash in the next fraction of a second can (that recipient would be
    sent again)."""
    # One statement, one round trip, committed on its own (the journal connection is in
    # autocommit): the relaxed CTE is what lets it skip the flush wait.
    row = run.journal.execute(f"""
        WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true)),
        outbox AS (
            UPDATE query_delivery_outbox SET submissions = submissions + %(submitted)s,
                   provider_message_id = COALESCE(provider_message_id, %(id)s),
                   sent_at = COALESCE(sent_at, %(now)s), last_error = NULL
             WHERE communication_key = %(run_id)s::text || ':' || %(user_id)s AND EXISTS (SELECT FROM relaxed)
            RETURNING 1),
        written AS (
            INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, address,
                                          provider_message_id, link_expires_at, attempt, updated_at)
            SELECT %(run_id)s, %(user_id)s, %(workspace_id)s, %(schedule_id)s, 'sent', %(address)s, %(id)s,
                   %(expires)s, %(attempt)s, %(now)s
             WHERE EXISTS (SELECT FROM relaxed)
            ON CONFLICT (run_id, user_id) DO UPDATE SET status = 'sent', skip_reason = NULL,
                   address = EXCLUDED.address, provider_message_id = EXCLUDED.provider_message_id,
                   link_expires_at = COALESCE(EXCLUDED.link_expires_at, query_deliveries.link_expires_at),
                   error = NULL, error_code = NULL, attempt = EXCLUDED.attempt, updated_at = EXCLUDED.updated_at
             WHERE query_deliveries.status <> 'sent'
            RETURNING 1)
        {_STILL_HELD}""", {
        **run.params, "id": message_id, "now": run.ctx.now, "user_id": recipient.user_id,
        "workspace_id": schedule.workspace_id, "schedule_id": schedule.schedule_id,
        "address": recipient.email, "expires": link_expires_at, "submitted": 1 if submitted else 0,
        "next_key": _next_key(run, next_user)}).fetchone()
    return bool(row and _first(row))


def classify_submission_error(error: BaseException) -> tuple[str, bool]:
    """``(error_code, permanent)`` of a submission that raised: a provider code in
    :data:`PERMANENT_REFUSALS` is permanent for that recipient (``rejected``,
    ``invalid_address``); throttling is ``throttled``, any other provider error
    ``provider_error``, anything else (network, timeout) ``submission_error``: retried."""
    code = _error_code(error)
    if code in PERMANENT_REFUSALS:
        return PERMANENT_REFUSALS[code], True
    if code in _THROTTLING:
        return "throttled", False
    return ("provider_error" if code is not None else "submission_error"), False


def _record_failed(run: _Run, schedule: QuerySchedule, recipient: _Recipient, code: str, *,
                   next_user: str | None) -> bool:
    """Record a submission that raised: the outbox's last error (the code) and a ``failed``
    row with ``error_code`` and a fixed message (never the provider's text, which can name
    addresses). Returns whether the attempt still holds the run and ``next_user``'s claim."""
    with run.journal.transaction():
        row = run.journal.execute(f"""
            WITH outbox AS (
                UPDATE query_delivery_outbox SET submissions = submissions + 1, last_error = %(code)s
                 WHERE communication_key = %(run_id)s::text || ':' || %(user_id)s RETURNING 1),
            written AS (
                INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, address, error,
                                              error_code, attempt, updated_at)
                VALUES (%(run_id)s, %(user_id)s, %(workspace_id)s, %(schedule_id)s, 'failed', %(address)s, %(error)s,
                        %(code)s, %(attempt)s, %(now)s)
                ON CONFLICT (run_id, user_id) DO UPDATE SET status = 'failed', error = EXCLUDED.error,
                       error_code = EXCLUDED.error_code, attempt = EXCLUDED.attempt, updated_at = EXCLUDED.updated_at
                 WHERE query_deliveries.status <> 'sent'
                RETURNING 1)
            {_STILL_HELD}""", {
            **run.params, "error": _ERROR_MESSAGES[code], "code": code, "now": run.ctx.now,
            "user_id": recipient.user_id, "workspace_id": schedule.workspace_id, "schedule_id": schedule.schedule_id,
            "address": recipient.email, "next_key": _next_key(run, next_user)}).fetchone()
    return bool(row and _first(row))


#: The outcome of a recipient the provider refused permanently: ``refused:<error code>``.
_REFUSED = "refused:"


def _deliver_to_recipients(run: _Run, schedule: QuerySchedule, source: DeliverySource) -> dict[str, str]:
    """Deliver to every recipient; returns each one's status: ``sent``, ``failed`` (retried),
    ``refused:<code>`` (a permanent provider refusal, not retried) or the skip reason.
    Outcomes recorded by an earlier attempt stay; a recipient whose earlier submission failed
    and who is no longer on the schedule is settled ``skipped`` / ``removed``, one who is
    skipped now (deactivated, left ...) ``skipped`` with that reason.

    Fencing: before each submission the attempt confirms it still holds the run and that
    recipient's outbox claim. The check rides on the statement that records the previous
    recipient's outcome (the claim of every recipient is fenced once before the first), so
    it costs no extra round trip; an attempt that stalled past its lease and was taken over
    stops (:class:`RunTakenOver`) before its next submission."""
    ctx, services = run.ctx, run.services
    with run.journal.transaction():
        done = {d.user_id: d for d in list_deliveries(run.journal, workspace_id=ctx.workspace_id, run_id=ctx.run_id)}
    outcomes: dict[str, str] = {}
    pending: list[str] = []
    current = list_recipients(ctx.conn, workspace_id=ctx.workspace_id, schedule_id=schedule.schedule_id)
    listed = set(current)
    removed: list[_Recipient] = []
    for user_id in [*current, *sorted(set(done) - listed)]:
        earlier = done.get(user_id)
        if earlier is not None and earlier.status == "sent":
            outcomes[user_id] = "sent"
        elif earlier is not None and earlier.status == "skipped":
            outcomes[user_id] = earlier.skip_reason or NO_ACCESS
        elif earlier is not None and earlier.status == "failed" and earlier.error_code in _PERMANENT_CODES:
            outcomes[user_id] = _REFUSED + earlier.error_code
        elif user_id not in listed:
            removed.append(_Recipient(user_id, REMOVED, user_id, None))
        else:
            pending.append(user_id)
    resolved = _resolve(ctx.conn, schedule, pending) if pending else {}
    skips = [r for r in resolved.values() if r.skip_reason is not None] + removed
    _record_skips(run, schedule, skips)
    outcomes.update({r.user_id: r.skip_reason for r in skips if r.skip_reason})
    to_send = [r for r in resolved.values() if r.skip_reason is None]
    submitted = _claim_all(run, schedule, [r.user_id for r in to_send])
    message = Message(schedule.subject_template, schedule.body_template)
    expires = (ctx.now + timedelta(hours=schedule.link_ttl_hours)).replace(microsecond=0)
    base = {"schedule_name": schedule.name, "link_expires_at": expires.isoformat(),
            "row_count": "" if source.row_count is None else source.row_count,
            "run_date": ctx.occurrence_local.date().isoformat(), "format": schedule.format}
    for i, recipient in enumerate(to_send):
        if i:
            crash_point("delivery.between_recipients")
        run.keepalive()
        following = to_send[i + 1].user_id if i + 1 < len(to_send) else None
        next_user = following if following is not None and submitted.get(following) is None else None
        recorded = submitted.get(recipient.user_id)
        if recorded is not None:  # a recorded submission is never made again
            held = _record_sent(run, schedule, recipient, recorded, None, submitted=False, next_user=next_user)
            outcomes[recipient.user_id] = "sent"
        else:
            token = services.links.sign(DownloadLink(ctx.workspace_id, ctx.run_id, recipient.user_id,
                                                     source.object_key, expires))
            subject, html, text = message.render({**base, "recipient_name": recipient.display_name,
                                                  "link": f"{services.download_base_url}downloads/{token}"})
            assert recipient.email is not None
            try:
                message_id = services.mailer.send(to=recipient.email, subject=subject, html=html, text=text)
            except Exception as error:  # noqa: BLE001 - recorded; retried for this recipient unless permanent
                code, permanent = classify_submission_error(error)
                held = _record_failed(run, schedule, recipient, code, next_user=next_user)
                obs.logger.warning("delivery submission failed", extra={
                    "run_id": str(ctx.run_id), "user_id": recipient.user_id, "error_type": type(error).__name__,
                    "error_code": code, "permanent": permanent})
                outcomes[recipient.user_id] = _REFUSED + code if permanent else "failed"
            else:
                crash_point("delivery.after_send", (ctx.run_id, recipient.user_id))
                held = _record_sent(run, schedule, recipient, message_id, expires, submitted=True,
                                    next_user=next_user)
                outcomes[recipient.user_id] = "sent"
        if not held:
            raise RunTakenOver(f"run {ctx.run_id} is no longer held by attempt {ctx.attempt}; stopped before "
                               "the next submission")
    return outcomes
