"""``python -m timekeeper ops``: the operations routes from the command line, as a client of
the API over HTTP, so an operator can script them against a deployed stage with a staff
token as well as against ``serve``.

* ``ops overview`` -- paused and failing schedules, runs that wait too long, every
  workspace's overdue snapshot periods (most overdue first) and the dead-letter queues,
  as tables (``--json``: the API's body as it came);
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
against serve a development token ``dev:<user>:<workspace>:platform:staff``). The exit
code is 0 when the API answered 2xx, 1 when it answered an error (its code and message are
printed), 2 for a usage error or an API that cannot be reached.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
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


def _print_overview(body: dict[str, Any], console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    console.print(f"[bold]Operations overview[/] as of {body['as_of']}")
    schedules = Table("workspace", "schedule", "name", "status", "reason", "failures", "last outcome", "changed",
                      title="Schedules needing attention")
    for s in body["schedules"]:
        schedules.add_row(s["workspace_id"], s["id"], s["name"], s["status"], s["pause_reason"] or "",
                          str(s["consecutive_failures"]), s["last_outcome"] or "", s["updated_at"])
    runs = Table("workspace", "run", "owner", "kind", "why", "queued", "published", "lease until", "attempts",
                 title="Runs that wait too long")
    for r in body["stranded_runs"]:
        runs.add_row(r["workspace_id"], r["id"], r["owner"], r["work_kind"], r["why"], r["queued_at"],
                     r["published_at"] or "", r["lease_until"] or "", str(r["attempts"]))
    queues = Table("queue", "messages", "oldest age (s)", "redrive running", title="Dead-letter queues")
    for q in body["dead_letter_queues"]:
        queues.add_row(q["name"], str(q["messages"]), "" if q["oldest_age_s"] is None else str(q["oldest_age_s"]),
                       {True: "yes", False: "no", None: ""}[q["redrive_running"]])
    periods = body.get("overdue_periods", [])
    overdue = Table("workspace", "name", "owner", "type", "period", "status", "overdue since (UTC)", "hours",
                    title=f"Overdue snapshot periods ({len(periods)} of {body.get('overdue_periods_total', 0)})")
    for p in periods:
        status = p["status"] + (f" ({p['failure_code']})" if p.get("failure_code") else "")
        overdue.add_row(p["workspace_id"], escape(p["workspace_name"]), p["owner"], p["snapshot_type"],
                        p["period"][:7], escape(status), p["due_at"], f"{p['overdue_hours']:.1f}")
    for table in (schedules, runs, overdue, queues):
        console.print(table)


def default_api() -> str:
    """``$TIMEKEEPER_API``, else serve's address."""
    return os.environ.get("TIMEKEEPER_API") or DEFAULT_API
