"""``python -m timekeeper ops runs|dlq``: a run's page and the operators' actions on it, and
the dead-letter queues' messages, from the command line as a client of the API (the
same routes as the console's run and dead-letter pages):

* ``ops runs list [--state S] [--schedule ID] [--limit N]`` -- runs, a line each with
  the whole id: a schedule's (its history, ``GET /schedules/{id}``), the token's
  workspace's failed runs (``--state failed``: ``GET /runs?state=failed``, a retried one
  with the run its retry made), or across workspaces (a staff token) the failing
  schedules' latest failed runs and the runs that wait too long (``GET
  /operations/overview``);
* ``ops runs show RUN`` -- the run (``GET /runs/{id}``), people by display name, instants
  in UTC to the second;
* ``ops runs retry|cancel|fail RUN --reason TEXT`` -- retry now, cancel a queued run,
  settle a stuck one as failed (an Idempotency-Key is sent: ``--key``, default a new one);
* ``ops dlq list`` -- every dead-letter queue and its depth;
* ``ops dlq show QUEUE [--limit N]`` -- its messages, decoded (they stay in the queue);
* ``ops dlq redrive QUEUE [--message ID] --reason TEXT`` -- every message back to its
  queue, or the one message ``ID``;
* ``ops dlq delete QUEUE MESSAGE --reason TEXT`` -- delete one message.

``--json`` prints the API's body as it came. Exit codes as :mod:`timekeeper.local.ops`: 0
when the API answered 2xx, 1 for its error (code, field and message printed), 2 when it
cannot be reached.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote

from timekeeper.local.ops import ApiUnreachable, OpsOptions, answered, call_api, instant, wall_time


def _q(value: str | None) -> str:
    return quote(value or "", safe="")


def request_of(options: OpsOptions) -> tuple[str, str, Any, dict[str, str] | None]:
    """The API request ``(method, path, body, headers)`` of a ``runs`` or ``dlq`` command."""
    reason = {"reason": options.reason}
    if options.action == "runs":
        if options.verb == "show":
            return "GET", f"/runs/{_q(options.run)}", None, None
        return "POST", f"/runs/{_q(options.run)}/{options.verb}", reason, {
            "Idempotency-Key": options.key or str(uuid.uuid4())}
    base = f"/operations/dead-letter-queues/{_q(options.queue)}"
    if options.verb == "list":
        return "GET", "/operations/dead-letter-queues", None, None
    if options.verb == "show":
        return "GET", f"{base}/messages?limit={options.limit}", None, None
    if options.verb == "redrive" and not options.message:
        return "POST", f"{base}/redrive", reason, None
    return "POST", f"{base}/messages/{_q(options.message)}/{options.verb}", reason, None


def run_runs_or_dlq(options: OpsOptions, console: Any) -> int:
    """Run a ``runs`` or ``dlq`` command and print its outcome on ``console`` (rich);
    returns the exit code."""
    if options.action == "runs" and options.verb == "list":
        return list_runs(options, console)
    method, path, body, headers = request_of(options)
    try:
        status, answer = call_api(options.api, options.token, method, path, body, headers=headers)
    except ApiUnreachable as error:
        console.print(f"[red]cannot reach the API[/]: {error}")
        return 2
    if not 200 <= status < 300:
        answer = answer if isinstance(answer, dict) else {}
        field = f" (field {answer['field']})" if answer.get("field") else ""
        console.print(f"[red]{status} {answer.get('code', 'error')}[/]{field}: {answer.get('message', '')}",
                      markup=True, highlight=False)
        return 1
    if options.as_json:
        console.print_json(data=answer)
    else:
        _print(options, answer, console)
    return 0


def _print_run(body: dict[str, Any], console: Any) -> None:
    """``ops runs show``: the run's page in lines, people by display name (the API's
    ``names``; the local server's sample data as the console names it), instants in UTC to
    the second; each line printed whole (a terminal folds it, no break inside an id)."""
    from rich.markup import escape

    from timekeeper.console.glossary import ACTORS

    names = {**ACTORS, **(body.get("names") or {})}
    console = _Whole(console)

    def person(user: str | None) -> str:
        return escape(f"{names[user]} ({user})" if user in names else user or "-")

    latest = body.get("latest_attempt")
    console.print(f"run {body['id']} of {escape(body['schedule_name'])} ({body['schedule_id']}), "
                  f"workspace {body['workspace_id']}", highlight=False)
    requested = f" requested by {person(body['requested_by'])}" if body.get("requested_by") else ""
    console.print(f"  {body['trigger']} occurrence {wall_time(body['occurrence_local'])} {body['timezone']}"
                  f"{' (DST shift)' if body['dst_shifted'] else ''} = {instant(body['occurrence_at'])}{requested}",
                  highlight=False)
    if body.get("retry_of"):
        retry = body["retry_of"]
        console.print(f"  a retry of run {retry['run_id']} by {person(retry['actor'])} at {instant(retry['at'])}: "
                      f"{escape(retry['reason'])}", highlight=False)
    console.print(f"  state {body['state']}{' stuck: ' + body['stuck'] if body['stuck'] else ''}; outcome "
                  f"{escape(body['outcome_code'] or '-')}{': ' + escape(body['error']) if body.get('error') else ''}; "
                  f"attempts {body['attempts']}; skipped backlog {body['skipped_backlog']}", highlight=False)
    for attempt in body.get("attempt_history") or ([latest] if latest else []):
        console.print(f"  attempt {attempt['number']} on {attempt['consumer']} (receive "
                      f"{attempt.get('receive_count') or '-'}): {instant(attempt['started_at'])} -> "
                      f"{instant(attempt['finished_at'])} {attempt.get('ended') or 'running'}; error "
                      f"{escape(attempt['error'] or '-')}", highlight=False)
    for action in body["actions"]:
        new_run = (action.get("detail") or {}).get("run_id") if action["action"] == "retry" else None
        console.print(f"  {instant(action['at'])} {action['action']} by {person(action['actor'])}: "
                      f"{escape(action['reason'])}{f' (the new run: {new_run})' if new_run else ''}", highlight=False)


class _Whole:
    """A console whose ``print`` never wraps a line (``soft_wrap``): ids stay whole."""

    def __init__(self, console: Any) -> None:
        self._console = console

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``console.print`` with ``soft_wrap=True``."""
        self._console.print(*args, soft_wrap=True, **kwargs)


def _print(options: OpsOptions, body: dict[str, Any], console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    if options.action == "runs" and options.verb == "show":
        _print_run(body, console)
    elif options.action == "runs" and options.verb == "retry":
        console.print(f"retry of {body['retried_run_id']}: run {body['run_id']} queued"
                      f"{'' if body['created'] else ' (already, by this key)'}")
    elif options.action == "runs":
        console.print(f"{body['action']} of run {options.run} recorded: {escape(body['reason'])}")
    elif options.verb == "list":
        table = Table("queue", "messages", title="Dead-letter queues")
        for q in body["items"]:
            table.add_row(q["name"], str(q["messages"]))
        console.print(table)
    elif options.verb == "show":
        table = Table("message", "for", "why", "receives", "first received", "body",
                      title=f"{body['queue']['name']}: {body['queue']['messages']} messages")
        for m in body["items"]:
            names = m.get("names") or {}
            table.add_row(m["message_id"], f"{names.get('kind', '-')} {names.get('id', '')}", m["why"],
                          str(m["receive_count"]), m["first_received_at"] or "", escape(m["body"][:200]))
        console.print(table)
    elif "message" in body:
        console.print(f"{body['action']} of {body['message']['message_id']} in {body['queue']}: done")
    else:
        moved = "moved" if body.get("moved") is not None else "are being moved (SQS move task)"
        console.print(f"redrive of {body['queue']}: {body['messages']} messages {moved}; task {body['task']}")


#: The run states ``ops runs list`` reads from the operations overview (no ``--schedule``).
OVERVIEW_STATES = (None, "failed", "queued", "running")


def list_runs(options: OpsOptions, console: Any) -> int:
    """``ops runs list``: with ``--schedule`` the schedule's runs (``GET /schedules/{id}``'s
    history, newest first; the token's workspace, ``schedules:read``); with ``--state
    failed`` the token's workspace's failed runs (``GET /runs?state=failed``, one request,
    each with the run its retry made); otherwise, across workspaces (a staff token), the
    failing schedules' latest failed runs (each read with ``GET /runs/{id}``) and the queued
    or running runs that wait too long (``GET /operations/overview``). ``--state`` keeps one
    state. A line per run with its whole id;
    ``--json``: ``{"items": [...]}``. Returns the exit code (2: a state the overview does
    not list, without ``--schedule``)."""
    state, limit = options.state, options.limit
    if options.schedule:
        code, body = answered(options.api, options.token, console, "GET",
                              f"/schedules/{_q(options.schedule)}?history_limit=200&upcoming=1")
        if code:
            return code
        name = body["schedule"]["name"]
        items = [{"id": r["id"], "schedule_id": body["schedule"]["id"], "schedule_name": name,
                  "workspace_id": body["schedule"].get("workspace_id"), "state": r["state"],
                  "occurrence_local": r["occurrence_local"], "occurrence_at": r["occurrence_at"],
                  "attempts": r["attempts"], "outcome_code": r["outcome_code"]}
                 for r in body["history"]["runs"] if state in (None, r["state"])][:limit]
        zone = body["schedule"].get("timezone") or ""
        return _print_runs(options, [dict(i, timezone=zone) for i in items], console)
    if state == "failed":
        return _failed_runs(options, console)
    if state not in OVERVIEW_STATES:
        console.print(f"[red]runs in state {state} are listed per schedule only[/]: add --schedule ID "
                      "(across workspaces: failed, queued, running)", highlight=False)
        return 2
    query = f"?limit={limit}" + (f"&state={state}" if state in ("queued", "running") else "")
    code, body = answered(options.api, options.token, console, "GET", f"/operations/overview{query}")
    if code:
        return code
    items: list[dict[str, Any]] = []
    if state in (None, "failed"):
        for schedule in body["schedules"]:
            if not schedule.get("last_failed_run_id") or len(items) >= limit:
                continue
            code, run = answered(options.api, options.token, console, "GET",
                                 f"/runs/{_q(schedule['last_failed_run_id'])}")
            if code:
                return code
            items.append({k: run[k] for k in ("id", "schedule_id", "schedule_name", "workspace_id", "state",
                                              "occurrence_local", "occurrence_at", "attempts", "outcome_code",
                                              "timezone")})
    if state != "failed":
        items += [{"id": r["id"], "schedule_id": r["schedule_id"], "schedule_name": r["schedule_name"] or "-",
                   "workspace_id": r["workspace_id"], "state": r["state"], "occurrence_local": None,
                   "occurrence_at": r["occurrence_at"], "attempts": r["attempts"], "outcome_code": None,
                   "timezone": None, "stuck": r["why"]} for r in body["stranded_runs"]]
    return _print_runs(options, items[:limit], console)


def _failed_runs(options: OpsOptions, console: Any) -> int:
    """``ops runs list --state failed``: the token's workspace's failed runs, newest first, in
    one request (``GET /runs?state=failed``: ``schedules:read``, or staff), a run retried
    since listed all the same with the run its retry made."""
    code, body = answered(options.api, options.token, console, "GET", f"/runs?state=failed&limit={options.limit}")
    if code:
        return code
    items = [{k: r[k] for k in ("id", "schedule_id", "schedule_name", "state", "occurrence_local", "occurrence_at",
                                 "attempts", "outcome_code", "timezone", "retried_as")} for r in body["items"]]
    return _print_runs(options, items, console)


def _print_runs(options: OpsOptions, items: list[dict[str, Any]], console: Any) -> int:
    if options.as_json:
        console.print_json(data={"items": items})
        return 0
    for r in items:
        local = f"{wall_time(r['occurrence_local'])} {r['timezone']} = " if r.get("occurrence_local") else ""
        console.print(f"{r['id']}  {r['schedule_name']}  {r['state']}"
                      f"{' (' + r['outcome_code'] + ')' if r.get('outcome_code') else ''}"
                      f"{' stuck: ' + r['stuck'] if r.get('stuck') else ''}"
                      f"{' retried as ' + r['retried_as'] if r.get('retried_as') else ''}  occurrence {local}"
                      f"{instant(r['occurrence_at'])}  attempts {r['attempts']}",
                      markup=False, highlight=False, soft_wrap=True)
    if not items:
        console.print("no runs", markup=False, highlight=False)
    return 0
