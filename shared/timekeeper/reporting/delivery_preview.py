"""A delivery's message previewed: what a recipient would receive from a saved delivery or
from a draft not saved yet, composed by the delivery's own :class:`MessageComposer` and
recipient check, with stand-in links (a preview never holds a working link). Nothing is
written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from timekeeper.reporting.delivery import resolve_recipient
from timekeeper.reporting.delivery_messages import ComposedMessage, MessageComposer
from timekeeper.reporting.delivery_store import QuerySchedule, list_recipients

#: The stand-in of a personal link in a preview: the real one is signed for each recipient
#: when the message is sent (a preview never holds a working link).
PREVIEW_TOKEN = "personal-link-made-when-sent"


@dataclass(frozen=True)
class MessagePreview:
    """What ``user_id`` would receive if the schedule ran at ``now``: their display name,
    ``skip_reason`` (the reason they would be skipped, the delivery's own: ``no_access``,
    ``deactivated``, ``left_workspace``, ``no_address``, ``unsubscribed``, ``suppressed``;
    None when they would be sent to), the message, and the link's expiry (aware UTC) with
    the workspace's zone it is written in."""

    user_id: str
    recipient_name: str
    skip_reason: str | None
    message: ComposedMessage
    link_expires_at: Any
    timezone: str


def preview_message(conn: psycopg.Connection, schedule: QuerySchedule, *, user_id: str, now: Any,
                    base_url: str) -> MessagePreview:
    """The message ``user_id`` (one of the schedule's recipients) would receive from a run at
    ``now`` (aware UTC; the templates' ``run_date`` is its workspace-local date), composed by
    the delivery's own :class:`MessageComposer` and recipient check; the download and
    opt-out links are stand-ins under ``base_url`` (ending in ``/``) holding
    :data:`PREVIEW_TOKEN`, and ``row_count`` is left empty (counted when it runs). Nothing is
    written. Raises ``KeyError`` when ``user_id`` is not a recipient of the schedule."""
    if user_id not in list_recipients(conn, workspace_id=schedule.workspace_id, schedule_id=schedule.schedule_id):
        raise KeyError(user_id)
    return preview_draft_message(conn, schedule, user_id=user_id, now=now, base_url=base_url)


def preview_draft_message(conn: psycopg.Connection, draft: QuerySchedule, *, user_id: str, now: Any,
                          base_url: str) -> MessagePreview:
    """The message ``user_id`` would receive from a delivery that is not saved yet (``draft``:
    its settings as :func:`timekeeper.reporting.query_schedules.draft_settings` checked them)
    run at ``now``: the same composition and recipient check as :func:`preview_message`,
    with the same stand-in links. Nothing is written."""
    recipient = resolve_recipient(conn, draft, user_id)
    composer = MessageComposer(conn, draft, now=now, run_date=None, row_count=None)
    message = composer.compose(recipient.display_name, link=f"{base_url}downloads/{PREVIEW_TOKEN}",
                               opt_out_url=f"{base_url}opt-outs/{PREVIEW_TOKEN}")
    return MessagePreview(user_id, recipient.display_name, recipient.skip_reason, message, composer.expires,
                          composer.timezone)
