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
from datetime import datetime, timedelta
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
    """Deliveries by status and skip reason, and query-schedule runs by outcome."""
    by_status = conn.execute("""SELECT status, coalesce(skip_reason, '') AS reason, count(*) AS n
                                  FROM query_deliveries GROUP BY 1, 2 ORDER BY 1, 2""").fetchall()
    runs = conn.execute("""SELECT s.name, r.trigger, r.state, coalesce(r.outcome_code, '') AS outcome, count(*) AS n
                             FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
                            WHERE r.owner = 'queries' GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4""").fetchall()
    return {"deliveries": [dict(r) for r in by_status], "runs": [dict(r) for r in runs]}


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
