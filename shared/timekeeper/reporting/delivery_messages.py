"""The messages of one delivery: the schedule's templates rendered for each recipient and
framed in the product's own message (:func:`timekeeper.reporting.templates.frame_message`),
exactly as they are sent and as the message preview shows them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from timekeeper.reporting.delivery_store import QuerySchedule, contacts, workspace_facts
from timekeeper.reporting.templates import Message, MessageContext, format_instant, frame_message, zone_of


@dataclass(frozen=True)
class ComposedMessage:
    """One recipient's complete message: ``subject``, the ``html`` and ``text`` parts."""

    subject: str
    html: str
    text: str


class MessageComposer:
    """The messages of one delivery: the schedule's templates rendered and framed for each
    recipient, exactly as they are sent. Built once per run (the workspace's name and zone,
    the owner's name and the link's expiry are read here); :meth:`compose` per recipient.
    ``now`` (aware UTC) starts the link's lifetime (``link_ttl_hours``; :attr:`expires`,
    whole seconds), ``run_date`` is the occurrence's workspace-local date the templates
    show (None: ``now``'s date in the workspace's zone), ``row_count`` the file's rows
    (None: not counted)."""

    def __init__(self, conn: psycopg.Connection, schedule: QuerySchedule, *, now: Any, run_date: Any,
                 row_count: int | None) -> None:
        self.schedule = schedule
        self.row_count = row_count
        self.expires = (now + timedelta(hours=schedule.link_ttl_hours)).replace(microsecond=0)
        workspace = workspace_facts(conn, schedule.workspace_id)
        self.workspace_name = workspace["name"] or "your workspace"
        self.timezone = workspace["timezone"]
        self.expires_text = format_instant(self.expires, self.timezone)
        if run_date is None:
            run_date = now.astimezone(zone_of(self.timezone)).date()
        owner = contacts(conn, [schedule.owner_user_id]).get(schedule.owner_user_id) or {}
        self.owner_name = owner.get("display_name") or schedule.owner_user_id
        self._message = Message(schedule.subject_template, schedule.body_template)
        self._base = {"schedule_name": schedule.name, "link_expires_at": self.expires_text,
                      "row_count": "" if row_count is None else row_count,
                      "run_date": run_date.isoformat(), "format": schedule.format}

    def compose(self, recipient_name: str, *, link: str, opt_out_url: str) -> ComposedMessage:
        """The message to ``recipient_name`` (their display name) with their download
        ``link`` and one-click ``opt_out_url``. Raises ``TemplateError`` for a template the
        schedule's checks would have refused."""
        subject, body, _ = self._message.render({**self._base, "recipient_name": recipient_name, "link": link})
        html, text = frame_message(subject, body, MessageContext(
            workspace_name=self.workspace_name, schedule_name=self.schedule.name, owner_name=self.owner_name,
            recipient_name=recipient_name, format=self.schedule.format, row_count=self.row_count,
            link=link, link_expires=self.expires_text, opt_out_url=opt_out_url))
        return ComposedMessage(subject, html, text)


__all__ = ["ComposedMessage", "MessageComposer"]
