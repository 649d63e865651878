"""Notice e-mails: each person's owner notices (:mod:`timekeeper.platform.notices`) mailed
through the per-recipient outbox of deliveries, with a digest.

The outbox is the deliveries' (``query_delivery_outbox``, decision "An outbox per
recipient"): a message's communication key is claimed before the submission and the
provider's message id recorded after; a recorded submission is never made again, a claim
without a record is submitted again by the next pass (the same one-call window as a
delivery's). A failed submission is classified as a delivery's is
(:func:`timekeeper.reporting.delivery.classify_submission_error`): throttling and other
transient errors are submitted again by the next pass; a permanent refusal (SES
``MessageRejected``, an invalid address) closes the message's notices (``mailed_at``: the
instant mail handling ended; the outbox row keeps no message id and the refusal's code),
never submitted again. A notice message has no run: its key is
``notice:<workspace>:<user>:<first notice id>``, and every notice it carries names it
(``owner_notices.mail_key``).

**The digest rule.** Per person and workspace, at most one notice message per
:data:`DIGEST_WINDOW`: the first notice after a quiet hour is mailed at once, on its own;
notices that arrive while the last message is less than the window old wait, and when the
window is over every waiting notice goes in ONE digest message. A schedule that flaps
(pauses, is resumed, pauses again) or an outage that skips a hundred deliveries therefore
costs each person one message now and at most one an hour after, whatever the count; the
in-product list shows every notice.

**Opting out.** Every message carries the person's signed one-click opt-out link
(:func:`timekeeper.reporting.opt_outs.sign_notice_opt_out`) in both parts and in the
``List-Unsubscribe`` / ``List-Unsubscribe-Post`` headers (RFC 8058). After the opt-out the
person's notices of that workspace are marked ``unsubscribed`` (mailed_at set, nothing
submitted), as ``no_address`` and ``suppressed`` ones are: still listed in the product.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg

from timekeeper import observability as obs
from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_row, fetch_rows, fetch_value
from timekeeper.reporting.delivery import classify_submission_error
from timekeeper.reporting.links import LinkSigner, RotatingLinkSigner
from timekeeper.reporting.message_states import suppressed_among
from timekeeper.reporting.opt_outs import NoticeOptOutLink, sign_notice_opt_out
from timekeeper.reporting.templates import zone_of

SQL = load_queries("timekeeper.reporting", "notice_mail.sql")

#: At most one notice message per person and workspace in this window (the digest rule).
DIGEST_WINDOW = timedelta(hours=1)
#: RFC 8058: the ``List-Unsubscribe-Post`` header's value (one-click opt-out).
ONE_CLICK = "List-Unsubscribe=One-Click"
#: People one pass mails (the rest wait for the next pass, a minute later).
PASS_LIMIT = 200
#: A notice message refused this many times is left unsent (the notices stay listed in
#: the product); the provider's refusal is logged as a code, never its text.
MAX_SUBMISSIONS = 5

_PAUSE_REASONS = {
    "consecutive_failures": "it failed five times in a row",
    "source_access_lost": "its owner may no longer read its source",
    "definition_invalid": "its saved recurrence rule no longer validates",
    "ownerless": "its owner left",
}


#: A failed run's outcome in words (the run's ``outcome_code``); a refusal's own message is
#: shown instead when it has one.
_FAILURE_WORDS = {
    "unexpected_error": "the work failed unexpectedly (operators find the details in the logs by run id)",
    "attempts_exhausted": "every attempt ended without an outcome (the work was stopped or timed out)",
    "offers_exhausted": "the run never started: it was offered to the workers too many times",
    "unknown_work_kind": "Timekeeper no longer knows its kind of work",
    "render_unfinished": "its report did not finish rendering in time",
    "source_access_lost": "its owner may no longer read its source",
}


def failure_words(code: str | None, message: str | None = None) -> str:
    """A failed run's outcome as a sentence part for people: the refusal's own ``message``
    when it has one, else the words for its ``outcome_code``, else the code itself."""
    if message:
        return message
    return _FAILURE_WORDS.get(code or "", f"it was refused ({code})" if code else "it failed")


def schedule_link(base_url: str, schedule_id: Any) -> str:
    """The console address that opens a schedule's page (a delivery's or a generic one):
    ``<base_url>console/open/<id>``, ``base_url`` ending with ``/``."""
    return f"{base_url}console/open/{schedule_id}"


class Mailer(Protocol):
    """The communications adapter: submits one message, returns the provider's message id."""

    def send(self, *, to: str, subject: str, html: str, text: str,
             headers: Mapping[str, str] | None = None) -> str: ...


def _name(notice: dict[str, Any]) -> str:
    return notice["schedule_name"] or notice["detail"].get("name") or "a schedule"


def notice_title(notice: dict[str, Any]) -> str:
    """A single notice's subject line (plain text)."""
    kind, name = notice["kind"], _name(notice)
    return {"schedule_paused": f"\u201c{name}\u201d was paused",
            "delivery_skipped_stale": f"A delivery of \u201c{name}\u201d was skipped",
            "posting_failed": f"A posting job of \u201c{name}\u201d failed",
            "schedule_ownerless": f"\u201c{name}\u201d has no owner",
            "resubscribe_invited": f"You are invited back to \u201c{name}\u201d",
            "schedule_failed": f"\u201c{name}\u201d failed"}.get(kind, f"\u201c{name}\u201d: {kind}")


def local_instant(instant: datetime | str | None, zone: str) -> str:
    """An aware instant (or its ISO text) as the workspace's people read it: local time in
    the IANA ``zone`` with the UTC instant beside it, ``2027-03-02 07:00 CET (06:00 UTC)``
    (an unknown zone: UTC alone; text that is no instant: the text as it is)."""
    if not isinstance(instant, datetime):
        try:
            instant = datetime.fromisoformat(instant or "")
        except ValueError:
            return instant or ""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    local, utc = instant.astimezone(zone_of(zone)), instant.astimezone(UTC)
    if local.utcoffset() == timedelta(0) and local.tzname() == "UTC":
        return f"{utc:%Y-%m-%d %H:%M} UTC"
    day = "" if local.date() == utc.date() else f"{utc:%Y-%m-%d} "
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({day}{utc:%H:%M} UTC)"


def notice_line(notice: dict[str, Any], zone: str = "UTC") -> str:
    """One line saying what happened (plain text; the caller escapes it for HTML); instants
    in the workspace's IANA ``zone`` with UTC beside (:func:`local_instant`)."""
    kind, detail, name = notice["kind"], notice["detail"], _name(notice)
    if kind == "schedule_paused":
        why = _PAUSE_REASONS.get(notice["reason"] or "", notice["reason"] or "it was paused")
        return f"\u201c{name}\u201d was paused: {why}. Fix the cause, then resume it."
    if kind == "delivery_skipped_stale":
        due = local_instant(detail.get("occurrence_at"), zone)
        return (f"A delivery of \u201c{name}\u201d due {due} was skipped: it was too late after an outage to be "
                "worth sending. The next one runs on time.")
    if kind == "posting_failed":
        return (f"A posting job of \u201c{name}\u201d failed (batch {detail.get('batch_id', '?')}); the batch is "
                "closed and unposted. Retry it once the cause is fixed.")
    if kind == "schedule_failed":
        due = local_instant(detail.get("occurrence_at"), zone)
        why = failure_words(notice["reason"], detail.get("message"))
        streak = detail.get("consecutive_failures") or 1
        again = "" if streak == 1 else f" It has failed {streak} times in a row."
        return (f"\u201c{name}\u201d failed its run due {due}: {why}.{again} It runs again at its next "
                "occurrence; after five failures in a row it is paused. Fix the cause, or run it now once fixed.")
    if kind == "schedule_ownerless":
        why = "was deactivated" if detail.get("why") == "user_deactivated" else "left the workspace"
        return (f"\u201c{name}\u201d is paused without an owner: {detail.get('owner_user_id', 'its owner')} {why}. "
                "Reassign it to someone who may read its source, then resume it.")
    if kind == "resubscribe_invited":
        return (f"{detail.get('invited_by', 'Its owner')} invited you back to the messages of \u201c{name}\u201d, "
                "which you had opted out of. Accept the invitation in Timekeeper to receive them again.")
    return f"\u201c{name}\u201d: {kind}"


def compose(notices: list[dict[str, Any]], *, display_name: str, workspace_name: str,
            opt_out_url: str | None = None, zone: str = "UTC", base_url: str | None = None) -> tuple[str, str, str]:
    """The message carrying ``notices`` (oldest first): ``(subject, html, text)``. One
    notice: its own subject; several: a digest listing each with its instant (in the
    workspace's IANA ``zone``, the UTC instant beside: :func:`local_instant`). With
    ``opt_out_url`` (the person's signed one-click link) both parts say how to stop these
    e-mails with it. With ``base_url`` (the API's public address, ending with ``/``) each
    notice of a schedule links its console page (:func:`schedule_link`)."""
    lines = [notice_line(n, zone) for n in notices]
    links = [schedule_link(base_url, n["schedule_id"]) if base_url and n.get("schedule_id") else None
             for n in notices]
    if len(notices) == 1:
        subject = f"[Timekeeper] {notice_title(notices[0])}"
        items = lines
    else:
        subject = f"[Timekeeper] {len(notices)} notices about your schedules in {workspace_name}"
        items = [f"{local_instant(n['created_at'], zone)} - {line}" for n, line in zip(notices, lines, strict=True)]
    greeting = f"Hello {display_name}," if display_name else "Hello,"
    why = (f"You get this message because you own these schedules in {workspace_name}, or administer it. "
           "Every notice is also listed in Timekeeper.")
    stop = (f"To stop these e-mails from {workspace_name} (the notices stay listed in Timekeeper, where you can "
            "turn the e-mails back on), open: ")
    text = "\n".join([greeting, "", *[f"- {item}" + (f" Open it: {link}" if link else "")
                                      for item, link in zip(items, links, strict=True)], "", why,
                      *([f"{stop}{opt_out_url}"] if opt_out_url else [])]) + "\n"
    body = "".join(f"<li>{html.escape(item)}"
                   + (f' <a href="{html.escape(link, quote=True)}">Open it</a>' if link else "") + "</li>"
                   for item, link in zip(items, links, strict=True))
    markup = (f"<p>{html.escape(greeting)}</p><ul>{body}</ul><p>{html.escape(why)}</p>")
    if opt_out_url:
        markup += (f'<p>{html.escape(stop.removesuffix(", open: "))}: '
                   f'<a href="{html.escape(opt_out_url, quote=True)}">stop notice e-mails</a>.</p>')
    return subject[:500], markup, text


def send_notice_mail(conn: psycopg.Connection, *, mailer: Mailer, now: datetime, limit: int = PASS_LIMIT,
                     window: timedelta = DIGEST_WINDOW,
                     on_sent: Callable[[int], None] | None = None,
                     links: LinkSigner | RotatingLinkSigner | None = None, base_url: str = "") -> dict[str, int]:
    """Mail the waiting notices of up to ``limit`` people at ``now`` (aware UTC) under the
    digest rule (``window``). ``conn`` must be idle and see every workspace (the workers'
    login). Returns counts: ``sent`` (messages submitted), ``digests`` (of them, with more
    than one notice), ``waiting`` (people inside their window), ``recorded`` (an earlier
    pass's submission found recorded), ``no_address``, ``suppressed`` (the person's address
    is on the workspace's suppression list: a permanent bounce or a complaint; the notices
    stay in the product), ``unsubscribed`` (the person opted out of the workspace's notice
    e-mails: the notices stay in the product), ``failed`` (submissions that raised: retried
    next pass, throttling included, up to :data:`MAX_SUBMISSIONS`), ``refused`` (the provider
    refused the message permanently, e.g. SES ``MessageRejected``: its notices are closed,
    never submitted again, and stay in the product; the outbox row's ``last_error`` says why).
    ``on_sent(count)`` is called with the messages sent. With ``links`` (the link signer)
    every message carries the person's signed one-click opt-out link,
    ``<base_url>opt-outs/<token>`` (``base_url`` ends with ``/``), in its body and in the
    ``List-Unsubscribe`` / ``List-Unsubscribe-Post`` headers (RFC 8058)."""
    counts = {"sent": 0, "digests": 0, "waiting": 0, "recorded": 0, "no_address": 0, "suppressed": 0, "unsubscribed": 0,
              "failed": 0, "refused": 0}
    for person in fetch_rows(conn, SQL["waiting_people"], {"limit": limit}):
        outcome = _mail_person(conn, person["workspace_id"], person["user_id"], mailer=mailer, now=now,
                               window=window, links=links, base_url=base_url)
        if outcome == "digest":
            counts["sent"] += 1
            counts["digests"] += 1
        elif outcome is not None:
            counts[outcome] += 1
    if on_sent is not None and counts["sent"]:
        on_sent(counts["sent"])
    return counts


def _mail_person(conn: psycopg.Connection, workspace_id: UUID, user_id: str, *, mailer: Mailer, now: datetime,
                 window: timedelta, links: LinkSigner | RotatingLinkSigner | None = None,
                 base_url: str = "") -> str | None:
    """One person's waiting notices: claim their message, submit it, record it."""
    params = {"workspace_id": workspace_id, "user_id": user_id, "now": now}
    with conn.transaction():
        pending = fetch_rows(conn, SQL["lock_unmailed"], params)
        if not pending:
            return None
        person = fetch_row(conn, SQL["person"], params)
        if person is None or not person["email"]:
            execute(conn, SQL["no_address"], {"now": now, "ids": [n["id"] for n in pending]})
            return "no_address"
        if not any(n["mail_key"] for n in pending) and fetch_value(conn, SQL["opted_out"], params):
            execute(conn, SQL["unsubscribed"], {"now": now, "ids": [n["id"] for n in pending]})
            return "unsubscribed"
        if not any(n["mail_key"] for n in pending) and suppressed_among(conn, workspace_id, [person["email"]]):
            execute(conn, SQL["suppressed"], {"now": now, "ids": [n["id"] for n in pending]})
            return "suppressed"
        keyed = [n for n in pending if n["mail_key"]]
        if keyed:
            key = keyed[0]["mail_key"]
            group = [n for n in pending if n["mail_key"] == key]
            row = fetch_row(conn, SQL["outbox_row"], {"key": key})
            if row is not None and row["provider_message_id"] is not None:
                execute(conn, SQL["mark_recorded"], {"key": key, "sent_at": row["sent_at"]})
                return "recorded"
            if row is not None and row["submissions"] >= MAX_SUBMISSIONS:
                return "failed"
        else:
            last = fetch_value(conn, SQL["last_notice_message"], params)
            if last is not None and now < last + window:
                return "waiting"
            key = f"notice:{workspace_id}:{user_id}:{pending[0]['id']}"
            group = pending
            execute(conn, SQL["assign_key"], {"key": key, "ids": [n["id"] for n in group]})
        execute(conn, SQL["claim"], {**params, "key": key})
    opt_out = None if links is None else base_url + "opt-outs/" + sign_notice_opt_out(
        links, NoticeOptOutLink(workspace_id, user_id), now=now)
    subject, markup, text = compose(group, display_name=person["display_name"],
                                    workspace_name=person["workspace_name"], opt_out_url=opt_out,
                                    zone=person["timezone"], base_url=base_url or None)
    extra = {"headers": {"List-Unsubscribe": f"<{opt_out}>", "List-Unsubscribe-Post": ONE_CLICK}} if opt_out else {}
    try:
        message_id = mailer.send(to=person["email"], subject=subject, html=markup, text=text, **extra)
    except Exception as error:  # noqa: BLE001 - recorded as a code; retried by the next pass unless permanent
        code, permanent = classify_submission_error(error)
        obs.logger.warning("notice message failed", extra={"error_type": type(error).__name__, "error_code": code,
                                                           "permanent": permanent})
        with conn.transaction():
            execute(conn, SQL["record_failed"], {"key": key, "code": code})
            if permanent:  # never submitted again: the notices stay listed in the product
                execute(conn, SQL["close_refused"], {"key": key, "now": now})
        return "refused" if permanent else "failed"
    with conn.transaction():
        execute(conn, SQL["record_sent"], {"key": key, "id": message_id, "now": now})
    return "digest" if len(group) > 1 else "sent"
