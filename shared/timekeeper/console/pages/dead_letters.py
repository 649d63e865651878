"""Staff's dead-letter pages: every dead-letter queue with its depth
(``/console/dead-letters``), and one queue's messages read before acting
(``/console/dead-letters/<queue>``: the run it names by its schedule and occurrence and
linked, receive count,
first receive, why it died), with Redrive one, Redrive all and Delete one, each with a
reason and a confirmation."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()

#: Why a message died, for people.
WHY = {"malformed_body": "its consumer cannot parse the body",
       "receives_exhausted": "its consumer never acknowledged it on any receive allowed "
                             "(it died or timed out each time)"}
_DONE = {"redriven": "The message went back to its queue; the others stay here.",
         "deleted": "The message was deleted.",
         "redriven_all": "The redrive started: the messages go back to their queue."}
_ACTIONS = {"redrive": ("redrive", "redriven"), "delete": ("delete", "deleted")}


@router.get(f"{PREFIX}/dead-letters")
@signed_in
def dead_letter_queues(ctx: Request) -> Response:
    """``GET /console/dead-letters``: every dead-letter queue and its depth."""
    reply = ctx.api().call("GET", "/operations/dead-letter-queues")
    if reply.status != 200:
        return ctx.api_error(reply)
    return ctx.page("dead_letters.html", queues=reply.body["items"], queue=None, messages=[], problem={}, typed={})


def queue_page(ctx: Request, queue: str, *, done: str | None = None, problem: dict[str, Any] | None = None,
               typed: dict[str, str] | None = None, status_code: int = 200, done_run: str | None = None) -> Response:
    """One dead-letter queue's messages (they stay in the queue); ``done_run``: the run the
    message just acted on named (a UUID; its page is linked beside ``done``); ``problem``
    (``{"message_id", "message"}``) shows a refused action by its form, keeping what was
    ``typed`` (message id -> reason)."""
    reply = ctx.api().call("GET", f"/operations/dead-letter-queues/{quote(queue, safe='')}/messages",
                           query={"limit": "20"})
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    messages = []
    for m in reply.body["items"]:
        pretty = json.dumps(m["decoded"], indent=2, sort_keys=True) if m["decoded"] is not None else None
        run = m.get("run")
        occurrence = when(run["occurrence_at"], zone_of({"timezone": run["timezone"]})) if run else None
        messages.append({**m, "pretty": pretty, "why_text": WHY.get(m["why"], m["why"]), "occurrence": occurrence,
                         "first": when(m["first_received_at"], zone), "sent": when(m["sent_at"], zone)})
    if done == _DONE["redriven"] and not messages and not reply.body.get("being_read", 0):
        done = "The message went back to its queue; no other message is left here."
    return ctx.page("dead_letters.html", status_code, queues=None, queue=reply.body["queue"], messages=messages,
                    being_read=reply.body.get("being_read", 0), zone=zone, done=done, done_run=done_run,
                    problem=problem or {}, typed=typed or {})


@router.get(f"{PREFIX}/dead-letters/<queue>")
@signed_in
def dead_letter_queue(ctx: Request, queue: str) -> Response:
    """``GET /console/dead-letters/<queue>``: the queue's messages."""
    return queue_page(ctx, queue, done=_DONE.get(ctx.params.get("done", "")), done_run=_run_id(ctx.params.get("run")))


def _run_id(value: str | None) -> str | None:
    """``value`` when it is a run id (a UUID), else None."""
    try:
        return str(uuid.UUID(value)) if value else None
    except ValueError:
        return None


def _back(queue: str, done: str, run: str | None = None) -> str:
    query = {"done": done, **({"run": run} if run else {})}
    return f"{PREFIX}/dead-letters/{quote(queue, safe='')}?" + urlencode(query)


@router.post(f"{PREFIX}/dead-letters/<queue>/redrive")
@checked_post
def redrive_all(ctx: Request, queue: str) -> Response:
    """``POST /console/dead-letters/<queue>/redrive``: move every message back, with a reason."""
    reason = ctx.fields.get("reason", "")
    reply = ctx.api().call("POST", f"/operations/dead-letter-queues/{quote(queue, safe='')}/redrive",
                           body={"reason": reason.strip()})
    if 200 <= reply.status < 300:
        return ctx.redirect(_back(queue, "redriven_all"))
    if reply.status in (401, 404) or reply.status >= 500:
        return ctx.api_error(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    return queue_page(ctx, queue, problem={"message_id": "all", "message": body.get("message") or "refused"},
                      typed={"all": reason}, status_code=reply.status)


@router.post(f"{PREFIX}/dead-letters/<queue>/<message_id>/<action>")
@checked_post
def message_action(ctx: Request, queue: str, message_id: str, action: str) -> Response:
    """``POST /console/dead-letters/<queue>/<message id>/{redrive,delete}`` with a reason."""
    if action not in _ACTIONS:
        return ctx.page("error.html", 404, title="Not found", message="No such action.")
    reason = ctx.fields.get("reason", "")
    path = (f"/operations/dead-letter-queues/{quote(queue, safe='')}/messages/{quote(message_id, safe='')}/"
            f"{_ACTIONS[action][0]}")
    reply = ctx.api().call("POST", path, body={"reason": reason.strip()})
    if 200 <= reply.status < 300:
        run = ((reply.body or {}).get("message") or {}).get("run") if isinstance(reply.body, dict) else None
        return ctx.redirect(_back(queue, _ACTIONS[action][1], run["id"] if run else None))
    if reply.status == 401 or reply.status >= 500:
        return ctx.api_error(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    key = f"{action}-{message_id}"
    return queue_page(ctx, queue, problem={"message_id": key, "message": body.get("message") or "refused"},
                      typed={key: reason}, status_code=reply.status)
