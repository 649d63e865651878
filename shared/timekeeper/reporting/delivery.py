"""Scheduled delivery of a saved query (CSV/XLSX) or a report (PDF) to workspace users.

A query schedule is a ``schedules`` row of owner ``queries`` (work kind
``queries.deliver``, see :mod:`timekeeper.reporting.work_kinds`) with its settings in
``query_schedules`` and its recipients in ``query_schedule_recipients``. One run
(:func:`deliver`, a ``leased`` work kind: its effects leave the database):

1. **Acts for** the schedule's owner (automatic runs) or the person who clicked Run now
   or "Send a test to me" (``requested_by``; a ``test`` run's one recipient is that person,
   :mod:`timekeeper.reporting.send_tests`), and asks the access rule for that person now: lost ->
   ``Refused("source_access_lost", pause_reason="source_access_lost")`` (the library
   pauses the schedule for an automatic run only).
2. **The file.** A query source streams its pinned version to
   ``deliveries/<workspace>/<run id>.<csv|xlsx>`` with the exports' writer; a report source
   requests a render with the run id as its idempotency key and polls ``report_renders``
   for up to :data:`RENDER_POLL_S` seconds (unfinished: raise :class:`RenderUnfinished`,
   the run is received again after the pipeline's backoff within its three receives and
   settles ``failed`` / ``render_unfinished`` on the last). The complete file is
   recorded in ``query_delivery_sources`` (key, size, sha256, rows, report version and
   whether it changed since the schedule's previous run); a retry reuses it when the
   object is still there with that checksum. A report's snapshot sections come with the
   render's basis (type, period, version, publication instant per section):
   ``snapshot_version_changed`` says a period the schedule's previous run showed is now
   shown in a newer version, and every version a run that goes on to send uses is marked
   ``captured`` in the snapshot ledger (its period's history is then protected) before
   any message is sent (an empty report skipped captures nothing).
3. **Empty**: with ``skip_when_empty``, a query file with no rows, or a report whose every
   section returned no rows (the render's ``section_row_counts``; one non-empty section
   makes the report worth sending) -> ``Skipped("skipped_empty")``, no message.
4. **Each recipient**, resolved now: deactivated, left the workspace, no longer allowed
   to read the source, without an address, opted out of this schedule (``unsubscribed``,
   :mod:`timekeeper.reporting.opt_outs`) or with an address on the workspace's
   suppression list (``suppressed``, :mod:`timekeeper.reporting.message_states`) -> a
   ``skipped`` delivery row with the reason; otherwise a personal signed link
   (:mod:`timekeeper.reporting.links`) and opt-out link, the sandboxed templates framed
   into the complete message (:func:`timekeeper.reporting.templates.frame_message`: HTML
   and text, the ``List-Unsubscribe`` headers of RFC 8058) and a submission through the
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
attempt (:mod:`timekeeper.reporting.delivery_journal`); the run's own transaction
(``ctx.conn``) only reads and settles, so a crash after some recipients keeps their
outcomes. The settings, recipients and recorded outcomes are read through
:mod:`timekeeper.reporting.delivery_store`. This module is the orchestration: access,
the file (query stream or report render poll), the recipients and the submissions.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper import observability as obs
from timekeeper.faults import crash_point
from timekeeper.platform import access
from timekeeper.reporting import rendering, store
from timekeeper.reporting.compiler import compile_query
from timekeeper.reporting.definition import InvalidDefinition
from timekeeper.reporting.delivery_journal import (
    DeliveryJournal,
    Recipient,
    RunTakenOver,
    claim_all,
    record_skips,
    record_source,
)
from timekeeper.reporting.delivery_messages import MessageComposer
from timekeeper.reporting.delivery_store import (
    Delivery,
    DeliveryAttempt,
    DeliverySource,
    QuerySchedule,
    contacts,
    get_delivery,
    get_query_schedule,
    get_source,
    list_attempts,
    list_deliveries,
    list_recipients,
    outbox_claimed,
    previous_report_version,
    previous_snapshot_basis,
    snapshot_version_changed,
)
from timekeeper.reporting.links import DownloadLink, LinkSigner, RotatingLinkSigner
from timekeeper.reporting.message_states import suppressed_among
from timekeeper.reporting.opt_outs import OptOutLink, opted_out_among, sign_opt_out
from timekeeper.reporting.presentation import presentation_of
from timekeeper.reporting.sending import (
    RECIPIENTS_UNFINISHED,
    THROTTLING_CODES,
    UNCONFIRMED,
    DeliveryContinues,
    Prepared,
    SendPolicy,
    send_all,
    settle_unconfirmed,
)
from timekeeper.reporting.writers import CONTENT_TYPES, file_digest, write_file
from timekeeper.schedules.work import Outcome, Refused, RetryableFault, RunContext, Skipped, Succeeded
from timekeeper.settings import DELIVERIES_PREFIX
from timekeeper.snapshots import ledger
from timekeeper.topology import QUERIES

OWNER = "queries"
DELIVER = "queries.deliver"
#: A scheduled delivery whose occurrence is older than this when claimed is skipped stale.
STALENESS = timedelta(hours=6)
#: How long a report run polls its render (seconds): inside the 900 s consumer.
RENDER_POLL_S = 720
#: Seconds between two reads of a render's state.
RENDER_POLL_INTERVAL_S = 5
#: Recipients a schedule may have (checked when it is saved).
MAX_RECIPIENTS = 1000
#: What one recipient costs a run (seconds): the link signed, the templates rendered, the
#: submission and its recorded outcome. Measured against moto SES by benchmarks/delivery.py:
#: 5.0 ms on a quiet machine (199 recipients/s), 19.7 ms under a load average of 12-18 on
#: its 2 vCPUs (51/s); the static budget takes the slower, rounded up. At run time the
#: sender measures the real submissions and hands the run back when the receive's
#: remaining time no longer covers one (:mod:`timekeeper.reporting.sending`).
SEND_COST_S = 0.02
#: Seconds a run keeps for everything beside the poll and the submissions: the start, the
#: access rule, the render request, the recipients' resolution, the file record and the
#: settlement (a few statements, each under the workers' 15 s statement timeout).
RUN_OVERHEAD_S = 60

#: The trigger of a test send ("Send a test to me"): the run's one recipient is the person
#: who asked (``requested_by``), whatever the schedule's recipients are.
TEST = "test"
SOURCE_ACCESS_LOST = "source_access_lost"
SKIPPED_EMPTY = "skipped_empty"
#: The render did not finish within the poll of the message's last receive.
RENDER_UNFINISHED = "render_unfinished"
#: Skip reasons of a delivery row (``removed``: a recipient whose submission failed and who
#: was taken off the schedule before the retry).
DEACTIVATED, NO_ADDRESS, LEFT_WORKSPACE, NO_ACCESS = "deactivated", "no_address", "left_workspace", "no_access"
REMOVED = "removed"
#: Skip reasons of the message-state loop: the address is on the workspace's suppression
#: list (a permanent bounce or a complaint), the recipient opted out of this schedule.
SUPPRESSED, UNSUBSCRIBED = "suppressed", "unsubscribed"
#: The one-click opt-out headers of every delivered message (RFC 8058).
ONE_CLICK = "List-Unsubscribe=One-Click"
#: The run's file is gone (or changed) on a retry after messages linking to it may have
#: been submitted: it is not written again with other contents under links already sent.
FILE_LOST = "file_lost"
#: Every recipient the run tried was refused permanently and none was sent to: a sender or
#: account problem more likely than bad addresses, so the run fails (and counts).
RECIPIENTS_REFUSED = "recipients_refused"
#: Provider error codes that refuse one recipient for good -> the delivery row's
#: ``error_code``. Such a recipient is ``failed`` and never retried; the run goes on.
PERMANENT_REFUSALS = {"MessageRejected": "rejected", "InvalidParameterValue": "invalid_address"}
#: Outcome codes a later attempt never retries: the permanent refusals and ``unconfirmed``
#: (a submission whose outcome is not known is never made again).
NOT_RETRIED_CODES = frozenset({*PERMANENT_REFUSALS.values(), UNCONFIRMED})
_SKIP_REASON = {access.USER_DEACTIVATED: DEACTIVATED, access.LEFT_WORKSPACE: LEFT_WORKSPACE}


class Mailer(Protocol):
    """The communications adapter: submits one message, returns the provider's message id."""

    def send(self, *, to: str, subject: str, html: str, text: str,
             headers: Mapping[str, str] | None = None) -> str: ...


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
    (seconds) drive the render poll and the sender's pacing; ``render_poll_s`` bounds it.
    ``send_policy`` paces the sender (:class:`~timekeeper.reporting.sending.SendPolicy`);
    ``time_left_s()`` is the receive's remaining time (seconds; None: ``receive_timeout_s``
    counted from the handler's start); ``on_failed`` / ``on_throttled`` count failed
    recipients and throttled submissions (metrics).
    """

    journal: Callable[[], psycopg.Connection]
    s3: Any
    bucket: str
    mailer: Mailer
    links: LinkSigner | RotatingLinkSigner
    download_base_url: str
    renderer: RendererClient | None = None
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    render_poll_s: float = RENDER_POLL_S
    render_poll_interval_s: float = RENDER_POLL_INTERVAL_S
    on_failed: Callable[[int], None] | None = None
    tmp_dir: str | None = None
    send_policy: SendPolicy = field(default_factory=SendPolicy)
    time_left_s: Callable[[], float] | None = None
    receive_timeout_s: float = QUERIES.consumer.timeout_s
    on_throttled: Callable[[int], None] | None = None


class RenderUnfinished(RetryableFault):
    """The report's render did not finish within the poll: retried within the queue's
    receives after the pipeline's backoff, ``render_unfinished`` on the last."""

    code = RENDER_UNFINISHED


def worst_case_run_s(recipients: int, *, poll_s: float = RENDER_POLL_S, send_cost_s: float = SEND_COST_S) -> float:
    """The longest one receive of a report delivery to ``recipients`` recipients takes
    (seconds): :data:`RUN_OVERHEAD_S`, the whole render poll plus one poll interval it may
    overshoot by, and :data:`SEND_COST_S` per recipient. It must fit in the consumer's
    timeout (:func:`check_time_budget`)."""
    return RUN_OVERHEAD_S + poll_s + RENDER_POLL_INTERVAL_S + recipients * send_cost_s


def check_time_budget(consumer_timeout_s: int) -> None:
    """Raise ``ValueError`` when a report run with a whole render poll and
    :data:`MAX_RECIPIENTS` recipients would not finish within ``consumer_timeout_s``
    (seconds): the consumer would be killed mid-send and the run retried."""
    needed = worst_case_run_s(MAX_RECIPIENTS)
    if needed > consumer_timeout_s:
        raise ValueError(f"a {RENDER_POLL_S} s render poll and {MAX_RECIPIENTS} recipients need {needed:.0f} s: "
                         f"does not fit in the consumer's {consumer_timeout_s} s")


class DeliveryIncomplete(Exception):  # noqa: N818 - retried by the queue
    """Some recipients' submissions failed; the run is retried for them."""


def object_key(workspace_id: UUID, run_id: UUID, fmt: str) -> str:
    """The object key of a query source's file: a function of the run only."""
    return f"{DELIVERIES_PREFIX}{workspace_id}/{run_id}.{fmt}"


def source_read_permission(schedule: QuerySchedule) -> str:
    """The permission that reads the schedule's source: ``queries:read`` for a query,
    ``reports:read`` for a report (what its recipients must hold, by the token and by the
    membership)."""
    return access.QUERIES_READ if schedule.source_kind == "query" else access.REPORTS_READ


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


def deliver(ctx: RunContext) -> Outcome:
    """Work kind ``queries.deliver``: deliver the schedule's query file or report to its
    recipients (see the module's description for each step).

    Outcomes: ``Succeeded`` (detail: ``acted_for``, ``source``, ``recipients``, ``sent``,
    ``skipped`` by reason, ``version_changed``; with ``source.snapshot_basis`` and
    ``snapshot_version_changed`` for a report read from snapshots), ``Skipped("skipped_empty")``,
    ``Refused("source_access_lost", pause_reason=...)``, ``Refused("definition_invalid")``,
    ``Refused("render_failed")``, ``Refused("delivery_settings_missing")``; raises
    :class:`RenderUnfinished`, :class:`DeliveryIncomplete`, :class:`RunTakenOver` or an
    adapter's error for the queue to retry.

    Idempotency: a second execution of the same run reuses the recorded file (same key and
    checksum) and its recipients' recorded outcomes; a recipient whose submission was
    recorded, or claimed 'sending' without a record, is never submitted again (the latter
    is ``failed`` / ``unconfirmed``). Raises :class:`DeliveryContinues` when the receive's
    time ran out before every recipient (the next receive sends to the rest).
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
    journal = DeliveryJournal(ctx, services.journal(), monotonic=services.monotonic)
    if schedule.source_kind == "query":
        source = _query_source(journal, services, schedule, actor)
    else:
        source = _report_source(journal, services, schedule, actor)
    if isinstance(source, Refused):
        return source
    summary = {"acted_for": actor, "trigger": ctx.trigger,
               "source": {"kind": source.source_kind, "object_key": source.object_key, "sha256": source.sha256,
                          "row_count": source.row_count, "report_version": source.report_version},
               "version_changed": source.version_changed}
    if source.section_row_counts is not None:
        summary["source"]["section_row_counts"] = source.section_row_counts
    if source.snapshot_basis is not None:
        summary["source"]["snapshot_basis"] = source.snapshot_basis
        summary["snapshot_version_changed"] = source.snapshot_version_changed
    if source.empty and schedule.skip_when_empty:
        return Skipped(SKIPPED_EMPTY, detail=summary)
    _capture_snapshot_versions(journal, source)
    outcomes, handed_back = _deliver_to_recipients(journal, services, schedule, source)
    failed = [user for user, outcome in outcomes.items() if outcome.status == FAILED]
    if handed_back:
        raise DeliveryContinues(f"the receive's time ran out after {len(outcomes)} recipients; the next receive "
                                "sends to the rest")
    skipped: dict[str, int] = {}
    refused: dict[str, int] = {}
    for outcome in outcomes.values():
        if outcome.status == REFUSED:
            refused[outcome.code] = refused.get(outcome.code, 0) + 1
        elif outcome.status == SKIPPED:
            skipped[outcome.code] = skipped.get(outcome.code, 0) + 1
    if failed:
        if services.on_failed is not None:
            services.on_failed(len(failed))
        raise DeliveryIncomplete(f"{len(failed)} of {len(outcomes)} recipients' submissions failed; retried")
    sent = sum(1 for outcome in outcomes.values() if outcome.status == SENT)
    detail = {**summary, "recipients": len(outcomes), "sent": sent, "skipped": skipped}
    if refused:
        detail["refused"] = refused
        if sent == 0:
            return Refused(RECIPIENTS_REFUSED, "the provider refused every recipient the run tried and none was sent "
                           "to", detail=detail)
    return Succeeded(detail)


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


def _query_source(journal: DeliveryJournal, services: DeliveryServices, schedule: QuerySchedule,
                  actor: str) -> DeliverySource | Refused:
    """The run's query file: the recorded one when intact, else streamed and uploaded now.
    A refusal of the run instead: ``file_lost`` (the recorded file is gone or changed after
    messages may have linked to it), ``definition_invalid``."""
    ctx = journal.ctx
    with journal.conn.transaction():
        recorded = get_source(journal.conn, workspace_id=ctx.workspace_id, run_id=ctx.run_id)
    if recorded is not None and _object_intact(services, recorded.object_key, recorded.sha256):
        return recorded
    if recorded is not None:
        with journal.conn.transaction():
            claimed = outbox_claimed(journal.conn, run_id=ctx.run_id)
        if claimed:  # a message may link to the recorded file: never other contents under its key
            return Refused(FILE_LOST, "the run's file is gone or changed after messages linking to it may have "
                           "been sent; it is not made again with other contents",
                           detail={"object_key": recorded.object_key, "sha256": recorded.sha256})
    assert schedule.query_id is not None and schedule.query_version is not None
    with journal.conn.transaction():
        version = store.get_version(journal.conn, workspace_id=ctx.workspace_id, query_id=schedule.query_id,
                                    version=schedule.query_version)
        presentation = presentation_of(journal.conn, ctx.workspace_id)
    try:
        compiled = compile_query(version.parsed(), workspace_id=ctx.workspace_id)
    except InvalidDefinition as error:
        return Refused("definition_invalid", f"{error.field}: {error.reason}")
    key = object_key(ctx.workspace_id, ctx.run_id, schedule.format)
    with tempfile.TemporaryDirectory(prefix="delivery-", dir=services.tmp_dir) as folder:
        path = os.path.join(folder, f"delivery.{schedule.format}")
        rows = write_file(journal.conn, compiled, schedule.format, path, presentation)
        journal.keepalive()
        size, digest = file_digest(path)
        services.s3.upload_file(Filename=path, Bucket=services.bucket, Key=key,
                                ExtraArgs={"ContentType": CONTENT_TYPES[schedule.format],
                                           "Metadata": {"sha256": digest, "run-id": str(ctx.run_id)}})
    journal.keepalive()
    return record_source(journal, schedule, actor, object_key=key, byte_size=size, sha256=digest, row_count=rows,
                          query_id=schedule.query_id, query_version=schedule.query_version)


def _report_source(journal: DeliveryJournal, services: DeliveryServices, schedule: QuerySchedule,
                   actor: str) -> DeliverySource | Refused:
    """The run's report PDF: a render keyed by the run id, polled until it is terminal. A
    refusal of the run instead: ``source_access_lost`` (the report deleted, or the render
    refused the person the run acts for), ``definition_invalid``, ``render_failed``."""
    ctx = journal.ctx
    assert schedule.report_id is not None
    with journal.conn.transaction():
        recorded = get_source(journal.conn, workspace_id=ctx.workspace_id, run_id=ctx.run_id)
    if recorded is not None:
        return recorded
    try:
        render = rendering.request_render(journal.conn, workspace_id=ctx.workspace_id, report_id=schedule.report_id,
                                          idempotency_key=str(ctx.run_id), requested_by=actor, now=ctx.now)
    except rendering.ReportNotFound:
        return Refused(SOURCE_ACCESS_LOST, "the report was deleted", detail={"reason": access.NOT_FOUND},
                       pause_reason=SOURCE_ACCESS_LOST)
    if render.state not in rendering.TERMINAL_STATES:
        if services.renderer is None:
            raise RuntimeError("no report renderer configured")
        services.renderer.request(workspace_id=ctx.workspace_id, render_id=render.id)
        with journal.conn.transaction():  # a render that finished at once needs no wait
            render = rendering.get_render(journal.conn, workspace_id=ctx.workspace_id, render_id=render.id)
    deadline = services.monotonic() + services.render_poll_s
    while render.state not in rendering.TERMINAL_STATES:
        if services.monotonic() >= deadline:
            raise RenderUnfinished(f"render {render.id} still {render.state} after {services.render_poll_s:.0f} s")
        services.sleep(services.render_poll_interval_s)
        journal.keepalive()
        with journal.conn.transaction():
            render = rendering.get_render(journal.conn, workspace_id=ctx.workspace_id, render_id=render.id)
    if render.state == "failed":
        code = render.error_code or rendering.UNEXPECTED_ERROR
        if code in rendering.ACCESS_CODES:
            return Refused(SOURCE_ACCESS_LOST, f"the render refused {actor}: {code}",
                           detail={"acted_for": actor, "reason": code}, pause_reason=SOURCE_ACCESS_LOST)
        if code == rendering.DEFINITION_INVALID:
            return Refused("definition_invalid", render.error_message or code)
        return Refused("render_failed", f"the report render failed: {code}")
    with journal.conn.transaction():
        previous_version = previous_report_version(journal.conn, workspace_id=ctx.workspace_id,
                                                   schedule_id=schedule.schedule_id, run_id=ctx.run_id)
        previous_basis = previous_snapshot_basis(journal.conn, workspace_id=ctx.workspace_id,
                                                 schedule_id=schedule.schedule_id, run_id=ctx.run_id)
    assert render.object_key is not None and render.sha256 is not None
    return record_source(
        journal, schedule, actor, object_key=render.object_key, byte_size=render.byte_size or 0,
        sha256=render.sha256, report_id=schedule.report_id, report_version=render.report_version,
        render_id=render.id, section_row_counts=render.section_row_counts,
        row_count=None if render.section_row_counts is None else sum(render.section_row_counts),
        version_changed=previous_version is not None and previous_version != render.report_version,
        snapshot_basis=None if render.snapshot_basis is None else Jsonb(render.snapshot_basis),
        snapshot_version_changed=snapshot_version_changed(render.snapshot_basis, previous_basis))


def _capture_snapshot_versions(journal: DeliveryJournal, source: DeliverySource) -> None:
    """Mark the snapshot versions the run's report shows ``captured``, before any message
    links to the file (idempotent: every attempt that goes on to send marks them again)."""
    ids = [UUID(b["run_id"]) for b in source.snapshot_basis or () if b]
    if ids:
        with journal.conn.transaction():
            ledger.capture_versions(journal.conn, ids, now=journal.ctx.now)


# ---------------------------------------------------------------------- the recipients


def _resolve_recipients(conn: psycopg.Connection, schedule: QuerySchedule, user_ids: list[str]) -> dict[str, Recipient]:
    """Resolve the recipients now with the access rule (:func:`access.check_people`, and
    the source's existence once): deactivated, left, any other refusal (``no_access``),
    then an address (``no_address``), then the recipient's opt-out of this schedule
    (``unsubscribed``) and the workspace's suppression list (``suppressed``)."""
    decisions = access.check_people(conn, workspace_id=schedule.workspace_id, user_ids=user_ids,
                                    permission=source_read_permission(schedule))
    source_id = schedule.query_id if schedule.source_kind == "query" else schedule.report_id
    assert source_id is not None
    exists = access.object_exists(conn, schedule.source_kind, schedule.workspace_id, source_id)
    users = contacts(conn, user_ids)
    opted_out = opted_out_among(conn, workspace_id=schedule.workspace_id, schedule_id=schedule.schedule_id,
                                user_ids=user_ids)
    suppressed = suppressed_among(conn, schedule.workspace_id,
                                  [u["email"] for u in users.values() if u.get("email")])
    out: dict[str, Recipient] = {}
    for user_id in user_ids:
        decision, user = decisions[user_id], users.get(user_id) or {}
        reason = None
        if not decision:
            reason = _SKIP_REASON.get(decision.reason or "", NO_ACCESS)
        elif not exists:
            reason = NO_ACCESS
        elif not user.get("email"):
            reason = NO_ADDRESS
        elif user_id in opted_out:
            reason = UNSUBSCRIBED
        elif str(user["email"]).lower() in suppressed:
            reason = SUPPRESSED
        out[user_id] = Recipient(user_id, reason, user.get("display_name") or user_id, user.get("email"))
    return out


def resolve_recipient(conn: psycopg.Connection, schedule: QuerySchedule, user_id: str) -> Recipient:
    """``user_id`` resolved now as a run resolves its recipients: ``skip_reason`` None when
    a run would send to them, else why not (``no_access``, ``deactivated``,
    ``left_workspace``, ``no_address``, ``unsubscribed``, ``suppressed``)."""
    return _resolve_recipients(conn, schedule, [user_id])[user_id]


def classify_submission_error(error: BaseException) -> tuple[str, bool]:
    """``(error_code, permanent)`` of a submission that raised: a provider code in
    :data:`PERMANENT_REFUSALS` is permanent for that recipient (``rejected``,
    ``invalid_address``); throttling is ``throttled``, any other provider error
    ``provider_error``, anything else (network, timeout) ``submission_error``: retried."""
    code = _error_code(error)
    if code in PERMANENT_REFUSALS:
        return PERMANENT_REFUSALS[code], True
    if code in THROTTLING_CODES:
        return "throttled", False
    return ("provider_error" if code is not None else "submission_error"), False


SENT, FAILED, REFUSED, SKIPPED = "sent", "failed", "refused", "skipped"


@dataclass(frozen=True)
class RecipientOutcome:
    """One recipient's outcome in a run: ``status`` :data:`SENT`, :data:`FAILED` (the run
    is retried for them), :data:`REFUSED` (a permanent provider refusal, not retried;
    ``code`` its error code) or :data:`SKIPPED` (``code`` the skip reason)."""

    status: str
    code: str = ""


_SENT, _FAILED = RecipientOutcome(SENT), RecipientOutcome(FAILED)


def _deliver_to_recipients(journal: DeliveryJournal, services: DeliveryServices, schedule: QuerySchedule,
                           source: DeliverySource) -> tuple[dict[str, RecipientOutcome], bool]:
    """Deliver to every recipient; returns each one's outcome (sent, failed (retried),
    refused (a permanent provider refusal or ``unconfirmed``, not retried, with its code) or
    skipped (with the reason)) and whether the run was handed back for lack of time (the
    recipients without an outcome are sent by the next receive).
    Outcomes recorded by an earlier attempt stay; a recipient whose earlier submission failed
    and who is no longer on the schedule is settled ``skipped`` / ``removed``, one who is
    skipped now (deactivated, left ...) ``skipped`` with that reason; one whose earlier
    'sending' claim has no record is settled ``failed`` / ``unconfirmed`` (never sent again).
    The submissions are paced, concurrent and fenced by their 'sending' claims
    (:func:`timekeeper.reporting.sending.send_all`)."""
    ctx = journal.ctx
    with journal.conn.transaction():
        earlier_outcomes = {d.user_id: d for d in list_deliveries(journal.conn, workspace_id=ctx.workspace_id,
                                                                   run_id=ctx.run_id)}
    outcomes: dict[str, RecipientOutcome] = {}
    pending: list[str] = []
    current = ([ctx.requested_by] if ctx.trigger == TEST and ctx.requested_by else
               list_recipients(ctx.conn, workspace_id=ctx.workspace_id, schedule_id=schedule.schedule_id))
    listed = set(current)
    removed: list[Recipient] = []
    for user_id in [*current, *sorted(set(earlier_outcomes) - listed)]:
        earlier = earlier_outcomes.get(user_id)
        if earlier is not None and earlier.status == "sent":
            outcomes[user_id] = _SENT
        elif earlier is not None and earlier.status == "skipped":
            outcomes[user_id] = RecipientOutcome(SKIPPED, earlier.skip_reason or NO_ACCESS)
        elif earlier is not None and earlier.status == "failed" and earlier.error_code in NOT_RETRIED_CODES:
            outcomes[user_id] = RecipientOutcome(REFUSED, earlier.error_code)
        elif user_id not in listed:
            removed.append(Recipient(user_id, REMOVED, user_id, None))
        else:
            pending.append(user_id)
    resolved = _resolve_recipients(ctx.conn, schedule, pending) if pending else {}
    skips = [r for r in resolved.values() if r.skip_reason is not None] + removed
    record_skips(journal, schedule, skips)
    outcomes.update({r.user_id: RecipientOutcome(SKIPPED, r.skip_reason) for r in skips if r.skip_reason})
    to_send = [r for r in resolved.values() if r.skip_reason is None]
    for user_id in settle_unconfirmed(journal, schedule, to_send):
        outcomes[user_id] = RecipientOutcome(REFUSED, UNCONFIRMED)
    to_send = [r for r in to_send if r.user_id not in outcomes]
    recorded_ids = claim_all(journal, schedule, [r.user_id for r in to_send])
    composer = MessageComposer(ctx.conn, schedule, now=ctx.now, run_date=ctx.occurrence_local.date(),
                               row_count=source.row_count)

    def prepared() -> Iterator[Prepared | tuple[Recipient, str]]:
        for i, recipient in enumerate(to_send):
            if i:
                crash_point("delivery.between_recipients")
            recorded = recorded_ids.get(recipient.user_id)
            if recorded is not None:
                yield recipient, recorded
            else:
                yield _prepare(services, schedule, source, composer, recipient, ctx.now)

    def logged(recipient: Recipient, error: BaseException, code: str, permanent: bool) -> None:
        obs.logger.warning("delivery submission failed", extra={
            "run_id": str(ctx.run_id), "user_id": recipient.user_id, "error_type": type(error).__name__,
            "error_code": code, "permanent": permanent})

    report = send_all(journal, schedule, prepared(), mailer=services.mailer, policy=services.send_policy,
                      time_left_s=services.time_left_s or _receive_clock(services), sleep=services.sleep,
                      monotonic=services.monotonic, classify=classify_submission_error, on_error=logged)
    if report.throttles and services.on_throttled is not None:
        services.on_throttled(report.throttles)
    for user_id, (status, code) in report.outcomes.items():
        outcomes[user_id] = (_SENT if status == SENT else _FAILED if status == FAILED
                             else RecipientOutcome(REFUSED, code))
    return outcomes, report.handed_back


def _receive_clock(services: DeliveryServices) -> Callable[[], float]:
    """The receive's remaining time (seconds) when the edge gives none: the consumer's
    timeout (``services.receive_timeout_s``) counted from now, the handler's start."""
    started = services.monotonic()
    return lambda: services.receive_timeout_s - (services.monotonic() - started)


def _prepare(services: DeliveryServices, schedule: QuerySchedule, source: DeliverySource,
             composer: MessageComposer, recipient: Recipient, now: Any) -> Prepared:
    """One recipient's message: the personal download and opt-out links signed, the
    templates rendered, framed with the one-click headers, ready for the mailer."""
    ctx_run, ws = source.run_id, schedule.workspace_id
    expires = composer.expires
    token = services.links.sign(DownloadLink(ws, ctx_run, recipient.user_id, source.object_key, expires))
    link = f"{services.download_base_url}downloads/{token}"
    opt_out = services.download_base_url + "opt-outs/" + sign_opt_out(
        services.links, OptOutLink(ws, schedule.schedule_id, ctx_run, recipient.user_id), now=now)
    composed = composer.compose(recipient.display_name, link=link, opt_out_url=opt_out)
    assert recipient.email is not None
    email, mailer = recipient.email, services.mailer

    def send() -> str:
        return mailer.send(to=email, subject=composed.subject, html=composed.html, text=composed.text,
                           headers={"List-Unsubscribe": f"<{opt_out}>", "List-Unsubscribe-Post": ONE_CLICK})
    return Prepared(recipient, send, expires)


__all__ = [
    "DELIVER", "MAX_RECIPIENTS", "ONE_CLICK", "OWNER", "PERMANENT_REFUSALS", "RENDER_POLL_S", "RENDER_UNFINISHED",
    "NOT_RETRIED_CODES", "RECIPIENTS_UNFINISHED", "STALENESS", "SUPPRESSED", "TEST", "UNSUBSCRIBED",
    "DeliveryContinues", "Delivery", "DeliveryAttempt", "DeliveryIncomplete", "DeliveryServices", "DeliverySource",
    "QuerySchedule", "RecipientOutcome", "RenderUnfinished", "RunTakenOver", "resolve_recipient",
    "check_source_access", "check_time_budget", "classify_submission_error", "deliver", "get_delivery",
    "get_query_schedule", "get_source", "list_attempts", "list_deliveries", "list_recipients", "object_key",
    "source_read_permission", "worst_case_run_s",
]
