"""The console's glossary: every code the API answers that a page shows to people (a
status, a pause or skip reason, an outcome, a history event, a refusal), in words.

Templates use it through the ``term`` filter (:func:`term_html`): the words, with the code
kept in the element's ``title`` and ``data-code`` (a tooltip for people, the exact code
for operators and scripts). The API keeps its codes; only the console translates.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from babel import Locale, UnknownLocaleError
from babel.dates import format_date
from babel.numbers import format_currency, format_decimal, get_currency_precision
from markupsafe import Markup, escape

#: Code -> words. One entry per code the console shows; a code missing here is shown by
#: :func:`words` with its underscores as spaces (and a test lists the codes that must be here).
WORDS: dict[str, str] = {
    # Schedule and delivery states
    "active": "Active",
    "paused": "Paused",
    "disabled": "Disabled",
    # Why a schedule is paused
    "paused_by_owner": "Paused by its owner",
    "consecutive_failures": "Paused after five failures in a row",
    "definition_invalid": "Its saved rule no longer checks",
    "ownerless": "Paused: its owner left or was deactivated",
    "recurrence_ended": "Its rule has no more occurrences",
    "source_access_lost": "Paused: its owner may no longer read the source",
    # Runs: triggers, states and outcomes
    "scheduled": "On schedule",
    "manual": "Run now",
    "test": "Test (sent only to the person who asked)",
    "queued": "Queued",
    "running": "Running",
    "succeeded": "Succeeded",
    "skipped": "Skipped",
    "failed": "Failed",
    "requested": "Requested",
    "rendering": "Rendering",
    "nothing_due": "Nothing was due",
    "nothing_to_reconcile": "Nothing to reconcile",
    "matched": "Everything matched",
    "unmatched": "Some entries did not match",
    "empty": "The result was empty",
    "skipped_empty": "Skipped: the result was empty",
    "skipped_stale": "Skipped: too late after an outage",
    "skipped_dst_gap": "Skipped: the clock skipped this time (daylight saving), as the schedule's rule chooses",
    "close_not_due": "The close was not due yet",
    "already_closed": "Already closed",
    "closed_batch": "The batch is closed",
    "active_batch_current": "The current batch is still open",
    "period_batch_exists": "The period's batch exists already",
    "batch_not_found": "Its batch no longer exists",
    "recurring_batch_not_found": "Its recurring batch no longer exists",
    "billing_plan_not_found": "Its billing plan no longer exists",
    "plan_inactive": "The billing plan is not active",
    "subject_missing": "What it works on no longer exists",
    "outside_calendar_coverage": "Outside the holiday calendar's years",
    "delivery_settings_missing": "Its delivery settings are missing",
    "render_failed": "The report could not be rendered",
    "generation_error": "The snapshot could not be generated",
    "job_lost": "The job stopped answering",
    "retries_exhausted": "Failed four times: its retries are used up",
    "totals_mismatch": "Its rows did not add up to the source's totals",
    "selftest_mismatch": "The self-test's rows did not add up",
    "unsupported_type": "Its snapshot type is no longer registered",
    "type_disabled": "Its snapshot type is turned off here",
    "unexpected_error": "An unexpected error",
    "misfire": "Missed its time",
    "publish_refused": "The queue refused the run",
    # History events
    "created": "Created",
    "updated": "Changed",
    "deleted": "Deleted",
    "claimed": "Claimed for a run",
    "backlog_skipped": "Missed occurrences skipped",
    "offered": "Offered to a worker",
    "released": "Released",
    "reoffered": "Offered again",
    "started": "Started",
    "settled": "Finished",
    "resumed": "Resumed",
    "run_requested": "Run now requested",
    "owner_changed": "Owner changed",
    "holidays_changed": "Closed dates or holidays changed",
    "reassigned": "Reassigned",
    "person_erased": "A person's data was erased",
    # Deliveries: per recipient
    "sent": "Sent",
    "no_access": "May not read the source",
    "no_address": "Has no e-mail address",
    "unsubscribed": "Unsubscribed",
    "deactivated": "Deactivated",
    "left_workspace": "Left the workspace",
    "removed": "Removed from the recipients",
    "suppressed": "The address bounced or complained",
    "rejected": "Rejected by the mail service",
    "invalid_address": "The address is not valid",
    "throttled": "The mail service was busy",
    "provider_error": "The mail service failed",
    "submission_error": "The message could not be handed over",
    "unconfirmed": "Interrupted while being handed over: it may have been sent, and is not sent again",
    "delivered": "Delivered",
    "bounced": "Bounced",
    "complained": "Marked as spam",
    "delayed": "Delayed",
    # Snapshot periods
    "published": "Published",
    "missing": "Missing",
    "planned": "Planned",
    "retry_wait": "Waiting to retry",
    "cancelled": "Cancelled",
    "active_work": "A run is in progress",
    "protected_history": "Protected history (captured or finalized)",
    "already_planned": "Already planned",
    "not_planned": "Never planned: request a backfill",
    "period_not_complete": "The month has not ended",
    "period_before_workspace": "The month ended before the workspace existed",
    "range_cap": "Beyond what one range plans",
    "workspace_loading": "The workspace is still loading",
    "workspace_disabled": "The workspace is disabled",
    "policy_disabled": "Snapshots are turned off",
    "backfill": "Backfill",
    # Snapshot types and the modules that own them
    "ar_aging": "Receivables aging",
    "membership_counts": "Membership counts",
    "selftest": "Self-test",
    "platform": "Platform",
    "accounting": "Accounting",
    # Work kinds (what a schedule runs)
    "batch.auto_close": "Automatic batch close",
    "batch.roll": "Batch roll",
    "billing.prepare": "Billing preparation",
    "reconciliation.sweep": "Reconciliation sweep",
    "queries.deliver": "Scheduled delivery",
    # What a delivery sends
    "query": "A saved query",
    "report": "A report",
    # Pipelines' queues (the operations overview's dead-letter queues)
    "queries": "Deliveries",
    "exports": "Exports",
    "snapshots": "Snapshots",
    "message_events": "Mail events (delivery reports)",
    # Staff operations: actions, and why a run waits too long
    "redrive": "Redrive",
    "resume": "Resume",
    "erase": "Erasure",
    "not_started": "Accepted by its queue, never started",
    "not_published": "Waiting to be sent again",
    "lease_expired": "Started; its execution stopped answering",
    # Operators' actions on a run and on one dead-letter message, and why a message died
    "retry": "Retry now",
    "cancel": "Cancel",
    "fail": "Settle as failed",
    "settled_by_operator": "Settled as failed by an operator",
    "redrive_message": "Redrive of one message",
    "delete_message": "Deletion of one message",
    "redriven": "Its dead-letter message moved back to its queue",
    "dead_letter_deleted": "Its dead-letter message deleted",
    "malformed_body": "Its consumer cannot parse the body",
    "receives_exhausted": "Its consumer never acknowledged it on any receive allowed (it died or timed out each time)",
    "snapshot_job": "Snapshot job",
    # Notices: what happened, and which failures an owner hears of
    "schedule_paused": "A schedule was paused",
    "delivery_skipped_stale": "A delivery was skipped: it was too late after an outage",
    "posting_failed": "A posting job failed",
    "schedule_ownerless": "A schedule lost its owner and was paused",
    "resubscribe_invited": "You were invited back to a delivery's messages",
    "schedule_failed": "A schedule's run failed",
    "first_failure": "The first failure of a streak, and the pause",
    "every_failure": "Every failure, and the pause",
    "pause_only": "Only the pause (after five failures in a row)",
    # A notice's facts
    "failures": "Failures in a row",
    "skipped_count": "Occurrences skipped",
    "stale_before": "Too late before",
    "previous_owner": "Previous owner",
    "previous_owner_user_id": "Previous owner",
    "name": "Name",
    # A snapshot version's basis (its validation totals)
    "as_of": "As of",
    "invoices": "Invoices",
    "outstanding_minor": "Outstanding",
    "memberships": "Memberships",
    "rows": "Rows",
    "buckets": "By age",
    "0-30": "0 to 30 days",
    "31-60": "31 to 60 days",
    "61-90": "61 to 90 days",
    "over_90": "Over 90 days",
    # Refusals (the API's error codes and the access rule's reasons)
    "forbidden": "Your roles do not allow this",
    "not_found": "Not found",
    "unauthenticated": "You are signed out",
    "validation_error": "Something typed is not valid",
    "invalid_recurrence": "The rule is not valid",
    "invalid_cursor": "That page no longer exists",
    "idempotency_key_reused": "This form was already sent with other values",
    "not_a_member": "Not a member of the workspace",
    "missing_role": "Your membership does not allow this",
    "user_deactivated": "Your account is deactivated",
    "not_invited": "Not invited back yet",
    "database_unavailable": "The database did not answer; try again",
    "internal_error": "Something went wrong on our side",
    "method_not_allowed": "Not allowed here",
    "unsupported_media_type": "The request's format is not accepted",
}


#: Actors that are no person (user ids the product itself writes with), in words: the local
#: server's sample data is made by ``serve-sample``.
ACTORS: dict[str, str] = {"serve-sample": "sample data"}


#: The audit log's areas (a kind's part before the dot) as the object they speak of.
AUDIT_AREAS: dict[str, str] = {
    "settings": "Settings", "schedule": "Schedule", "delivery": "Delivery", "query": "Query", "report": "Report",
    "closure": "Closure", "recipient": "Recipient", "opt_out": "Opt-out", "staff": "Staff", "run": "Run",
    "dead_letter": "Dead letter", "suppression": "Suppression list", "mail_suppression": "Suppressed address"}
#: Whole kinds the area's noun and the verb would not say well, in words.
AUDIT_KINDS: dict[str, str] = {"suppression.removed": "Address taken off the suppression list"}
#: The audit log's verbs (a kind's part after the dot), in words.
AUDIT_VERBS: dict[str, str] = {
    "created": "created", "updated": "changed", "deleted": "deleted", "paused": "paused", "resumed": "resumed",
    "run_requested": "Run now requested", "owner_changed": "handed to another owner", "added": "added",
    "removed": "removed", "invited": "invited back", "notice_mail": "notice e-mails changed",
    "read": "read this workspace's data", "snapshot_cancelled": "cancelled a snapshot run",
    "snapshot_finalized": "finalized a snapshot version",
    "member_erased": "erased a member from the snapshots", "retried": "retried", "cancelled": "cancelled",
    "failed": "settled as failed", "redriven": "redriven", "version_saved": "new version saved",
    "claim_weight_changed": "changed the workspace's claim weight",
    "snapshot_requested": "requested a snapshot re-run or backfill",
    "snapshot_range_requested": "requested a range of snapshot months"}


def audit_kind(kind: object) -> str:
    """An audit log kind (``<area>.<verb>``) in words: ``"settings.updated"`` -> ``"Settings
    changed"``, ``"delivery.run_requested"`` -> ``"Delivery: Run now requested"``; a verb
    the glossary lacks with its underscores as spaces."""
    if str(kind) in AUDIT_KINDS:
        return AUDIT_KINDS[str(kind)]
    area, _, verb = str(kind or "").partition(".")
    noun = AUDIT_AREAS.get(area) or words(area)
    said = AUDIT_VERBS.get(verb) or verb.replace("_", " ")
    return f"{noun}: {said}" if said[:1].isupper() else f"{noun} {said}".strip()


def words(code: object) -> str:
    """The words for ``code`` (``"paused_by_owner"`` -> ``"Paused by its owner"``); a code
    the glossary lacks with its underscores as spaces and its first letter capitalised;
    ``""`` for None or empty."""
    if code is None or code == "":
        return ""
    text = str(code)
    found = WORDS.get(text)
    if found is not None:
        return found
    spaced = text.replace("_", " ").strip()
    return spaced[:1].upper() + spaced[1:]


def term_html(code: object, empty: str = "—") -> Markup:
    """``code`` for a page: its words in a ``<span>`` whose ``title`` and ``data-code``
    hold the code itself (escaped); ``empty`` for None or empty."""
    if code is None or code == "":
        return Markup(escape(empty))
    text = escape(str(code))
    return Markup(f'<span class="term" title="{text}" data-code="{text}">{escape(words(code))}</span>')


def named_html(code: object, empty: str = "—") -> Markup:
    """``code``'s words in a ``<span>`` whose ``data-code`` holds the code (escaped), with no
    tooltip: where a page names a thing people know by its words (a snapshot type, a
    state), not by its code; ``empty`` for None or empty."""
    if code is None or code == "":
        return Markup(escape(empty))
    text = escape(str(code))
    return Markup(f'<span class="term" data-code="{text}">{escape(words(code))}</span>')


def _locale(name: object) -> Locale:
    try:
        return Locale.parse(str(name or "en_US"))
    except (UnknownLocaleError, ValueError, TypeError):
        return Locale.parse("en_US")


def _value(key: str, value: Any, currency: str | None, locale: Locale) -> str:
    if isinstance(value, bool) or value is None:
        return words(str(value).lower()) if value is not None else "—"
    if isinstance(value, int) and key.endswith("_minor") and currency:
        try:
            amount = Decimal(value).scaleb(-get_currency_precision(currency))
            return format_currency(amount, currency, locale=locale)
        except (ValueError, TypeError, ArithmeticError):
            return format_decimal(value, locale=locale)
    if isinstance(value, int | float):
        return format_decimal(value, locale=locale)
    if isinstance(value, dict):
        return "; ".join(f"{words(k)}: {_value(k, v, currency, locale)}" for k, v in value.items())
    if isinstance(value, str) and key in ("as_of",) and len(value) == 10:
        try:
            return format_date(date.fromisoformat(value), format="long", locale=locale)
        except ValueError:
            return value
    return str(value)


def basis_lines(basis: dict[str, Any] | None, locale: object = "en_US") -> list[tuple[str, str]]:
    """A snapshot version's ``basis`` (its validation totals, a JSON object) as people read
    it: ``[(label, value)]``, the labels from the glossary, amounts in minor units
    (``*_minor``, with the basis's ``currency``) formatted by currency and ``locale`` (a
    CLDR identifier; ``en_US`` when unknown) with Babel (``12345`` EUR in de_DE:
    ``123,45 €``), counts grouped by the locale, ``as_of`` dates written out, nested
    totals (the aging buckets) one line each. The ``currency`` itself is not a line."""
    if not isinstance(basis, dict):
        return []
    where = _locale(locale)
    currency = basis.get("currency") if isinstance(basis.get("currency"), str) else None
    lines = []
    for key, value in basis.items():
        if key == "currency":
            continue
        if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            lines.extend((f"{words(key)}, {words(k)[:1].lower()}{words(k)[1:]}", _value(k, v, currency, where))
                         for k, v in value.items())
        else:
            lines.append((words(key), _value(key, value, currency, where)))
    return lines
