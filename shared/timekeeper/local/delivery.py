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
  pauses the schedule);
* ``Monthly receivables aging``: a report over the published ``ar_aging`` snapshot (its
  latest published month) as PDF on the 2nd at 09:00, to the admin: the delivery records
  its basis (type, period, version, publication time) and captures that version.
* ``Board report`` (PDF) and ``Board members list`` (CSV), monthly on the 1st, owned by the
  board's secretary, who leaves the workspace on the second simulated day at 09:00: both
  are paused as ownerless and the admin is told (two notices, one digest e-mail); on the
  third day at 09:00 the admin reassigns the report to the analyst and resumes it (the
  list stays ownerless).

The workspace asks for admin copies of its notices (``notify_admins``), so the admin hears
of every pause of its schedules, whoever owns them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from timekeeper.db.sql import load_queries
from timekeeper.platform.directory import add_member, set_notify_admins, upsert_user
from timekeeper.reporting import reports, store
from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule

SQL = load_queries("timekeeper.local", "delivery.sql")

SUBJECT = "{{ schedule_name }} for {{ run_date }}"
BODY = ("<p>Hello {{ recipient_name }},</p><p>{{ schedule_name }} for {{ run_date }} is ready: "
        "<a href=\"{{ link }}\">download it here</a>.</p>")


#: The board's secretary: owns the two board schedules, leaves on the second day.
BOARD_SECRETARY = "sim-board-secretary"


@dataclass(frozen=True)
class DeliverySample:
    """The sample's query schedules by name, its workspace and the people of the hand-off."""

    schedules: dict[str, UUID]
    workspace_id: UUID | None = None
    admin: str = ""
    analyst: str = ""


def hand_off_story(sample: DeliverySample, start: datetime) -> dict[datetime, Any]:
    """The owner hand-off's timed steps (instant -> ``step(conn, now) -> summary line``): the
    secretary leaves on the second day at 09:00; the admin reassigns the board report to the
    analyst and resumes it on the third day at 09:00."""
    from timekeeper.platform.directory import leave_workspace
    from timekeeper.reporting.query_schedules import reassign_owner
    from timekeeper.schedules import service

    def person(conn: Any, user_id: str) -> str:
        """The person's display name (the summary names people as the console does)."""
        return conn.execute(SQL["display_name_of_user"], (user_id, user_id)).fetchone()["name"]

    def leave(conn: Any, now: datetime) -> str:
        with conn.transaction():
            leave_workspace(conn, workspace_id=sample.workspace_id, user_id=BOARD_SECRETARY, now=now)
        return f"{now:%Y-%m-%d %H:%M} UTC {person(conn, BOARD_SECRETARY)} left: their schedules paused as ownerless"

    def reassign(conn: Any, now: datetime) -> str:
        schedule_id = sample.schedules["Board report"]
        reassign_owner(conn, workspace_id=sample.workspace_id, schedule_id=schedule_id,
                       owner_user_id=sample.analyst, actor=sample.admin, now=now)
        service.resume_schedule(conn, workspace_id=sample.workspace_id, schedule_id=schedule_id,
                                actor=sample.admin, now=now)
        return (f"{now:%Y-%m-%d %H:%M} UTC {person(conn, sample.admin)} (the admin) reassigned Board report to "
                f"{person(conn, sample.analyst)} and resumed it")

    day = timedelta(days=1)
    return {start + day + timedelta(hours=9): leave, start + 2 * day + timedelta(hours=9): reassign}


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
        header = json.dumps({"to": to, "subject": subject, "headers": dict(headers or {})})
        # HTML-safe JSON (the same values): a browser opening the file shows <http://...> as text, not a tag
        header = header.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
        (self.folder / f"{message_id}.html").write_text(header + "\n" + html, encoding="utf-8")
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
    ``List-Unsubscribe=One-Click`` as a form, no credential) through the REAL handler of
    the function API Gateway sends the route to (``functions/downloads``, the public link
    routes' function); returns the HTTP status."""
    import io
    from urllib.parse import urlsplit

    from timekeeper.edge.api import OPT_OUT_RESOURCE
    from timekeeper.local.apigw import proxy_event_from_wsgi
    from timekeeper.local.lambdas import invoke

    form = b"List-Unsubscribe=One-Click"
    path = urlsplit(url).path
    event = proxy_event_from_wsgi({"REQUEST_METHOD": "POST", "PATH_INFO": path,
                                   "CONTENT_TYPE": "application/x-www-form-urlencoded",
                                   "CONTENT_LENGTH": str(len(form)), "wsgi.input": io.BytesIO(form)})
    # API Gateway's resource of the route (serve's events name its catch-all proxy)
    event = {**event, "resource": OPT_OUT_RESOURCE, "pathParameters": {"token": path.rsplit("/", 1)[-1]},
             "requestContext": {**(event.get("requestContext") or {}), "resourcePath": OPT_OUT_RESOURCE}}
    return int(invoke("downloads", event)["statusCode"])


def sample_outcomes(conn: Any, users: dict[str, str]) -> dict[str, str]:
    """What becomes of the sample's messages: the viewer's address bounces permanently,
    the multi-membership user complains; the rest are delivered."""
    emails = {r["id"]: r["email"] for r in conn.execute(
        SQL["emails_of_users"], ([users["viewer"], users["multi"]],)).fetchall()}
    return {emails[users["viewer"]]: BOUNCES, emails[users["multi"]]: COMPLAINS}


def create_aging_report(conn: Any, *, workspace_id: UUID, actor: str, now: datetime,
                        query_name: str) -> Any:
    """The sample's "Receivables aging" report over the published ``ar_aging`` snapshot (its
    latest published month; a saved query ``query_name`` reads its rows), saved by
    ``actor`` at ``now``; returns the report."""
    query, _ = store.create_query(
        conn, workspace_id=workspace_id, name=query_name, actor=actor, now=now, definition={
            "entity": "snapshot.platform.ar_aging",
            "columns": ["period", "version", "bucket", "due_date", "days_past_due", "outstanding_minor"],
            "sort": [{"column": "days_past_due", "direction": "desc"}]})
    report, _ = reports.create_report(
        conn, workspace_id=workspace_id, name="Receivables aging", actor=actor, now=now, definition={
            "title": "Receivables aging at month end", "sections": [
                {"heading": "Outstanding invoices, latest published month", "query_id": str(query.id),
                 "display": "table", "period": {"choice": "latest"}}]})
    return report


def load_delivery_sample(conn: Any, *, workspace_id: UUID, users: dict[str, str], start: datetime) -> DeliverySample:
    """Create the sample's saved queries, report and query schedules (see the module's
    description) in ``workspace_id``; ``users`` is the Platform sample's user ids by
    persona. Schedules begin at ``start``."""
    analyst = users["analyst"]
    recipients = [users[p] for p in ("admin", "viewer", "no_email", "deactivated", "left", "multi")]
    with conn.transaction():
        conn.execute(SQL["reactivate_user"], (users["deactivated"],))
        conn.execute(SQL["rejoin_workspace"],
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
        aging_report = create_aging_report(conn, workspace_id=workspace_id, actor=analyst, now=start,
                                           query_name="Receivables aging")
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
            ("Monthly receivables aging", "0 9 2 * *", Source("report", report_id=aging_report.id), "pdf", False,
             [users["admin"]]),
        ]
        upsert_user(conn, user_id=BOARD_SECRETARY, display_name="Bea Board", email="bea.board@example.test",
                    now=start - timedelta(days=30))
        add_member(conn, workspace_id=workspace_id, user_id=BOARD_SECRETARY, roles=["queries:read", "reports:read"],
                   now=start - timedelta(days=30))
        set_notify_admins(conn, workspace_id, True)
        specs += [
            ("Board report", "30 6 1 * *", Source("report", report_id=report.id), "pdf", False, [users["admin"]],
             BOARD_SECRETARY),
            ("Board members list", "45 6 1 * *", Source("query", open_query.id), "csv", False, [users["admin"]],
             BOARD_SECRETARY),
        ]
        # (the recipient without access to the query could read it when the schedules were
        # saved, as a save requires; the role is taken away behind the API's back below)
        conn.execute(SQL["grant_queries_read"], (workspace_id, users["multi"]))
        schedules = {}
        for name, cron, source, fmt, skip, to, *owner in specs:
            schedule, _ = create_query_schedule(
                conn, workspace_id=workspace_id, actor=owner[0] if owner else analyst,
                new=NewQuerySchedule(name=name, recurrence={"cron": cron, "timezone": "Europe/Berlin"}, source=source,
                                     format=fmt, recipients=to, subject_template=SUBJECT, body_template=BODY,
                                     skip_when_empty=skip), now=start - timedelta(minutes=1))
            schedules[name] = schedule.id
        # (set behind the API's back: a schedule saved while its owner could read the query,
        # whose owner was then deactivated without the hand-off, as before it existed)
        conn.execute(SQL["set_query_schedule_owner"],
                     (users["deactivated"], schedules["Owner deactivated"]))
        conn.execute(SQL["set_schedule_owner"],
                     (users["deactivated"], schedules["Owner deactivated"]))
        conn.execute(SQL["deactivate_user"], (users["deactivated"],))
        conn.execute(SQL["revoke_queries_read"], (workspace_id, users["multi"]))
        conn.execute(SQL["leave_workspace_at"],
                     (start - timedelta(minutes=1), workspace_id, users["left"]))
    return DeliverySample(schedules, workspace_id=workspace_id, admin=users["admin"], analyst=analyst)


def delivery_summary(conn: Any) -> dict[str, Any]:
    """Deliveries by status and skip reason, query-schedule runs by outcome, the messages'
    states by state and kind (SES's events; owner notice messages, which have no run,
    among them and also listed apart), the suppression list and the opt-outs."""
    by_status = conn.execute(SQL["deliveries_by_status"]).fetchall()
    runs = conn.execute(SQL["query_runs_by_outcome"]).fetchall()
    states = conn.execute(SQL["message_states_by_kind"]).fetchall()
    # Owner notice messages have no run (their outbox rows are keyed notice:...).
    notice_states = conn.execute(SQL["notice_message_states"]).fetchall()
    suppressions = conn.execute(SQL["suppressions"]).fetchall()
    opt_outs = conn.execute(SQL["opt_outs"]).fetchall()
    return {"deliveries": [dict(r) for r in by_status], "runs": [dict(r) for r in runs],
            "message_states": [dict(r) for r in states], "notice_message_states": [dict(r) for r in notice_states],
            "suppressions": [dict(r) for r in suppressions],
            "opt_outs": [dict(r) for r in opt_outs]}


def snapshot_deliveries(conn: Any) -> list[dict[str, Any]]:
    """Each delivery of a report read from a snapshot: the schedule, the run's occurrence,
    and per snapshot section its basis (type, period, version, publication instant), the
    version's protection now and whether the version changed since the previous delivery."""
    rows = conn.execute(SQL["snapshot_deliveries"]).fetchall()
    out = []
    for row in rows:
        for basis in row["snapshot_basis"]:
            if basis is None:
                continue
            protection = conn.execute(SQL["protection_of_snapshot_run"],
                                      (basis["run_id"],)).fetchone()["protection"]
            out.append({"name": row["name"], "occurrence_at": row["occurrence_at"], "state": row["state"],
                        "snapshot_type": basis["snapshot_type"], "period": basis["period"][:7],
                        "version": basis["version"], "published_at": basis["published_at"],
                        "choice": basis["choice"], "protection": protection,
                        "version_changed": row["snapshot_version_changed"]})
    return out


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
