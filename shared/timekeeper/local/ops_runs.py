"""``python -m timekeeper ops runs|dlq``: a run's page and the operators' actions on it, and
the dead-letter queues' messages, from the command line as a client of the API (the
same routes as the console's run and dead-letter pages):

* ``ops runs show RUN`` -- the run (``GET /runs/{id}``);
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

from timekeeper.local.ops import ApiUnreachable, OpsOptions, call_api


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


def _print(options: OpsOptions, body: dict[str, Any], console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    if options.action == "runs" and options.verb == "show":
        latest = body.get("latest_attempt")
        console.print(f"run {body['id']} of {escape(body['schedule_name'])} ({body['schedule_id']}), "
                      f"workspace {body['workspace_id']}")
        console.print(f"  {body['trigger']} occurrence {body['occurrence_local']} {body['timezone']}"
                      f"{' (DST shift)' if body['dst_shifted'] else ''} = {body['occurrence_at']}")
        console.print(f"  state {body['state']}{' stuck: ' + body['stuck'] if body['stuck'] else ''}; outcome "
                      f"{body['outcome_code'] or '-'}; attempts {body['attempts']}; skipped backlog "
                      f"{body['skipped_backlog']}; message id {body['message_id']}")
        for attempt in body.get("attempt_history") or ([latest] if latest else []):
            console.print(f"  attempt {attempt['number']} on {attempt['consumer']} (receive "
                          f"{attempt.get('receive_count') or '-'}): {attempt['started_at'] or '-'} -> "
                          f"{attempt['finished_at'] or '-'} {attempt.get('ended') or 'running'}; error "
                          f"{escape(attempt['error'] or '-')}")
        for action in body["actions"]:
            console.print(f"  {action['at']} {action['action']} by {escape(action['actor'])}: "
                          f"{escape(action['reason'])}")
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
