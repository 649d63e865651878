"""A run's own page (``/console/runs/<id>``): its schedule, trigger, occurrence (local with
its DST mark, and UTC), state and outcome in words, its latest attempt, history and the
operators' actions, with Retry now, Cancel and Settle as failed, each with a reason and a
confirmation, offered only to people whose roles allow it and only where it applies."""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()

#: Why a run waits too long, for people (the API's ``stuck``).
STUCK = {"not_started": "accepted by its queue, never started", "not_published": "waiting to be sent again",
         "lease_expired": "started; its execution stopped answering"}
#: The message after each action.
_DONE = {"retry": "A manual run of the same schedule was queued.", "cancel": "The run was cancelled.",
         "fail": "The run was settled as failed."}
_ACTIONS = tuple(_DONE)


#: An error's internal code at its end, ``"timeout after 30 s (bank:operating)"``.
_CODE_TAIL = re.compile(r"^(?P<text>.*?)\s*\((?P<code>[\w.-]+:[\w.:-]+)\)$", re.DOTALL)


def error_parts(error: str | None) -> dict[str, str] | None:
    """A run's ``error`` split into its ``text`` for people and its internal ``code`` tail
    (``""`` when it has none): ``"timeout (bank:operating)"`` -> text ``"timeout"``, code
    ``"bank:operating"``. None for None or empty."""
    if not error:
        return None
    found = _CODE_TAIL.match(error)
    if not found or not found["text"]:
        return {"text": error, "code": ""}
    return {"text": found["text"], "code": found["code"]}


def _duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


def run_page(ctx: Request, run_id: str, *, done: str | None = None, problem: dict[str, Any] | None = None,
             typed: dict[str, str] | None = None, status_code: int = 200) -> Response:
    """The run's page from ``GET /runs/{id}``; ``problem`` (``{"action", "field", "message"}``)
    shows a refused action's reason by its form, keeping what was ``typed``."""
    reply = ctx.api().call("GET", f"/runs/{quote(run_id, safe='')}")
    if reply.status != 200:
        return ctx.api_error(reply)
    run = reply.body
    zone = zone_of({"timezone": run.get("workspace_timezone")})
    session = ctx.current_session()
    staff = bool(session and session.staff)
    attempts = [_attempt(a, zone) for a in run.get("attempt_history") or []]
    if not attempts and run.get("latest_attempt"):
        attempts = [_attempt(run["latest_attempt"], zone)]
    # A run still queued or running is retried by nothing: Retry now waits for its end.
    may = {"retry": run["retry_allowed"] and run["state"] not in ("queued", "running")
           and (staff or session.has("schedules:run", "schedules:admin")),
           "cancel": run["state"] == "queued" and (staff or session.has("schedules:admin")),
           "fail": run["stuck"] is not None and (staff or session.has("schedules:admin"))}
    return ctx.page(
        "run.html", status_code, r=run, zone=zone, done=done, problem=problem or {}, typed=typed or {}, may=may,
        occurrence=when(run["occurrence_at"], zone_of({"timezone": run["timezone"]})),
        given=when(run.get("due_at"), zone),
        error=error_parts(run["error"]), retry_of=_retry_of(run.get("retry_of"), zone),
        queued=when(run["queued_at"], zone),
        published=when(run["published_at"], zone), first_skipped=when(run["first_skipped_at"], zone),
        attempts=attempts, stuck=STUCK.get(run["stuck"] or ""), key=str(uuid.uuid4()),
        people={user_id: {"name": name} for user_id, name in (run.get("names") or {}).items() if name != user_id},
        events=[{**e, "when": when(e["at"], zone)} for e in run["events"]],
        actions=[{**a, "when": when(a["at"], zone)} for a in run["actions"]])


def _attempt(attempt: dict[str, Any], zone: str) -> dict[str, Any]:
    """An attempt of the API's ``attempt_history`` with its instants and duration for people."""
    return {**attempt, "started": when(attempt["started_at"], zone), "finished": when(attempt["finished_at"], zone),
            "lease": when(attempt["lease_until"], zone), "took": _duration(attempt["duration_s"]),
            "error_parts": error_parts(attempt["error"])}


def _retry_of(retry: dict[str, Any] | None, zone: str) -> dict[str, Any] | None:
    """The API's ``retry_of`` with its instant for people (None: the run is no retry)."""
    return {**retry, "when": when(retry["at"], zone)} if retry else None


@router.get(f"{PREFIX}/runs/<run_id>")
@signed_in
def run(ctx: Request, run_id: str) -> Response:
    """``GET /console/runs/<id>``: the run's page."""
    return run_page(ctx, run_id, done=_DONE.get(ctx.params.get("done", "")))


@router.post(f"{PREFIX}/runs/<run_id>/<action>")
@checked_post
def run_action(ctx: Request, run_id: str, action: str) -> Response:
    """``POST /console/runs/<id>/{retry,cancel,fail}``: the action with its reason (and the
    form's Idempotency-Key), then the run's page (a retry: the new run's)."""
    if action not in _ACTIONS:
        return ctx.page("error.html", 404, title="Not found", message="No such action.")
    reason = ctx.fields.get("reason", "")
    headers = {"Idempotency-Key": ctx.fields["key"][:200]} if ctx.fields.get("key") else None
    reply = ctx.api().call("POST", f"/runs/{quote(run_id, safe='')}/{action}", body={"reason": reason.strip()},
                           headers=headers)
    if 200 <= reply.status < 300:
        target = reply.body["run_id"] if action == "retry" else run_id
        return ctx.redirect(f"{PREFIX}/runs/{quote(target, safe='')}?" + urlencode({"done": action}))
    if reply.status in (401, 404) or reply.status >= 500:
        return ctx.api_error(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    return run_page(ctx, run_id, problem={"action": action, "field": body.get("field"),
                                          "message": body.get("message") or "the action was refused"},
                    typed={action: reason}, status_code=reply.status)
