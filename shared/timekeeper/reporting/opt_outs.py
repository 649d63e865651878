"""One-click opt-out of a query schedule's messages (RFC 8058), and re-subscribing.

Every message a delivery run sends carries a personal opt-out link and the
``List-Unsubscribe`` / ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` headers
naming it. The link's token is a download-link token of :mod:`timekeeper.reporting.links`
(the same signer, keys and expiry check) whose object key is ``opt-out:<schedule id>``:
it binds the recipient, the workspace, the run whose message carried it and the schedule.
A download token never opts anyone out (its key is a file's), and an opt-out token never
downloads (no delivered file has such a key).

* The public ``POST /opt-outs/{token}`` records the opt-out (:func:`record_opt_out`;
  repeating it changes nothing); ``GET`` only shows a confirmation page with the form.
* Later runs skip the recipient with reason ``unsubscribed`` (:func:`opted_out_among`),
  which the owner sees in the delivery history and in the schedule's opt-out list.
* **Re-subscribing** takes the owner's action and the recipient's consent: the owner
  invites (:func:`invite_resubscribe`), then the recipient, signed in, accepts
  (:func:`accept_resubscribe`), which removes the opt-out. Neither alone sends mail
  again: an owner cannot put an opted-out person back on the list, and a recipient's
  acceptance without an invitation is refused.

**Notice e-mails** (:mod:`timekeeper.reporting.notice_mail`) carry a link of their own:
object key :data:`NOTICE_OPT_OUT_KEY`, the nil run id, binding (workspace, person)
(:func:`sign_notice_opt_out`, :func:`verify_notice_opt_out`). The same public route
records it (:func:`record_notice_opt_out`, table ``notice_mail_opt_outs``); the notice
pass then marks the person's notices ``unsubscribed`` instead of mailing them, and the
person turns the e-mails back on, signed in (:func:`resume_notice_mail`), without any
owner's invitation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import fetch_all, fetch_one, fetch_row, fetch_rows, fetch_value
from timekeeper.platform import audit, notices
from timekeeper.reporting.links import DownloadLink, LinkInvalid, LinkSigner, RotatingLinkSigner

SQL = load_queries("timekeeper.reporting", "opt_outs.sql")

#: The object key prefix that makes a link token an opt-out token.
OPT_OUT_KEY_PREFIX = "opt-out:"
#: The object key that makes a link token a notice-mail opt-out token (no schedule: it
#: names every notice e-mail of the workspace for its recipient).
NOTICE_OPT_OUT_KEY = "opt-out:notices"
#: The run id a notice-mail opt-out token carries (a notice message has no run).
NOTICE_OPT_OUT_RUN = UUID(int=0)
#: How long an opt-out link works: the longest download link's lifetime (720 hours,
#: ``timekeeper.reporting.query_schedules.MAX_LINK_TTL_HOURS``), so the link keys' rotation
#: runbook holds for both kinds of link: a key removed after that leaves no live link
#: signed with it. Every later message carries a fresh link.
OPT_OUT_LINK_TTL = timedelta(hours=720)


@dataclass(frozen=True)
class OptOutLink:
    """What an opt-out token binds: the recipient (``user_id``) of ``schedule_id``'s
    message sent by run ``run_id`` in ``workspace_id``."""

    workspace_id: UUID
    schedule_id: UUID
    run_id: UUID
    user_id: str


@dataclass(frozen=True)
class OptOut:
    """A recipient's opt-out of a schedule (``mail_opt_outs``); ``resubscribe_invited_at``
    (aware UTC) when the owner invited them back."""

    workspace_id: UUID
    schedule_id: UUID
    user_id: str
    run_id: UUID
    opted_out_at: datetime
    resubscribe_invited_at: datetime | None
    resubscribe_invited_by: str | None


def sign_opt_out(signer: LinkSigner | RotatingLinkSigner, link: OptOutLink, *, now: datetime) -> str:
    """The URL-safe token of ``link``, valid :data:`OPT_OUT_LINK_TTL` from ``now`` (aware)."""
    expires = (now + OPT_OUT_LINK_TTL).replace(microsecond=0)
    return signer.sign(DownloadLink(link.workspace_id, link.run_id, link.user_id,
                                    f"{OPT_OUT_KEY_PREFIX}{link.schedule_id}", expires))


def verify_opt_out(signer: LinkSigner | RotatingLinkSigner, token: str, *, now: datetime) -> OptOutLink:
    """The :class:`OptOutLink` of ``token``. Raises ``LinkInvalid`` (tampered, another key,
    or a token of another purpose, e.g. a download link) or ``LinkExpired``."""
    link = signer.verify(token, now=now)
    if not link.object_key.startswith(OPT_OUT_KEY_PREFIX):
        raise LinkInvalid("the link is not an opt-out link")
    try:
        schedule_id = UUID(link.object_key.removeprefix(OPT_OUT_KEY_PREFIX))
    except ValueError:
        raise LinkInvalid("the link is not valid") from None
    return OptOutLink(link.workspace_id, schedule_id, link.run_id, link.user_id)


def record_opt_out(conn: psycopg.Connection, link: OptOutLink, *, now: datetime) -> bool:
    """Record the opt-out ``link`` names (in the caller's transaction); True when it is
    new, False when the recipient had opted out already (kept as it was, except that an
    open re-subscription invitation is withdrawn)."""
    new = bool(fetch_value(conn, SQL["record_opt_out"], {
        "workspace_id": link.workspace_id, "schedule_id": link.schedule_id, "user_id": link.user_id,
        "run_id": link.run_id, "now": now}))
    if new:
        audit.record_event(conn, workspace_id=link.workspace_id, actor=link.user_id, kind="opt_out.added",
                           subject_type="schedule", subject_id=link.schedule_id, before={"receives": True},
                           after={"receives": False, "user_id": link.user_id}, now=now)
    return new


def opted_out_among(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID,
                    user_ids: list[str]) -> set[str]:
    """The users among ``user_ids`` who opted out of ``schedule_id``'s messages."""
    if not user_ids:
        return set()
    return {r["user_id"] for r in fetch_rows(conn, SQL["opted_out_among"], (workspace_id, schedule_id, user_ids))}


def list_opt_outs(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> list[OptOut]:
    """The schedule's opt-outs, oldest first."""
    return fetch_all(conn, SQL["list_opt_outs"], (workspace_id, schedule_id), OptOut)


def get_opt_out(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, user_id: str) -> OptOut | None:
    """One recipient's opt-out of the schedule, or None."""
    return fetch_one(conn, SQL["get_opt_out"], (workspace_id, schedule_id, user_id), OptOut)


def invite_resubscribe(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, user_id: str,
                       actor: str, now: datetime, schedule_name: str | None = None) -> bool:
    """The owner's half of re-subscribing: invite ``user_id`` back (the opt-out stays until
    they accept) and tell them (a :data:`~timekeeper.platform.notices.RESUBSCRIBE_INVITED`
    notice naming ``schedule_name`` and ``actor``, once per opt-out: inviting again tells
    nobody twice). Returns False when the user has not opted out."""
    row = fetch_row(conn, SQL["invite"], {"workspace_id": workspace_id, "schedule_id": schedule_id,
                                          "user_id": user_id, "actor": actor, "now": now})
    if row is None:
        return False
    audit.record_event(conn, workspace_id=workspace_id, actor=actor, kind="opt_out.invited", subject_type="schedule",
                       subject_id=schedule_id, before=None, after={"user_id": user_id, "invited": True}, now=now)
    detail = {"invited_by": actor, **({"name": schedule_name} if schedule_name else {})}
    notices.notify_person(conn, workspace_id=workspace_id, user_id=user_id, kind=notices.RESUBSCRIBE_INVITED,
                          event_key=f"{notices.RESUBSCRIBE_INVITED}:{schedule_id}:{row['opted_out_at'].isoformat()}",
                          now=now, schedule_id=schedule_id, detail=detail)
    return True


def accept_resubscribe(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, user_id: str,
                       now: datetime | None = None) -> bool:
    """The recipient's half: accept the owner's invitation, which removes the opt-out
    (with an ``opt_out.removed`` audit event at ``now``, aware UTC, when given).
    Returns False when there is no invited opt-out of theirs."""
    accepted = fetch_value(conn, SQL["accept"], {"workspace_id": workspace_id, "schedule_id": schedule_id,
                                                 "user_id": user_id}) is not None
    if accepted and now is not None:
        audit.record_event(conn, workspace_id=workspace_id, actor=user_id, kind="opt_out.removed",
                           subject_type="schedule", subject_id=schedule_id, before={"receives": False},
                           after={"receives": True, "user_id": user_id}, now=now)
    return accepted


@dataclass(frozen=True)
class NoticeOptOutLink:
    """What a notice-mail opt-out token binds: the recipient (``user_id``) of the owner
    notice e-mails of ``workspace_id``."""

    workspace_id: UUID
    user_id: str


def sign_notice_opt_out(signer: LinkSigner | RotatingLinkSigner, link: NoticeOptOutLink, *, now: datetime) -> str:
    """The URL-safe token of ``link`` (the same signer and keys as every other link),
    valid :data:`OPT_OUT_LINK_TTL` from ``now`` (aware UTC)."""
    expires = (now + OPT_OUT_LINK_TTL).replace(microsecond=0)
    return signer.sign(DownloadLink(link.workspace_id, NOTICE_OPT_OUT_RUN, link.user_id, NOTICE_OPT_OUT_KEY,
                                    expires))


def verify_notice_opt_out(signer: LinkSigner | RotatingLinkSigner, token: str, *, now: datetime) -> NoticeOptOutLink:
    """The :class:`NoticeOptOutLink` of ``token``. Raises ``LinkInvalid`` (tampered,
    another key, or a token of another purpose: a download link or a schedule's opt-out
    link) or ``LinkExpired``."""
    link = signer.verify(token, now=now)
    if link.object_key != NOTICE_OPT_OUT_KEY or link.run_id != NOTICE_OPT_OUT_RUN:
        raise LinkInvalid("the link is not a notice opt-out link")
    return NoticeOptOutLink(link.workspace_id, link.user_id)


def record_notice_opt_out(conn: psycopg.Connection, link: NoticeOptOutLink, *, now: datetime) -> bool:
    """Record the notice-mail opt-out ``link`` names (in the caller's transaction; ``now``
    aware UTC). True when it is new, False when the person had opted out already (the
    first opt-out is kept)."""
    new = bool(fetch_value(conn, SQL["record_notice_opt_out"], {
        "workspace_id": link.workspace_id, "user_id": link.user_id, "now": now}))
    if new:
        audit.record_event(conn, workspace_id=link.workspace_id, actor=link.user_id, kind="opt_out.notice_mail",
                           subject_type="person", subject_id=link.user_id, before={"mail": True},
                           after={"mail": False}, now=now)
    return new


def notice_opted_out_at(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str) -> datetime | None:
    """When ``user_id`` opted out of ``workspace_id``'s notice e-mails (aware UTC), or None
    when they get them."""
    return fetch_value(conn, SQL["notice_opted_out"], {"workspace_id": workspace_id, "user_id": user_id})


def resume_notice_mail(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str,
                       now: datetime | None = None) -> bool:
    """Turn ``user_id``'s notice e-mails of ``workspace_id`` back on (the person's own,
    signed-in action; an ``opt_out.notice_mail`` audit event at ``now``, aware UTC, when
    given). True when an opt-out was removed, False when there was none."""
    removed = bool(fetch_value(conn, SQL["resume_notice_mail"], {"workspace_id": workspace_id, "user_id": user_id}))
    if removed and now is not None:
        audit.record_event(conn, workspace_id=workspace_id, actor=user_id, kind="opt_out.notice_mail",
                           subject_type="person", subject_id=user_id, before={"mail": False}, after={"mail": True},
                           now=now)
    return removed
