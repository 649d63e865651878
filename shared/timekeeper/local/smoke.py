"""``python -m timekeeper smoke``: check a deployed stage end to end, as a client of its
public API only (HTTP, no database, no AWS credentials), right after ``cdk deploy``.

The steps, each printed on one line with its duration:

1. ``schedule`` -- ``POST /schedules``: an Accounting ``reconciliation.sweep`` due every
   minute (UTC), so its first occurrence is the next minute. The sweep only matches the
   workspace's unreconciled bank lines to posted entries (what its own sweeps do); in a
   workspace without bank lines it is ``skipped`` with ``nothing_to_reconcile``;
2. ``scheduled run`` -- polls ``GET /schedules/{id}`` until its latest run is finished: the
   dispatcher claimed it, the queue carried it, the consumer settled it. ``succeeded`` or
   ``skipped`` pass, ``failed`` fails;
3. ``query`` -- ``POST /queries``: a one-column, one-row invoices query;
4. ``recipient`` -- ``GET /members``: the workspace member whose address is ``--mail-to``
   (a delivery is sent to members, never to a bare address);
5. ``delivery`` -- ``POST /query-schedules`` (paused: it never runs by itself) then
   ``POST /query-schedules/{id}/run`` ("Run now");
6. ``delivery sent`` -- polls ``GET /query-schedules/{id}/runs`` until the recipient's
   outcome is ``sent`` (the provider's message id is printed) or a final failure;
7. ``cleanup`` -- whatever the check made is deleted, also when a step failed or the check
   was interrupted: the delivery, the query and the schedule (``DELETE``; their runs and
   history stay, as after any deletion, for the audit trail).

Without ``--mail-to`` steps 3-6 are skipped (said so in the summary). Every ``POST`` carries
an ``Idempotency-Key`` (a retried request creates nothing twice). ``--timeout`` bounds the
whole check (seconds; the polls stop at the deadline and the check fails).

Exit code: 0 when every step passed, 1 when one failed (its line says why: the API's status,
code and message, or what the run recorded), 2 for a usage error (argparse).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import quote, urlencode

from timekeeper.local.ops import ApiUnreachable, call_api

#: The default bound of the whole check (seconds): a minute until the occurrence, the
#: dispatcher's minute, a consumer's receive and a delivery's send, with room to spare.
DEFAULT_TIMEOUT_S = 300
#: Seconds between two reads of a run that has not finished.
POLL_INTERVAL_S = 2.0
#: The run states that are final.
FINISHED = frozenset({"succeeded", "skipped", "failed"})
#: A recipient's outcomes that are final.
RECIPIENT_FINAL = frozenset({"sent", "skipped", "failed"})


class StepFailed(Exception):
    """A step did not pass; the message says why (one line)."""


@dataclass(frozen=True)
class SmokeOptions:
    """One check: ``api`` (base URL; a deployed stage's ends in ``/v1``), ``token`` (a bearer
    token of a member with the roles the steps need, see docs/deploy.md), ``mail_to`` (the
    address of the member the delivery goes to; None: no delivery), ``timeout_s`` (seconds
    for the whole check), ``poll_interval_s`` (seconds between polls)."""

    api: str
    token: str
    mail_to: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    poll_interval_s: float = POLL_INTERVAL_S


@dataclass
class SmokeResult:
    """What a check did: ``steps`` ``(name, passed, seconds, text)`` in order (``passed``
    None: skipped) and ``made`` (``(kind, id)`` of what it created, emptied by the cleanup
    as each is deleted; what is left could not be deleted)."""

    steps: list[tuple[str, bool | None, float, str]] = field(default_factory=list)
    made: list[tuple[str, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether no step failed."""
        return all(ok is not False for _, ok, _, _ in self.steps)


class _Client:
    """The API as the check calls it: JSON in and out, a fresh ``Idempotency-Key`` per POST,
    any non-2xx answer a :class:`StepFailed` naming the status, code, field and message."""

    def __init__(self, options: SmokeOptions) -> None:
        self.options = options
        self.run_key = uuid.uuid4().hex

    def call(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201, 202, 204)) -> Any:
        headers = {"Idempotency-Key": f"smoke-{self.run_key}-{method}-{path}"} if method == "POST" else None
        try:
            status, answer = call_api(self.options.api, self.options.token, method, path, body, headers=headers)
        except ApiUnreachable as error:
            raise StepFailed(f"cannot reach the API: {error}") from None
        if status not in ok:
            answer = answer if isinstance(answer, dict) else {}
            where = f" (field {answer['field']})" if answer.get("field") else ""
            hint = " -- is the token valid and current?" if status == 401 else ""
            raise StepFailed(f"{method} {path}: {status} {answer.get('code', 'error')}{where}: "
                             f"{answer.get('message', '')}{hint}")
        return answer


def run_smoke(options: SmokeOptions, out: TextIO, *, sleep: Callable[[float], None] = time.sleep,
              monotonic: Callable[[], float] = time.monotonic) -> SmokeResult:
    """Run the check of the module docstring against ``options.api``, printing one line per
    step on ``out``; returns the :class:`SmokeResult` (never raises for an API's answer;
    KeyboardInterrupt propagates after the cleanup ran)."""
    client = _Client(options)
    result = SmokeResult()
    deadline = monotonic() + options.timeout_s
    name = f"smoke check {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"

    def step(title: str, action: Callable[[], str]) -> bool:
        started = monotonic()
        try:
            text, ok = action(), True
        except StepFailed as error:
            text, ok = str(error), False
        seconds = monotonic() - started
        result.steps.append((title, ok, seconds, text))
        print(f"{'ok  ' if ok else 'FAIL'} {title:<15} {seconds:6.1f}s  {text}", file=out, flush=True)
        return ok

    def skip(title: str, why: str) -> None:
        result.steps.append((title, None, 0.0, why))
        print(f"skip {title:<15} {0:6.1f}s  {why}", file=out, flush=True)

    def poll(what: str, read: Callable[[], str | None]) -> str:
        while True:
            done = read()
            if done is not None:
                return done
            if monotonic() + options.poll_interval_s > deadline:
                raise StepFailed(f"{what}: not finished within --timeout {options.timeout_s:g}s")
            sleep(options.poll_interval_s)

    state: dict[str, Any] = {}

    def create_schedule() -> str:
        made = client.call("POST", "/schedules", {
            "owner": "accounting", "work_kind": "reconciliation.sweep", "name": name,
            "recurrence": {"cron": "* * * * *", "timezone": "UTC"}})
        state["schedule"] = made["id"]
        result.made.append(("schedule", made["id"]))
        return f"{made['id']} due {made.get('next_due_at')}"

    def scheduled_run() -> str:
        path = f"/schedules/{quote(state['schedule'])}?history_limit=1&upcoming=1"

        def read() -> str | None:
            run = client.call("GET", path).get("latest_run")
            if not run or run.get("state") not in FINISHED:
                return None
            if run["state"] == "failed":
                raise StepFailed(f"run {run['id']} failed: {run.get('outcome_code')}: {run.get('error') or ''}")
            return f"run {run['id']} {run['state']} ({run.get('outcome_code')}), occurrence {run['occurrence_at']}"

        return poll("the scheduled run", read)

    def create_query() -> str:
        made = client.call("POST", "/queries", {
            "name": name, "description": "made and deleted by python -m timekeeper smoke",
            "definition": {"entity": "invoices", "columns": ["number"], "limit": 1}})
        query = made.get("query", made)
        state["query"] = query["id"]
        result.made.append(("query", query["id"]))
        return str(query["id"])

    def find_recipient() -> str:
        wanted = (options.mail_to or "").strip().lower()
        cursor: str | None = None
        while True:
            page = client.call("GET", "/members?" + urlencode({"limit": 200, **({"cursor": cursor} if cursor else {})}))
            for item in page.get("items", []):
                if (item.get("email") or "").strip().lower() == wanted:
                    state["recipient"] = item["user_id"]
                    return f"{item['user_id']} ({item.get('display_name') or ''})"
            cursor = page.get("next_cursor")
            if not cursor:
                raise StepFailed(f"no current, active member of the token's workspace has the address "
                                 f"{options.mail_to}: a delivery goes to members only")

    def run_delivery() -> str:
        made = client.call("POST", "/query-schedules", {
            "name": name, "recurrence": {"cron": "0 0 1 1 *", "timezone": "UTC"},
            "source": {"kind": "query", "query_id": state["query"]}, "format": "csv",
            "recipients": [state["recipient"]], "subject_template": "Timekeeper smoke check: {{ schedule_name }}",
            "body_template": '<p>A smoke check of this stage sent this. <a href="{{ link }}">The file</a>.</p>',
            "active": False})
        state["delivery"] = made["id"]
        result.made.append(("delivery", made["id"]))
        run = client.call("POST", f"/query-schedules/{quote(made['id'])}/run")
        state["delivery_run"] = run["run_id"]
        return f"{made['id']}: run {run['run_id']} requested"

    def delivery_sent() -> str:
        path = f"/query-schedules/{quote(state['delivery'])}/runs"

        def read() -> str | None:
            runs = [r for r in client.call("GET", path).get("items", [])
                    if str(r.get("run_id")) == state["delivery_run"]]
            mine = [d for r in runs for d in r.get("deliveries", []) if d.get("user_id") == state["recipient"]]
            if runs and runs[0].get("state") == "failed":
                raise StepFailed(f"run {state['delivery_run']} failed: {runs[0].get('outcome_code')}")
            if not mine or mine[0].get("status") not in RECIPIENT_FINAL:
                return None
            sent = mine[0]
            if sent["status"] != "sent":
                raise StepFailed(f"{options.mail_to}: {sent['status']} "
                                 f"({sent.get('skip_reason') or sent.get('error_code') or ''})")
            return f"sent to {options.mail_to}, provider message {sent.get('provider_message_id')}"

        return poll("the delivery", read)

    def cleanup() -> str:
        paths = {"schedule": "/schedules/{}", "query": "/queries/{}", "delivery": "/query-schedules/{}"}
        problems = []
        for kind, made_id in reversed(list(result.made)):
            try:
                client.call("DELETE", paths[kind].format(quote(made_id)), ok=(200, 204, 404))
                result.made.remove((kind, made_id))
            except StepFailed as error:
                problems.append(f"{kind} {made_id}: {error}")
        if problems:
            raise StepFailed("left behind: " + "; ".join(problems))
        return "deleted everything the check made" if state else "nothing to delete"

    try:
        if step("schedule", create_schedule) and step("scheduled run", scheduled_run):
            if not options.mail_to:
                skip("delivery", "no --mail-to: no delivery was sent")
            elif step("query", create_query) and step("recipient", find_recipient) and \
                    step("delivery", run_delivery):
                step("delivery sent", delivery_sent)
    finally:
        step("cleanup", cleanup)
    return result


def print_summary(result: SmokeResult, out: TextIO) -> None:
    """One closing line: passed or failed, how many steps and the total seconds."""
    total = sum(seconds for _, _, seconds, _ in result.steps)
    failed = [title for title, ok, _, _ in result.steps if ok is False]
    verdict = "smoke check passed" if not failed else f"smoke check FAILED at {', '.join(failed)}"
    print(f"{verdict}: {len(result.steps)} steps in {total:.1f}s", file=out, flush=True)
