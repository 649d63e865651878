"""Scheduled delivery in the local stack: sample query schedules for the simulation, a
mailer that keeps every message on disk beside SES (moto), and the summary's rows.

The sample (Berlin, the Platform sample's workspace; owner: its analyst):

* ``Daily open invoices``: CSV every day at 07:00 Berlin time to the admin, the viewer,
  the user without an e-mail address, the deactivated user, the one who left and the one
  whose membership only reads reports (each skipped with its reason, the first two sent);
* ``Weekly invoice report``: the report as PDF every Monday at 08:00 (a render per run);
* ``Monthly void invoices``: XLSX on the 1st at 06:00, ``skip_when_empty`` (no void
  invoices in the sample: every run is ``skipped_empty``);
* ``Owner deactivated``: a daily CSV whose owner is the deactivated user (saved while the
  owner could read the query; the first automatic run fails ``source_access_lost`` and
  pauses the schedule).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from timekeeper.reporting import reports, store
from timekeeper.reporting.query_schedules import Source, create_query_schedule

SUBJECT = "{{ schedule_name }} for {{ run_date }}"
BODY = ("<p>Hello {{ recipient_name }},</p><p>{{ schedule_name }} for {{ run_date }} is ready: "
        "<a href=\"{{ link }}\">download it here</a>.</p>")


@dataclass(frozen=True)
class DeliverySample:
    """The sample's query schedules by name."""

    schedules: dict[str, UUID]


class DiskMailer:
    """A communications adapter that submits through ``inner`` (SES in moto) and writes
    each message to ``folder/<provider message id>.html`` with a JSON header line."""

    def __init__(self, inner: Any, folder: Path) -> None:
        self.inner = inner
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def send(self, *, to: str, subject: str, html: str, text: str, headers: Any = None) -> str:
        """Submit through the inner adapter, then keep a copy (``.html`` with a JSON header
        line of the recipient, subject and headers; ``.txt`` the plain-text part); returns
        the message id."""
        message_id = self.inner.send(to=to, subject=subject, html=html, text=text, headers=headers)
        (self.folder / f"{message_id}.html").write_text(
            json.dumps({"to": to, "subject": subject, "headers": dict(headers or {})}) + "\n" + html,
            encoding="utf-8")
        (self.folder / f"{message_id}.txt").write_text(text, encoding="utf-8")
        return message_id


#: What becomes of a message to an address in the local stack (default: delivered).
DELIVERED, BOUNCES, COMPLAINS = "delivered", "bounces", "complains"


def ses_event(event_type: str, *, message_id: str, to: str, sender: str, sent_at: datetime,
              at: datetime) -> dict[str, Any]:
    """An SES event record as the configuration set publishes it to SNS (``Delivery``,
    ``Bounce`` (permanent, ``General``) or ``Complaint`` (``abuse``)) for the message
    ``message_id`` to ``to``, accepted at ``sent_at`` and reported at ``at`` (aware UTC)."""

    def stamp(instant: datetime) -> str:
        return instant.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    event: dict[str, Any] = {"eventType": event_type, "mail": {
        "timestamp": stamp(sent_at), "source": sender, "messageId": message_id, "destination": [to],
        "headersTruncated": False, "tags": {"ses:configuration-set": ["timekeeper-local-deliveries"]}}}
    if event_type == "Delivery":
        event["delivery"] = {"timestamp": stamp(at), "processingTimeMillis": int((at - sent_at).total_seconds() * 1000),
                             "recipients": [to], "smtpResponse": "250 2.6.0 Message received",
                             "reportingMTA": "a.local"}
    elif event_type == "Bounce":
        event["bounce"] = {"bounceType": "Permanent", "bounceSubType": "General", "timestamp": stamp(at),
                           "bouncedRecipients": [{"emailAddress": to, "action": "failed", "status": "5.1.1",
                                                  "diagnosticCode": "smtp; 550 5.1.1 user unknown"}],
                           "feedbackId": f"local-{message_id}", "reportingMTA": "dsn; a.local"}
    elif event_type == "Complaint":
        event["complaint"] = {"complainedRecipients": [{"emailAddress": to}], "timestamp": stamp(at),
                              "feedbackId": f"local-{message_id}", "complaintFeedbackType": "abuse"}
    else:
        raise ValueError(f"no local {event_type} event")
    return event


class EventingMailer:
    """The local stand-in of SES's configuration set: submits through ``inner`` (a
    :class:`DiskMailer`), then publishes the message's later states to ``topic_arn`` (the
    message-events topic, subscribed raw to its queue) with ``sns``, as SES would: a
    delivery 4 s after the send; for an address in ``outcomes`` as :data:`BOUNCES` a
    permanent bounce instead, as :data:`COMPLAINS` the delivery and a complaint a minute
    later (published first: SNS keeps no order). ``now()`` is the simulated clock.
    ``sent`` keeps each message's recipient, subject, id and opt-out URL (its
    ``List-Unsubscribe``), ``published`` counts the events since :meth:`take_published`."""

    def __init__(self, inner: Any, sns: Any, topic_arn: str, *, sender: str, now: Any,
                 outcomes: dict[str, str] | None = None) -> None:
        self.inner, self.sns, self.topic_arn, self.sender, self.now = inner, sns, topic_arn, sender, now
        self.outcomes = {k.lower(): v for k, v in (outcomes or {}).items()}
        #: Every message sent: ``{"to", "subject", "id", "opt_out_url"}``, in order.
        self.sent: list[dict[str, str]] = []
        self.published = 0

    def send(self, *, to: str, subject: str, html: str, text: str, headers: Any = None) -> str:
        """Submit, then publish the message's states; returns the message id."""
        message_id = self.inner.send(to=to, subject=subject, html=html, text=text, headers=headers)
        self.sent.append({"to": to.lower(), "subject": subject, "id": message_id,
                          "opt_out_url": (headers or {}).get("List-Unsubscribe", "").strip("<>")})
        sent_at = self.now()
        outcome = self.outcomes.get(to.lower(), DELIVERED)
        kinds = {DELIVERED: [("Delivery", 4)], BOUNCES: [("Bounce", 30)],
                 COMPLAINS: [("Complaint", 60), ("Delivery", 4)]}[outcome]
        for kind, after_s in kinds:
            event = ses_event(kind, message_id=message_id, to=to, sender=self.sender, sent_at=sent_at,
                              at=sent_at + timedelta(seconds=after_s))
            self.sns.publish(TopicArn=self.topic_arn, Message=json.dumps(event))
            self.published += 1
        return message_id

    def take_published(self) -> int:
        """The events published since the last call (then zero)."""
        published, self.published = self.published, 0
        return published


def one_click_opt_out(url: str) -> int:
    """Opt out as a mailbox provider does for RFC 8058 (``POST`` of
    ``List-Unsubscribe=One-Click`` as a form, no credential) through the REAL API handler;
    returns the HTTP status."""
    import io
    from urllib.parse import urlsplit

    from timekeeper.local.lambdas import invoke
    from timekeeper.local.serve import proxy_event_from_wsgi

    form = b"List-Unsubscribe=One-Click"
    event = proxy_event_from_wsgi({"REQUEST_METHOD": "POST", "PATH_INFO": urlsplit(url).path,
                                   "CONTENT_TYPE": "application/x-www-form-urlencoded",
                                   "CONTENT_LENGTH": str(len(form)), "wsgi.input": io.BytesIO(form)})
    return int(invoke("api", event)["statusCode"])


def sample_outcomes(conn: Any, users: dict[str, str]) -> dict[str, str]:
    """What becomes of the sample's messages: the viewer's address bounces permanently,
    the multi-membership user complains; the rest are delivered."""
    emails = {r["id"]: r["email"] for r in conn.execute(
        "SELECT id, email FROM users WHERE id = ANY(%s)", ([users["viewer"], users["multi"]],)).fetchall()}
    return {emails[users["viewer"]]: BOUNCES, emails[users["multi"]]: COMPLAINS}


def load_delivery_sample(conn: Any, *, workspace_id: UUID, users: dict[str, str], start: datetime) -> DeliverySample:
    """Create the sample's saved queries, report and query schedules (see the module's
    description) in ``workspace_id``; ``users`` is the Platform sample's user ids by
    persona. Schedules begin at ``start``."""
    analyst = users["analyst"]
    recipients = [users[p] for p in ("admin", "viewer", "no_email", "deactivated", "left", "multi")]
    with conn.transaction():
        conn.execute("UPDATE users SET status = 'active' WHERE id = %s", (users["deactivated"],))
        conn.execute("UPDATE workspace_memberships SET left_at = NULL WHERE workspace_id = %s AND user_id = %s",
                     (workspace_id, users["left"]))
        open_query, _ = store.create_query(
            conn, workspace_id=workspace_id, name="Open invoices", actor=analyst, now=start, definition={
                "entity": "invoices", "columns": ["number", "member_name", "amount_minor", "due_date"],
                "filters": [{"column": "status", "op": "eq", "value": "open"}], "sort": [{"column": "due_date"}],
                "limit": 500})
        void_query, _ = store.create_query(
            conn, workspace_id=workspace_id, name="Void invoices", actor=analyst, now=start, definition={
                "entity": "invoices", "columns": ["number", "amount_minor"],
                "filters": [{"column": "status", "op": "eq", "value": "void"},
                            {"column": "amount_minor", "op": "lt", "value": 0}]})
        report, _ = reports.create_report(conn, workspace_id=workspace_id, name="Invoice report", actor=analyst,
                                          now=start, definition={"title": "Open invoices", "sections": [
                                              {"heading": "Open invoices", "query_id": str(open_query.id),
                                               "display": "table"}]})
        specs = [
            ("Daily open invoices", "0 7 * * *", Source("query", open_query.id), "csv", False, recipients),
            ("Weekly invoice report", "0 8 * * 1", Source("report", report_id=report.id), "pdf", False,
             [users["admin"], users["multi"]]),
            ("Monthly void invoices", "0 6 1 * *", Source("query", void_query.id), "xlsx", True, [users["admin"]]),
            ("Owner deactivated", "30 7 * * *", Source("query", open_query.id), "csv", False, [users["admin"]]),
        ]
        schedules = {}
        for name, cron, source, fmt, skip, to in specs:
            schedule, _ = create_query_schedule(
                conn, workspace_id=workspace_id, actor=analyst, name=name,
                recurrence={"cron": cron, "timezone": "Europe/Berlin"}, source=source, format=fmt, recipients=to,
                subject_template=SUBJECT, body_template=BODY, now=start - timedelta(minutes=1),
                skip_when_empty=skip)
            schedules[name] = schedule.id
        conn.execute("UPDATE query_schedules SET owner_user_id = %s WHERE schedule_id = %s",
                     (users["deactivated"], schedules["Owner deactivated"]))
        conn.execute("UPDATE users SET status = 'deactivated' WHERE id = %s", (users["deactivated"],))
        conn.execute("UPDATE workspace_memberships SET left_at = %s WHERE workspace_id = %s AND user_id = %s",
                     (start - timedelta(minutes=1), workspace_id, users["left"]))
    return DeliverySample(schedules)


def delivery_summary(conn: Any) -> dict[str, Any]:
    """Deliveries by status and skip reason, query-schedule runs by outcome, the messages'
    states by state and kind (SES's events), the suppression list and the opt-outs."""
    by_status = conn.execute("""SELECT status, coalesce(skip_reason, '') AS reason, count(*) AS n
                                  FROM query_deliveries GROUP BY 1, 2 ORDER BY 1, 2""").fetchall()
    runs = conn.execute("""SELECT s.name, r.trigger, r.state, coalesce(r.outcome_code, '') AS outcome, count(*) AS n
                             FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
                            WHERE r.owner = 'queries' GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4""").fetchall()
    states = conn.execute("""SELECT state, coalesce(kind, '') AS kind, count(*) AS n FROM message_states
                                GROUP BY 1, 2 ORDER BY 1, 2""").fetchall()
    suppressions = conn.execute("""SELECT address, reason, suppressed_at FROM mail_suppressions
                                    ORDER BY suppressed_at, address""").fetchall()
    opt_outs = conn.execute("""SELECT s.name, o.user_id, o.opted_out_at FROM mail_opt_outs o
                                 JOIN schedules s ON s.id = o.schedule_id ORDER BY o.opted_out_at""").fetchall()
    return {"deliveries": [dict(r) for r in by_status], "runs": [dict(r) for r in runs],
            "message_states": [dict(r) for r in states], "suppressions": [dict(r) for r in suppressions],
            "opt_outs": [dict(r) for r in opt_outs]}


def copy_files(s3: Any, bucket: str, folder: Path) -> int:
    """Copy every delivered file (``deliveries/`` and ``reports/``) from the local bucket to
    ``folder``; returns how many."""
    folder.mkdir(parents=True, exist_ok=True)
    copied = 0
    for prefix in ("deliveries/", "reports/"):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                target = folder / item["Key"]
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, item["Key"], str(target))
                copied += 1
    return copied
