"""Publish after commit: the one outbox every pipeline offers its work through.

A queue cannot join a database transaction, so every pipeline follows the same four steps:

1. **Committed intent.** The work to offer (a run, an export, a snapshot job) is written
   and committed first, so a message never names a row the database does not have.
2. **Publish after commit.** :func:`publish_committed` sends the messages; the publisher
   reports back the keys of those the queue refused (it never raises for a refusal).
3. **Record the outcome.** The pipeline's :class:`Outbox` records the accepted ones and,
   once the send is over, the refused ones, with its own statements (a pipeline's table,
   its columns and its statement count are its own; this module runs them in order).
4. **Re-offer what was never accepted.** A refusal, or a crash between the commit and the
   record, leaves the intent unaccepted; the pipeline's selection of such intents is sent
   again by :func:`reoffer` (or inside a pipeline's own claim, when it has one). The
   consumer absorbs duplicates: a message may be sent more than once, never for a row
   that does not exist.

This module knows no pipeline: the message type, its key, the recording statements and
the crash points of fault tests are the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

import psycopg

from timekeeper.faults import crash_point
from timekeeper.observability import logger

M = TypeVar("M")
M_contra = TypeVar("M_contra", contravariant=True)


class Publisher(Protocol[M_contra]):
    """Sends messages to one queue; returns the keys of the messages the queue refused.

    Implementations report a refused or failed send rather than raise for it
    (:class:`timekeeper.aws.sqs.SqsMessagePublisher` is the deployed one)."""

    def publish(self, messages: list[M_contra]) -> set[UUID]: ...


@dataclass(frozen=True)
class Outbox(Generic[M]):
    """How one pipeline's committed intents are published and their outcome recorded.

    ``key(message)``: the id a publisher reports a refusal by. ``record_accepted(conn,
    accepted)``: records the messages the queue took (called only when there are some);
    ``record_refused(conn, refused)``: called once the send is over with the refused ones,
    possibly none, so a pipeline can close its send in the same statement (the dispatcher
    deletes its pending-offer row there). Either may be None (nothing to record).
    ``after_accept`` / ``before_refusal``: crash points (:mod:`timekeeper.faults`) hit
    after a send the queue accepted and before the refusals are recorded. ``contain``: a
    publisher that raises counts as refusing every message (logged), instead of the error
    propagating; for a caller that answers a request and relies on the re-offer.
    ``name``: the pipeline's name in log lines.
    """

    key: Callable[[M], UUID]
    record_accepted: Callable[[psycopg.Connection, list[M]], Any] | None = None
    record_refused: Callable[[psycopg.Connection, list[M]], Any] | None = None
    after_accept: str | None = None
    before_refusal: str | None = None
    contain: bool = False
    name: str = "outbox"


@dataclass(frozen=True)
class Sent(Generic[M]):
    """One send's outcome: the ``accepted`` and ``refused`` messages (in the order given),
    and what ``record_accepted`` / ``record_refused`` returned (None when not called)."""

    accepted: list[M]
    refused: list[M]
    recorded: Any = None
    released: Any = None


def publish_committed(conn: psycopg.Connection, publisher: Publisher[M], messages: Sequence[M],
                      outbox: Outbox[M]) -> Sent[M]:
    """Send ``messages`` (intents already committed) and record the outcome with ``outbox``.

    Must be called after the transaction that wrote the intents committed, outside any
    transaction of the caller's that should not include the records. Order: send; the
    ``after_accept`` crash point when some were accepted; ``record_accepted``; the
    ``before_refusal`` crash point when some were refused; ``record_refused`` (always,
    also for an empty ``messages``). A crash anywhere after the send leaves accepted
    intents unrecorded: the pipeline's re-offer sends them again. Raises what the
    publisher raises (unless ``outbox.contain``) and what the recording statements raise
    (``psycopg.Error``; the messages were sent).
    """
    messages = list(messages)
    if not messages:
        released = outbox.record_refused(conn, []) if outbox.record_refused is not None else None
        return Sent([], [], None, released)
    try:
        refused_keys = publisher.publish(messages)
    except Exception as error:
        if not outbox.contain:
            raise
        logger.warning("publish failed; offered again later", extra={"outbox": outbox.name,
                                                                      "error": type(error).__name__})
        refused_keys = {outbox.key(m) for m in messages}
    if refused_keys:
        accepted = [m for m in messages if outbox.key(m) not in refused_keys]
        refused = [m for m in messages if outbox.key(m) in refused_keys]
    else:
        accepted, refused = messages, []
    recorded = None
    if accepted:
        if outbox.after_accept is not None:
            crash_point(outbox.after_accept)
        if outbox.record_accepted is not None:
            recorded = outbox.record_accepted(conn, accepted)
    if refused and outbox.before_refusal is not None:
        crash_point(outbox.before_refusal)
    released = outbox.record_refused(conn, refused) if outbox.record_refused is not None else None
    return Sent(accepted, refused, recorded, released)


def reoffer(conn: psycopg.Connection, publisher: Publisher[M], outbox: Outbox[M],
            unaccepted: Callable[[psycopg.Connection], Sequence[M]]) -> Sent[M]:
    """Send again what was never accepted: ``unaccepted(conn)`` selects the pipeline's
    intents to re-offer (run in a transaction of its own, committed before the send),
    then :func:`publish_committed` sends and records them. Returns the :class:`Sent`."""
    with conn.transaction():
        messages = list(unaccepted(conn))
    return publish_committed(conn, publisher, messages, outbox)
