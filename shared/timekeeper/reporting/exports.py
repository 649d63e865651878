"""Interactive exports of a saved query version to a CSV or XLSX file in the files bucket.

Lifecycle (one ``exports`` row per export)::

    request_export        queued      committed, then published to the exports queue
      (refused publish:   queued, published_at NULL: offered again by reoffer_exports)
    run_export            running     attempts + 1, started_at = this attempt's start
                          succeeded   the file uploaded, then row_count/byte_size/sha256 recorded
                          failed      error_code: the access rule's reason, definition_invalid,
                                      or attempts_exhausted (the consumer's final receive)

* **Access** is the one rule of :mod:`timekeeper.platform.access`, asked twice for the
  person who requested the export: when it is requested (a refusal raises
  :class:`~timekeeper.platform.access.AccessDenied` with the reason) and again when it runs
  (lost meanwhile: the export fails with the reason as its ``error_code``).
* **The version is pinned** at request time (None: the query's current version), so an
  edit after the request does not change the file.
* **Idempotency**: the same requester with the same idempotency key gets the same export
  (``created`` False).
* **The object key** is derived from the export's id only (:func:`object_key`), so an
  attempt that crashed after its upload and before its record is re-run onto the same
  key: one object per export, never a stray one.
* **Memory does not grow with rows**: the file is written by
  :func:`timekeeper.reporting.writers.write_file` (rows streamed from a server-side
  cursor in one snapshot; cell values as that module describes) into a temporary file,
  which the files bucket's client uploads as a managed transfer (multipart above
  :data:`timekeeper.aws.s3.MULTIPART_THRESHOLD` bytes; the edge builds that client).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import psycopg
from pydantic import BaseModel, ConfigDict

from timekeeper.db import load_queries
from timekeeper.db.attempts import AttemptRule, Failure, Fence, Lease, Lifecycle, record_outcome, settle_failed
from timekeeper.db.outbox import Outbox, Publisher, publish_committed, reoffer
from timekeeper.db.rows import fetch_all, fetch_one
from timekeeper.observability import logger
from timekeeper.platform import access
from timekeeper.reporting import store
from timekeeper.reporting.compiler import compile_query
from timekeeper.reporting.definition import InvalidDefinition
from timekeeper.reporting.objects import EXPORT_FILES, ObjectStore
from timekeeper.reporting.presentation import presentation_of
from timekeeper.reporting.writers import CONTENT_TYPES, FORMATS, file_digest, write_file
from timekeeper.topology import EXPORTS

#: ``error_code`` of an export whose pinned version no longer checks against the catalogue.
DEFINITION_INVALID = "definition_invalid"
#: ``error_code`` of an export whose every attempt failed (settled by the final receive).
ATTEMPTS_EXHAUSTED = "attempts_exhausted"

ExportFormat = Literal["csv", "xlsx"]


class ExportNotFound(LookupError):
    """No such export in the workspace (or not the caller's own)."""


class ExportBusy(Exception):  # noqa: N818 - a signal to retry later, not a failure
    """Another attempt of the export started less than a lease ago and may still run."""


@dataclass(frozen=True)
class Export:
    """One export row. ``state``: queued | running | succeeded | failed; ``attempts``
    counts started attempts; ``started_at`` is the latest attempt's start; ``object_key``,
    ``row_count`` (data rows, header excluded), ``byte_size`` and ``sha256`` (hex of the
    file) are set once succeeded; ``error_code``/``error_message`` once failed."""

    id: UUID
    workspace_id: UUID
    query_id: UUID
    query_version: int
    format: str
    requested_by: str
    idempotency_key: str | None
    state: str
    attempts: int
    object_key: str | None
    row_count: int | None
    byte_size: int | None
    sha256: str | None
    error_code: str | None
    error_message: str | None
    created_at: datetime
    published_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None


SQL = load_queries("timekeeper.reporting", "exports.sql")


class ExportMessage(BaseModel):
    """The exports queue's message: which export to run (JSON, unknown fields refused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    export_id: UUID
    workspace_id: UUID


#: Sends export messages to the exports queue; returns the export ids it could not send
#: (the one outbox's publisher, :class:`timekeeper.db.outbox.Publisher`).
ExportPublisher = Publisher[ExportMessage]


#: The exports' declaration to the one lifecycle (:mod:`timekeeper.db.attempts`): fenced by
#: the attempt number, leased from the attempt's start for the consumer's timeout.
EXPORT_LIFECYCLE = Lifecycle(name="export", table="exports", open_states=("queued", "running"),
                             fence=Fence.ATTEMPT_NUMBER, lease=Lease.STARTED_PLUS_TIMEOUT, error_message_limit=1000,
                             row=Export, statements={"finish_failed": SQL["finish_failed"],
                                                     "row_by_id": SQL["export_by_id"]})


def object_key(workspace_id: UUID, export_id: UUID, fmt: str) -> str:
    """The export's object key, ``exports/<workspace_id>/<export_id>.<csv|xlsx>``
    (:data:`~timekeeper.reporting.objects.EXPORT_FILES`): a function of the export alone,
    so every attempt writes the same object."""
    return EXPORT_FILES.key(workspace_id, export_id, fmt)


def file_name(export: Export) -> str:
    """The name offered for download: ``export-<export id>.<format>``."""
    return f"export-{export.id}.{export.format}"


def _one(conn: psycopg.Connection, statement: str, params: Any) -> Export | None:
    return fetch_one(conn, statement, params, Export)


def request_export(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID, version: int | None,
                   format: str, requested_by: str, idempotency_key: str | None, now: datetime,  # noqa: A002
                   publisher: ExportPublisher) -> tuple[Export, bool]:
    """Request an export of version ``version`` of saved query ``query_id`` (None: its
    current version, pinned now) to ``format`` (``csv`` | ``xlsx``) for ``requested_by``.

    Commits the queued export, then publishes it to ``publisher``; a refused publish leaves
    ``published_at`` NULL for :func:`reoffer_exports`. Returns ``(export, created)``: a
    repeated ``idempotency_key`` of the same requester returns the first request's export
    with ``created`` False (and publishes nothing).

    Raises :class:`~timekeeper.platform.access.AccessDenied` (``reason`` from the access
    rule: ``not_a_member``, ``left_workspace``, ``user_deactivated``, ``missing_role``,
    ``not_found``), :class:`~timekeeper.reporting.store.QueryNotFound` for an unknown
    version, :class:`~timekeeper.reporting.definition.InvalidDefinition` when the version no
    longer compiles, ``ValueError`` for an unknown format.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}")
    with conn.transaction():
        decision = access.check_query(conn, workspace_id=workspace_id, user_id=requested_by, query_id=query_id)
        access.require(decision, f"export query {query_id}")
        if idempotency_key is not None:
            existing = _by_key(conn, workspace_id, requested_by, idempotency_key)
            if existing is not None:
                return existing, False
        pinned = store.get_version(conn, workspace_id=workspace_id, query_id=query_id, version=version)
        compile_query(pinned.parsed(), workspace_id=workspace_id)  # refuse now what could never run
        export = _one(conn, SQL["insert_export"], (workspace_id, query_id, pinned.version, format, requested_by,
                                                   idempotency_key, now))
        if export is None:  # a concurrent request with the same key committed first
            existing = _by_key(conn, workspace_id, requested_by, idempotency_key or "")
            assert existing is not None
            return existing, False
    published = _publish(conn, publisher, [export], now=now)
    return (published[0] if published else export), True


def _by_key(conn: psycopg.Connection, workspace_id: UUID, requested_by: str, key: str) -> Export | None:
    return _one(conn, SQL["export_by_key"], (workspace_id, requested_by, key))


def _export_key(message: ExportMessage) -> UUID:
    return message.export_id


def _outbox(now: datetime) -> Outbox[ExportMessage]:
    """The exports' use of the one outbox (:mod:`timekeeper.db.outbox`): an accepted
    message records ``published_at`` (its updated row is what the send returns), a refused
    one is logged and stays unpublished for :func:`reoffer_exports`; a publisher that
    raises counts as refusing all (the request is committed; a later offer retries it)."""

    def record_accepted(conn: psycopg.Connection, sent: list[ExportMessage]) -> list[Export]:
        with conn.transaction():
            return fetch_all(conn, SQL["mark_published"],
                             (now, list({m.workspace_id for m in sent}), [m.export_id for m in sent]), Export)

    def record_refused(conn: psycopg.Connection, refused: list[ExportMessage]) -> None:
        if refused:
            logger.warning("exports not published; offered again later",
                           extra={"export_ids": sorted(str(m.export_id) for m in refused)})

    return Outbox(key=_export_key, record_accepted=record_accepted, record_refused=record_refused, contain=True,
                  name="exports")


def _message(export: Export) -> ExportMessage:
    return ExportMessage(export_id=export.id, workspace_id=export.workspace_id)


def _publish(conn: psycopg.Connection, publisher: ExportPublisher, exports: list[Export], *,
             now: datetime) -> list[Export]:
    """Publish the committed ``exports``; return the rows of those the queue took, with
    ``published_at`` recorded."""
    return publish_committed(conn, publisher, [_message(e) for e in exports], _outbox(now)).recorded or []


def reoffer_exports(conn: psycopg.Connection, publisher: ExportPublisher, *, now: datetime, older_than: timedelta,
                    workspace_id: UUID | None = None, export_id: UUID | None = None,
                    limit: int = EXPORTS.reoffer_per_pass) -> int:
    """Publish again up to ``limit`` queued exports never published (a refused publish, or
    a crash between commit and publish) created at least ``older_than`` before ``now``,
    oldest first; only ``workspace_id``'s (and only ``export_id``) when given. Returns how
    many the queue took. A duplicate message is harmless (a finished export ignores it)."""

    def unaccepted(conn: psycopg.Connection) -> list[ExportMessage]:
        stale = fetch_all(conn, SQL["unpublished_exports"],
                          {"before": now - older_than, "ws": workspace_id, "id": export_id, "limit": limit}, Export)
        return [_message(e) for e in stale]

    return len(reoffer(conn, publisher, _outbox(now), unaccepted).recorded or [])


@dataclass(frozen=True)
class ExportSweep:
    """What one :func:`sweep_running_exports` pass did: ``settled`` exports failed
    ``attempts_exhausted``, ``reoffered`` messages the queue took again."""

    settled: int = 0
    reoffered: int = 0


def sweep_running_exports(conn: psycopg.Connection, publisher: ExportPublisher, *, now: datetime, lease: timedelta,
                          idle_after: timedelta, max_attempts: int,
                          limit: int = EXPORTS.reoffer_per_pass) -> ExportSweep:
    """Settle or send again up to ``limit`` running exports nothing will finish otherwise
    (their messages were dead-lettered or lost: a consumer killed on every receive, a
    final settlement that failed), oldest first.

    * attempts ran out (``attempts >= max_attempts``, the queue's receives) and the last
      attempt started at least ``lease`` (the consumer's timeout) before ``now``: settled
      ``failed`` / ``attempts_exhausted``;
    * otherwise, no attempt started and no re-offer was made for ``idle_after`` (the lease
      plus the queue's visibility timeout: a message that came back would have started
      one): its message is published again (``reoffered_at`` = ``now``); a duplicate is
      harmless (a leased export makes it wait, a finished one ignores it), and each
      message that runs counts an attempt, so the attempts run out in the end.

    ``conn``: an idle autocommit connection; instants aware UTC. Decisions rest on the
    rows' timestamps and ``now`` only. Raises ``psycopg.Error`` (nothing committed)."""

    settled_ids: list[UUID] = []

    def stale(conn: psycopg.Connection) -> list[ExportMessage]:
        with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            rows = cur.execute(SQL["stale_running_exports"], {
                "max_attempts": max_attempts, "lease_before": now - lease, "idle_before": now - idle_after,
                "limit": limit}).fetchall()
            rule = AttemptRule(max_attempts=max_attempts)
            exhausted = [r["id"] for r in rows if rule.exhausted(r["attempts"])]
            again = [r["id"] for r in rows if not rule.exhausted(r["attempts"])]
            if exhausted:
                settled_ids.extend(r["id"] for r in cur.execute(SQL["settle_stale_exports"],
                                                                 {"now": now, "ids": exhausted}).fetchall())
            marked = cur.execute(SQL["mark_export_reoffered"], {"now": now, "ids": again}).fetchall() \
                if again else []
        return [ExportMessage(export_id=r["id"], workspace_id=r["workspace_id"]) for r in marked]

    def record_refused(conn: psycopg.Connection, refused: list[ExportMessage]) -> None:
        if refused:
            logger.warning("running exports not re-offered; offered again later",
                           extra={"export_ids": sorted(str(m.export_id) for m in refused)})

    sent = reoffer(conn, publisher, Outbox(key=_export_key, record_refused=record_refused, contain=True,
                                           name="exports"), stale)
    if settled_ids or sent.accepted:
        logger.info("running exports swept", extra={"settled": [str(i) for i in settled_ids],
                                                    "reoffered": [str(m.export_id) for m in sent.accepted]})
    return ExportSweep(settled=len(settled_ids), reoffered=len(sent.accepted))


def get_export(conn: psycopg.Connection, *, workspace_id: UUID, export_id: UUID,
               requested_by: str | None = None) -> Export:
    """The export ``export_id`` of ``workspace_id`` (only when ``requested_by`` requested
    it, when given). Raises :class:`ExportNotFound`."""
    with conn.transaction():
        export = _one(conn, SQL["get_export"], (workspace_id, export_id))
    if export is None or (requested_by is not None and export.requested_by != requested_by):
        raise ExportNotFound(export_id)
    return export


def fail_export(conn: psycopg.Connection, *, workspace_id: UUID, export_id: UUID, code: str, message: str,
                now: datetime) -> Export | None:
    """Settle an unfinished export ``failed`` with ``code``; a finished one is returned
    unchanged, an unknown one is None."""
    with conn.transaction():
        export = _one(conn, SQL["lock_export"], (workspace_id, export_id))
        if export is None or export.state in ("succeeded", "failed"):
            return export
        return settle_failed(conn, EXPORT_LIFECYCLE, export, Failure(code, message), now=now)


def run_export(conn: psycopg.Connection, s3: ObjectStore, bucket: str, *, workspace_id: UUID, export_id: UUID,
               now: datetime, lease: timedelta = EXPORTS.consumer.lease, tmp_dir: str | None = None) -> Export:
    """Run export ``export_id`` (what the exports consumer does with a message) and return
    its row as left.

    A finished export (succeeded or failed) is returned unchanged: a duplicate message does
    nothing. Otherwise, in one transaction: the requester's access is checked again (lost:
    ``failed`` with the rule's reason), the pinned version is compiled (no longer valid:
    ``failed``/``definition_invalid``), and the export is marked ``running`` (attempts + 1,
    ``started_at`` = ``now``) and the workspace's presentation read (its zone, locale and
    currency: :mod:`timekeeper.reporting.presentation`). Then the rows are streamed into a temporary file (in
    ``tmp_dir``, default the system's), uploaded to ``bucket`` at :func:`object_key`, and
    the result recorded (``succeeded``; ``finished_at`` = ``now`` + the time taken).
    ``lease``: another attempt started less than this long ago may still be running (the
    consumer's timeout): raises :class:`ExportBusy` then.

    Raises :class:`ExportNotFound`; the database's (``psycopg.Error``) and S3's
    (``botocore`` / ``boto3`` errors) faults propagate for the caller to retry.
    """
    started = time.monotonic()
    with conn.transaction():
        export = _one(conn, SQL["lock_export"], (workspace_id, export_id))
        if export is None:
            raise ExportNotFound(export_id)
        if export.state in ("succeeded", "failed"):
            return export
        if export.state == "running" and AttemptRule(lease=lease).held(export.started_at, now):
            raise ExportBusy(f"export {export_id} attempt {export.attempts} started at {export.started_at}")
        decision = access.check_query(conn, workspace_id=workspace_id, user_id=export.requested_by,
                                      query_id=export.query_id)
        if not decision:
            lost = Failure(decision.reason or access.NOT_FOUND,
                           f"the requester may no longer read the query: {decision.reason}")
            return settle_failed(conn, EXPORT_LIFECYCLE, export, lost, now=now)
        version = store.get_version(conn, workspace_id=workspace_id, query_id=export.query_id,
                                    version=export.query_version)
        try:
            compiled = compile_query(version.parsed(), workspace_id=workspace_id)
        except InvalidDefinition as error:
            invalid = Failure(DEFINITION_INVALID, f"{error.field}: {error.reason}")
            return settle_failed(conn, EXPORT_LIFECYCLE, export, invalid, now=now)
        presentation = presentation_of(conn, workspace_id)
        export = _one(conn, SQL["start_export"], (now, workspace_id, export_id))
        assert export is not None
    key = object_key(workspace_id, export_id, export.format)
    with tempfile.TemporaryDirectory(prefix="export-", dir=tmp_dir) as folder:
        path = os.path.join(folder, f"export.{export.format}")
        rows = write_file(conn, compiled, export.format, path, presentation)
        size, digest = file_digest(path)
        s3.upload_file(Filename=path, Bucket=bucket, Key=key,
                       ExtraArgs={"ContentType": CONTENT_TYPES[export.format], "Metadata": {"sha256": digest}})
    finished = now + timedelta(seconds=time.monotonic() - started)
    with conn.transaction():
        recorded = _one(conn, SQL["finish_succeeded"],
                        (key, rows, size, digest, finished, workspace_id, export_id, export.attempts))
        if recorded is None:  # a later attempt took over (or settled it): its record stands
            recorded = _one(conn, SQL["get_export"], (workspace_id, export_id))
    logger.info("export succeeded", extra={"export_id": str(export_id), "workspace_id": str(workspace_id),
                                           "rows": rows, "bytes": size})
    assert recorded is not None
    return recorded


def consume_export(conn: psycopg.Connection, s3: ObjectStore, bucket: str, message: ExportMessage, *,
                   receive_count: int, max_receive_count: int, now: datetime, lease: timedelta,
                   reconnect: Callable[[], psycopg.Connection] | None = None) -> bool:
    """Handle one exports-queue message; return True to acknowledge it, False to let it
    come back (a batch item failure).

    Runs :func:`run_export`. An unknown export is acknowledged (nothing to do). A fault
    (database, S3, a busy earlier attempt) is retried; on the final receive
    (``receive_count >= max_receive_count``) the export is settled ``failed`` with
    ``attempts_exhausted`` and the message acknowledged, unless another attempt may still
    be running or the settlement itself fails (then it reaches the dead-letter queue, and
    the exports' sweep, :func:`sweep_running_exports`, settles it). ``reconnect``: returns
    a fresh idle connection (the edge's provider), on which the final settlement is made
    once more when ``conn`` was lost (a failover, a network cut). Never raises.
    """
    keys = {"export_id": str(message.export_id), "workspace_id": str(message.workspace_id)}
    try:
        run_export(conn, s3, bucket, workspace_id=message.workspace_id, export_id=message.export_id, now=now,
                   lease=lease)
        return True
    except ExportNotFound:
        logger.warning("export message for an unknown export; dropped", extra=keys)
        return True
    except ExportBusy:
        logger.info("export attempt still leased; retried later", extra=keys)
        return False
    except Exception as error:  # noqa: BLE001 - every fault is retried, then settled
        logger.warning("export attempt failed", extra={**keys, "error_type": type(error).__name__,
                                                       "receive_count": receive_count})
        if not AttemptRule(max_attempts=max_receive_count, lease=lease).final(receive_count=receive_count):
            return False
        last = f"every attempt failed; the last with {type(error).__name__}"

        def settle(on: psycopg.Connection) -> None:
            fail_export(on, workspace_id=message.workspace_id, export_id=message.export_id,
                        code=ATTEMPTS_EXHAUSTED, now=now, message=last)

        try:
            record_outcome(conn, reconnect, settle, name="export", extra=keys)
        except Exception as settle_error:  # noqa: BLE001 - the dead-letter queue keeps the message
            logger.error("could not settle the export failed", extra={**keys,
                                                                      "error_type": type(settle_error).__name__})
            return False
        return True
