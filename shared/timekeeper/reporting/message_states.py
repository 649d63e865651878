"""Every message's fate: the states Amazon SES publishes for a submitted message, read
back beside its delivery row, and the workspace's suppression list.

SES publishes the configuration set's events (delivery, bounce, complaint, reject,
delivery delay) to an SNS topic; an SQS queue subscribed with raw message delivery hands
each event's JSON, as SES wrote it (:class:`SesEvent`), to the message-events consumer
on the one SQS batch entry. :func:`record_message_event` finds the delivery by the
provider message id the outbox recorded and records:

* **the event**, once: SNS delivers at least once and in any order, so an event is keyed
  by (message id, state, the event's own instant) and a duplicate changes nothing;
* **the message's state**, by the order rule: the higher rank wins
  (:data:`RANKS`: ``delivery_delayed`` 1 < ``delivered`` 2 < ``bounced`` = ``rejected`` 3 <
  ``complained`` 4), and between two events of one rank the later event instant. A
  state is never overwritten by one that ranks below it, whichever arrives first;
* **the suppression**: a permanent bounce (``bounceType`` ``Permanent``) or a complaint
  puts the reported addresses on the workspace's list; later sends of the workspace skip
  them (skip reason ``suppressed``). A transient bounce is recorded, not suppressed.

Only a workspace admin takes an address off the list (:func:`remove_suppression`: a
mailbox that was full and is fixed, an address the admin verified), with a reason; the
removal is recorded with the suppression as it stood (:func:`list_suppression_removals`).
A later permanent bounce or complaint puts the address back.

An owner notice message (its outbox row has no run, :mod:`timekeeper.reporting.notice_mail`)
is recorded the same way with ``run_id`` None; its bounce or complaint suppresses the
address for the workspace's deliveries and notice e-mails alike.

An event whose message id no delivery has (yet) is ``unknown``: the consumer lets the
queue bring it back (the id is recorded a moment after SES accepted the message) and
drops it, logged, on its last receive. Event types the set does not publish to us
(``Send``, ``Open`` ...) are ``ignored``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import psycopg
from pydantic import AliasChoices, AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from timekeeper.db import load_queries
from timekeeper.db.rows import fetch_all, fetch_one, fetch_row, fetch_rows, fetch_value

SQL = load_queries("timekeeper.reporting", "message_states.sql")

DELIVERY_DELAYED, DELIVERED, BOUNCED, REJECTED, COMPLAINED = (
    "delivery_delayed", "delivered", "bounced", "rejected", "complained")
#: The order rule's ranks: a state is replaced only by a higher rank, or by the same rank
#: with a later event instant.
RANKS = {DELIVERY_DELAYED: 1, DELIVERED: 2, BOUNCED: 3, REJECTED: 3, COMPLAINED: 4}
#: SES ``eventType`` -> our state.
EVENT_TYPES = {"DeliveryDelay": DELIVERY_DELAYED, "Delivery": DELIVERED, "Bounce": BOUNCED, "Reject": REJECTED,
               "Complaint": COMPLAINED}
#: What :func:`record_message_event` reports.
RECORDED, DUPLICATE, UNKNOWN, IGNORED = "recorded", "duplicate", "unknown", "ignored"

_Text = Annotated[str, Field(max_length=1000)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SesRecipient(_Part):
    emailAddress: Annotated[str, Field(min_length=3, max_length=320)]  # noqa: N815 - SES's field names


class SesMail(_Part):
    """The ``mail`` object: ``messageId`` (the id ``SendEmail`` / ``SendRawEmail`` answered)
    and ``timestamp`` (when SES accepted the message)."""

    messageId: Annotated[str, Field(min_length=1, max_length=200)]  # noqa: N815
    timestamp: AwareDatetime
    destination: list[str] = []


class SesBounce(_Part):
    bounceType: _Text  # noqa: N815
    bounceSubType: _Text | None = None  # noqa: N815
    bouncedRecipients: list[SesRecipient]  # noqa: N815
    timestamp: AwareDatetime


class SesComplaint(_Part):
    complainedRecipients: list[SesRecipient]  # noqa: N815
    timestamp: AwareDatetime
    complaintFeedbackType: _Text | None = None  # noqa: N815
    complaintSubType: _Text | None = None  # noqa: N815


class SesDelivery(_Part):
    timestamp: AwareDatetime
    recipients: list[str] = []


class SesReject(_Part):
    reason: _Text | None = None


class SesDeliveryDelay(_Part):
    timestamp: AwareDatetime
    delayType: _Text | None = None  # noqa: N815


class SesEvent(_Part):
    """One SES event record as the configuration set publishes it (``eventType``; the
    identity's own notifications name it ``notificationType``). The object of the event's
    type must be there (a ``Bounce`` without ``bounce`` is malformed: ``ValueError``)."""

    eventType: Annotated[str, Field(min_length=1, max_length=50,  # noqa: N815
                                    validation_alias=AliasChoices("eventType", "notificationType"))]
    mail: SesMail
    bounce: SesBounce | None = None
    complaint: SesComplaint | None = None
    delivery: SesDelivery | None = None
    reject: SesReject | None = None
    deliveryDelay: SesDeliveryDelay | None = None  # noqa: N815

    @model_validator(mode="after")
    def _has_its_object(self) -> SesEvent:
        field = {"Bounce": "bounce", "Complaint": "complaint", "Delivery": "delivery", "Reject": "reject",
                 "DeliveryDelay": "deliveryDelay"}.get(self.eventType)
        if field is not None and getattr(self, field) is None:
            raise ValueError(f"a {self.eventType} event has a {field} object")
        return self

    @property
    def state(self) -> str | None:
        """Our state of the event (None: a type we do not record)."""
        return EVENT_TYPES.get(self.eventType)

    def facts(self) -> tuple[datetime, str | None, str | None, list[str]]:
        """``(event instant, kind, subkind, addresses to suppress)``: the event's own
        timestamp (a reject has none: the message's), the bounce type and subtype, the
        complaint's feedback type or the delay type, and the addresses a permanent bounce
        or a complaint names."""
        if self.bounce is not None and self.eventType == "Bounce":
            addresses = ([r.emailAddress for r in self.bounce.bouncedRecipients]
                         if self.bounce.bounceType == "Permanent" else [])
            return self.bounce.timestamp, self.bounce.bounceType, self.bounce.bounceSubType, addresses
        if self.complaint is not None and self.eventType == "Complaint":
            return (self.complaint.timestamp, self.complaint.complaintFeedbackType, self.complaint.complaintSubType,
                    [r.emailAddress for r in self.complaint.complainedRecipients])
        if self.delivery is not None and self.eventType == "Delivery":
            return self.delivery.timestamp, None, None, []
        if self.deliveryDelay is not None and self.eventType == "DeliveryDelay":
            return self.deliveryDelay.timestamp, self.deliveryDelay.delayType, None, []
        reason = self.reject.reason if self.reject is not None else None
        return self.mail.timestamp, reason, None, []


@dataclass(frozen=True)
class MessageState:
    """A message's state as it stands (``message_states``): ``state`` by the order rule,
    ``event_at`` the winning event's instant (aware UTC), ``kind`` / ``subkind`` its
    bounce type and subtype (or complaint feedback type, delay type, reject reason) and
    ``events`` how many distinct events were recorded."""

    provider_message_id: str
    run_id: UUID | None
    user_id: str
    state: str
    event_at: datetime
    kind: str | None
    subkind: str | None
    events: int


@dataclass(frozen=True)
class MessageEvent:
    """One recorded event of a message (``message_events``)."""

    provider_message_id: str
    run_id: UUID | None
    user_id: str
    state: str
    event_at: datetime
    kind: str | None
    subkind: str | None


@dataclass(frozen=True)
class Suppression:
    """An address the workspace's sends skip: ``reason`` bounced | complained."""

    workspace_id: UUID
    address: str
    reason: str
    provider_message_id: str
    suppressed_at: datetime


@dataclass(frozen=True)
class SuppressionRemoval:
    """An address a workspace admin took off the suppression list (``mail_suppression_removals``):
    the suppression as it stood (``suppression_reason`` bounced | complained, the
    ``provider_message_id`` that caused it, ``suppressed_at``), and the removal:
    ``removed_by`` (the admin's user id), ``removed_at`` (aware UTC) and ``reason``."""

    id: int
    workspace_id: UUID
    address: str
    suppression_reason: str
    provider_message_id: str
    suppressed_at: datetime
    removed_by: str
    removed_at: datetime
    reason: str


def record_message_event(conn: psycopg.Connection, event: SesEvent, *, now: datetime) -> str:
    """Record ``event`` beside its delivery (see the module's description), in the
    caller's transaction. Returns :data:`RECORDED` (new), :data:`DUPLICATE` (recorded
    before: nothing changed), :data:`UNKNOWN` (no delivery has the message id) or
    :data:`IGNORED` (a type we do not record). ``now``: the receipt instant (aware UTC).
    Raises ``psycopg.Error``."""
    state = event.state
    if state is None:
        return IGNORED
    found = fetch_row(conn, SQL["find_message"], {"id": event.mail.messageId})
    if found is None:
        return UNKNOWN
    event_at, kind, subkind, addresses = event.facts()
    params: dict[str, Any] = {"id": event.mail.messageId, "state": state, "rank": RANKS[state],
                              "event_at": event_at, "kind": kind, "subkind": subkind, "now": now, **found}
    new = bool(fetch_value(conn, SQL["record_event"], params))
    if addresses:
        conn.execute(SQL["suppress"], {"workspace_id": found["workspace_id"], "id": event.mail.messageId,
                                       "reason": state, "addresses": addresses, "now": now})
    return RECORDED if new else DUPLICATE


def suppressed_among(conn: psycopg.Connection, workspace_id: UUID, addresses: list[str]) -> set[str]:
    """The lower-cased addresses among ``addresses`` on the workspace's suppression list."""
    if not addresses:
        return set()
    return {r["address"] for r in fetch_rows(conn, SQL["suppressed_among"],
                                             (workspace_id, [a.lower() for a in addresses]))}


def list_suppressions(conn: psycopg.Connection, *, workspace_id: UUID) -> list[Suppression]:
    """The workspace's suppression list, oldest first."""
    return fetch_all(conn, SQL["list_suppressions"], (workspace_id,), Suppression)


def remove_suppression(conn: psycopg.Connection, *, workspace_id: UUID, address: str, actor: str, reason: str,
                       now: datetime) -> SuppressionRemoval | None:
    """Take ``address`` (compared lower-cased, as the list stores it) off the workspace's
    suppression list and record the removal (``actor``, ``reason``, ``now`` aware UTC) in
    one statement, in the caller's transaction; the next send to the address goes out.
    Returns the removal record, or None when the address is not on the list (nothing
    recorded: a second removal changes nothing). Raises ``psycopg.Error`` (a reason the
    table's check refuses: blank or over 500 characters)."""
    return fetch_one(conn, SQL["remove_suppression"], {"workspace_id": workspace_id, "address": address,
                                                       "actor": actor, "reason": reason, "now": now},
                     SuppressionRemoval)


def list_suppression_removals(conn: psycopg.Connection, *, workspace_id: UUID, before_id: int | None = None,
                              limit: int = 50) -> list[SuppressionRemoval]:
    """The workspace's suppression removals, newest first: at most ``limit`` below ``before_id``."""
    return fetch_all(conn, SQL["list_suppression_removals"], {"workspace_id": workspace_id, "before_id": before_id,
                                                              "limit": limit}, SuppressionRemoval)


def removal_addresses(conn: psycopg.Connection, *, workspace_id: UUID, ids: list[int]) -> dict[int, str]:
    """``{removal id: address}`` of the workspace's suppression removal records among ``ids``
    (a record an erasure deleted is absent): what an audit event of a removal names, since
    the audit log holds no address."""
    if not ids:
        return {}
    rows = conn.execute(SQL["removal_addresses"], {"workspace_id": workspace_id, "ids": ids}).fetchall()
    return {int(r["id"]): str(r["address"]) for r in rows}


def states_of_run(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID) -> dict[str, MessageState]:
    """``{user id: MessageState}`` of the messages run ``run_id`` submitted that have a state."""
    return {s.user_id: s for s in fetch_all(conn, SQL["states_of_run"], (workspace_id, run_id), MessageState)}


def events_of_run(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID) -> dict[str, list[MessageEvent]]:
    """``{user id: [MessageEvent, ...]}`` of run ``run_id``, each recipient's in event order."""
    out: dict[str, list[MessageEvent]] = {}
    for e in fetch_all(conn, SQL["events_of_run"], (workspace_id, run_id), MessageEvent):
        out.setdefault(e.user_id, []).append(e)
    return out
