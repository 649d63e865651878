"""``python -m timekeeper ops``: the operations routes from the command line, as a client of
the API over HTTP, so an operator can script them against a deployed stage with a staff
token as well as against ``serve``.

* ``ops overview`` -- paused and failing schedules, runs that wait too long, every
  workspace's overdue snapshot periods (most overdue first) and the dead-letter queues,
  a line per record with every id whole, a failing schedule's latest failed run's too
  (``--json``: the API's body as it came);
* ``ops redrive QUEUE --reason TEXT`` -- move a dead-letter queue's messages back;
* ``ops resume WORKSPACE SCHEDULE --reason TEXT`` -- resume a paused schedule;
* ``ops erase USER --reason TEXT`` -- erase a person in every workspace (the user id goes
  in the request's body, never its path);
* ``ops erase-member WORKSPACE MEMBER --reason TEXT`` -- erase a workspace's member from
  every snapshot version's rows (the ids in the body).
* ``ops runs ...`` and ``ops dlq ...`` -- a run and its actions, the dead-letter queues'
  messages (:mod:`timekeeper.local.ops_runs`).

``--api`` (default ``$TIMEKEEPER_API`` or ``http://127.0.0.1:8080``, serve's address;
a deployed stage's URL ends in ``/v1``) and ``--token`` (default ``$TIMEKEEPER_TOKEN``;
against serve a development token ``dev:<user>:<workspace>:platform:staff``; several roles
joined by commas: ``dev:<user>:<workspace>:platform:staff,workspace:admin,schedules:read``). The exit
code is 0 when the API answered 2xx, 1 when it answered an error (its code and message are
printed), 2 for a usage error or an API that cannot be reached.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

#: serve's default address.
DEFAULT_API = "http://127.0.0.1:8080"
#: Seconds to wait for an answer (API Gateway's own limit is 29).
TIMEOUT_S = 35


@dataclass(frozen=True)
class OpsOptions:
    """One ``ops`` command: ``action`` (overview, redrive, resume, erase, erase-member) and
    its arguments."""

    action: str
    api: str
    token: str | None
    reason: str | None = None
    queue: str | None = None
    workspace: str | None = None
    schedule: str | None = None
    user: str | None = None
    member: str | None = None
    limit: int = 100
    as_json: bool = False
    #: ``runs`` and ``dlq`` (:mod:`timekeeper.local.ops_runs`): the sub-command, the run,
    #: the message and the Idempotency-Key of a run action.
    verb: str | None = None
    run: str | None = None
    message: str | None = None
    key: str | None = None
    #: ``runs list``: only runs in this state.
    state: str | None = None


class ApiUnreachable(Exception):  # noqa: N818 - what the operator is told
    """The API did not answer (refused connection, DNS, timeout)."""


def call_api(api: str, token: str | None, method: str, path: str, body: Any = None, *,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """``method api+path`` with ``token`` as the bearer token, ``body`` as JSON and extra
    ``headers``; returns (status, parsed JSON body or None). Raises :class:`ApiUnreachable`."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": "application/json", **(headers or {})}
    if data is not None:
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        request = urllib.request.Request(api.rstrip("/") + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 - the operator's URL
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise ApiUnreachable(f"{api}: {getattr(error, 'reason', error)}") from None
    except ValueError as error:  # a malformed URL, or a header (the token) with a line break
        raise ApiUnreachable(f"{api}: the URL or the token is malformed ({error})") from None
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, {"code": "not_json", "message": raw[:200].decode(errors="replace")}


def answered(api: str, token: str | None, console: Any, method: str, path: str, body: Any = None, *,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """``method path`` as :func:`call_api` does it; returns ``(0, the answer's body)`` for
    a 2xx answer, else the exit code with None, the refusal printed on ``console``: ``(1,
    None)`` for the API's error (its status, code, field and message), ``(2, None)`` when
    it cannot be reached."""
    try:
        status, answer = call_api(api, token, method, path, body, headers=headers)
    except ApiUnreachable as error:
        console.print(f"[red]cannot reach the API[/]: {escape_markup(str(error))}", highlight=False)
        return 2, None
    if not 200 <= status < 300:
        answer = answer if isinstance(answer, dict) else {}
        field = f" (field {answer['field']})" if answer.get("field") else ""
        console.print(f"[red]{status} {escape_markup(str(answer.get('code', 'error')))}[/]{escape_markup(field)}: "
                      f"{escape_markup(str(answer.get('message', '')))}", highlight=False)
        return 1, None
    return 0, answer


def escape_markup(text: str) -> str:
    """``text`` with rich's markup escaped (names and reasons print as typed)."""
    from rich.markup import escape

    return escape(text)


def run_ops(options: OpsOptions, console: Any) -> int:
    """Run ``options`` against the API and print the outcome on ``console`` (rich); returns
    the exit code (see the module docstring)."""
    if options.action == "overview":
        request = ("GET", f"/operations/overview?limit={options.limit}", None)
    elif options.action == "redrive":
        request = ("POST", f"/operations/dead-letter-queues/{quote(options.queue or '', safe='')}/redrive",
                   {"reason": options.reason})
    elif options.action == "erase":
        request = ("POST", "/operations/erasures", {"user_id": options.user, "reason": options.reason})
    elif options.action == "erase-member":
        request = ("POST", "/operations/member-erasures",
                   {"workspace_id": options.workspace, "member_id": options.member, "reason": options.reason})
    else:
        request = ("POST", f"/operations/workspaces/{quote(options.workspace or '', safe='')}/schedules/"
                           f"{quote(options.schedule or '', safe='')}/resume", {"reason": options.reason})
    try:
        status, body = call_api(options.api, options.token, *request)
    except ApiUnreachable as error:
        console.print(f"[red]cannot reach the API[/]: {error}")
        return 2
    if not 200 <= status < 300:
        body = body if isinstance(body, dict) else {}
        field = f" (field {body['field']})" if body.get("field") else ""
        console.print(f"[red]{status} {body.get('code', 'error')}[/]{field}: {body.get('message', '')}")
        return 1
    if options.as_json:
        console.print_json(data=body)
    elif options.action == "overview":
        _print_overview(body, console)
    elif options.action == "redrive":
        moved = "moved" if body.get("moved") is not None else "are being moved (SQS move task)"
        console.print(f"redrive of {body['queue']}: {body['messages']} messages {moved}; task {body['task']}")
    elif options.action == "erase":
        console.print(f"erased sha256:{body['user_digest']}: off {body['recipient_lists']} recipient lists, "
                      f"{body['opt_outs']} opt-outs and {body['suppressions']} suppressions deleted, "
                      f"{body['delivery_addresses']} delivery addresses erased")
    elif options.action == "erase-member":
        console.print(f"erased member sha256:{body['member_digest']} of workspace {body['workspace_id']}: "
                      f"{body['snapshot_rows']} snapshot rows pseudonymised")
    else:
        console.print(f"resumed {body['name']} ({body['id']}): next due {body.get('next_due_at')}")
    return 0


def instant(value: str | None) -> str:
    """An API instant (ISO 8601, UTC) as ``YYYY-MM-DD HH:MM:SSZ`` (no fraction of a
    second); ``-`` for None."""
    if not value:
        return "-"
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    moment = moment.astimezone(UTC) if moment.tzinfo is not None else moment
    return f"{moment:%Y-%m-%d %H:%M:%S}Z"


def wall_time(value: str) -> str:
    """A local wall time as the API gives it (``2026-12-06T20:53:51.155010``) to the
    minute: ``2026-12-06 20:53``."""
    try:
        return f"{datetime.fromisoformat(value):%Y-%m-%d %H:%M}"
    except ValueError:
        return value


def overview_lines(body: dict[str, Any]) -> list[str]:
    """What ``ops overview`` prints for the API's answer ``body``: a heading per kind and a
    line per record, every id whole (the lines are printed unwrapped: a terminal folds them
    on screen, a copy keeps the id), instants in UTC to the second."""
    lines = [f"Operations overview as of {instant(body['as_of'])}", "", "Schedules needing attention:"]
    for s in body["schedules"]:
        failed = f"; latest failed run {s['last_failed_run_id']}" if s.get("last_failed_run_id") else ""
        lines.append(f"  {s['name']}  schedule {s['id']}  workspace {s.get('workspace_name') or '-'} "
                     f"{s['workspace_id']}  {s['status']}{' (' + s['pause_reason'] + ')' if s['pause_reason'] else ''}"
                     f"  {s['consecutive_failures']} failures in a row, last outcome {s['last_outcome'] or '-'}, "
                     f"changed {instant(s['updated_at'])}{failed}")
    if not body["schedules"]:
        lines.append("  none")
    lines += ["", "Runs that wait too long:"]
    for r in body["stranded_runs"]:
        lines.append(f"  run {r['id']}  {r.get('schedule_name') or '-'}  workspace {r.get('workspace_name') or '-'} "
                     f"{r['workspace_id']}  {r['owner']} {r['work_kind']}  {r['state']}, {r['why']}  queued "
                     f"{instant(r['queued_at'])}, published {instant(r['published_at'])}, lease until "
                     f"{instant(r['lease_until'])}, attempts {r['attempts']}")
    if not body["stranded_runs"]:
        lines.append("  none")
    periods = body.get("overdue_periods", [])
    lines += ["", f"Overdue snapshot periods ({len(periods)} of {body.get('overdue_periods_total', 0)}):"]
    for p in periods:
        status = p["status"] + (f" ({p['failure_code']})" if p.get("failure_code") else "")
        lines.append(f"  {p['workspace_name']} {p['workspace_id']}  {p['owner']}:{p['snapshot_type']} "
                     f"{p['period'][:7]}  {status}  overdue since {instant(p['due_at'])} "
                     f"({p['overdue_hours']:.1f} hours){'  run ' + p['run_id'] if p.get('run_id') else ''}")
    if not periods:
        lines.append("  none")
    lines += ["", "Dead-letter queues:"]
    for q in body["dead_letter_queues"]:
        age = "" if q["oldest_age_s"] is None else f", the oldest {q['oldest_age_s']} s old"
        running = {True: ", a redrive running", False: "", None: ""}[q["redrive_running"]]
        lines.append(f"  {q['name']}: {q['messages']} messages{age}{running}")
    return lines


def _print_overview(body: dict[str, Any], console: Any) -> None:
    for line in overview_lines(body):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def default_api() -> str:
    """``$TIMEKEEPER_API``, else serve's address."""
    return os.environ.get("TIMEKEEPER_API") or DEFAULT_API
