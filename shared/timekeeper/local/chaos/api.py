"""The API driven during a fault campaign, as people and scripts call it, and its audit.

At seeded instants of the days of faults (their own random stream) the campaign calls the
REAL API function through an API Gateway proxy event with a development token, as a
well-behaved client: each request carries an Idempotency-Key, an answer the client may
retry (503 ``database_unavailable``, or the invocation dying: API Gateway's 502) is
retried at once with the same key, up to :data:`ATTEMPTS` times, and about one request in
three is sent a second time after its answer (a client that did not see the answer). An
accepted export or render is polled (``GET``) each simulated minute the campaign runs
until it is finished, as its requester's client does (the export's read also offers a
never-published export to the queue again). The requests, in turn:

* **Run now** of an accounting schedule (``POST /schedules/{id}/run``);
* **Run now** of a delivery (``POST /query-schedules/{id}/run``);
* an **export** of a saved query (``POST /queries/{id}/exports``, CSV);
* a **render** of a report (``POST /reports/{id}/renders``).

The audit (:func:`audit_api`): every request ended with a 2xx answer and none was a 500
(or another 5xx than the retryable ones); every answer to one key names the same run,
export or render; each Run now target has exactly one manual run per key the API
accepted, and no other; every export and render the API accepted is finished
(``succeeded``, or ``failed`` with its reason) when the campaign ends.
"""

from __future__ import annotations

import io
import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from timekeeper.db.sql import load_queries
from timekeeper.local.chaos.records import Check

SQL = load_queries("timekeeper.local.chaos", "api.sql")

#: Tries of one request when its answer is retryable (503, or the invocation died).
ATTEMPTS = 4
#: Answers a client retries: the database did not answer, or API Gateway's 502 when the
#: function invocation failed.
RETRYABLE = frozenset({502, 503})
#: The request kinds, in the order they take turns.
KINDS = ("schedule_run", "delivery_run", "export", "render")


@dataclass
class ApiRequest:
    """One request the campaign made (with its retries): kind, path, Idempotency-Key, the
    simulated instant, each try's HTTP status, and the id each 2xx answer named."""

    kind: str
    path: str
    key: str
    at: datetime
    workspace: str
    statuses: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)


@dataclass
class ApiTargets:
    """What the requests act on, and as whom: ``(workspace id, user id, roles)`` per kind and
    the target's id."""

    schedule: tuple[str, str] | None = None  # (workspace, schedule id)
    delivery: tuple[str, str] | None = None  # (workspace, query schedule id)
    query: tuple[str, str] | None = None  # (workspace, saved query id)
    report: tuple[str, str] | None = None  # (workspace, report id)
    person: str = "chaos-api"

    def of(self, kind: str) -> tuple[str, str] | None:
        """The ``(workspace, id)`` a request of ``kind`` acts on (None: the sample has none)."""
        return {"schedule_run": self.schedule, "delivery_run": self.delivery, "export": self.query,
                "render": self.report}[kind]


#: Who asks for the accounting schedule's Run now (a member of its workspace: :func:`enrol_api_person`).
SCHEDULE_PERSON = "chaos-api"
#: The development token's roles of the campaign's API person.
ROLES = "schedules:read,schedules:run,queries:read,queries:write,reports:read,reports:write"


def api_instants(days: int, per_day: int, start: datetime, seed: int) -> list[datetime]:
    """``per_day`` instants per day of faults (aware UTC, ascending, uniform over the
    days but their last hour), from the seed's own stream."""
    rng = random.Random(f"{seed}:api")
    span = max(days * 86400 - 3600, 0)
    return sorted(start + timedelta(seconds=rng.uniform(0, span)) for _ in range(days * per_day))


def find_targets(conn: Any, platform: Any) -> ApiTargets:
    """The requests' targets in the loaded samples: the load's first sweep (else any active
    accounting schedule), and in the Platform sample's first workspace the daily delivery
    of open invoices, the "Open invoices" query and the invoice report; the person is the
    workspace's analyst (a member who reads and writes queries and reports)."""
    targets = ApiTargets()
    row = conn.execute(SQL["first_accounting_schedule"]).fetchone()
    if row is not None:
        targets.schedule = (str(row["workspace_id"]), str(row["id"]))
    if platform is None:
        return targets
    workspace = platform.first_workspace
    targets.person = platform.users["analyst"]
    for attribute, block in (("delivery", "daily_open_invoices_delivery"), ("query", "open_invoices_query"),
                             ("report", "invoice_report")):
        found = conn.execute(SQL[block], (workspace,)).fetchone()
        if found is not None:
            setattr(targets, attribute, (str(workspace), str(found["id"])))
    return targets


def enrol_api_person(conn: Any, targets: ApiTargets, *, now: datetime) -> None:
    """Make the campaign's schedule person (``targets.person`` for Run now) an active member
    of the schedule target's workspace, as the API requires of every caller: the directory
    row of that accounting workspace (``snapshots_enabled`` off, created at ``now``, aware
    UTC, so the campaign plans no snapshot of it), the user and the membership, each only
    when missing (committed on ``conn``, the schema owner's)."""
    from timekeeper.platform import directory

    if targets.schedule is None:
        return
    workspace_id = uuid.UUID(targets.schedule[0])
    with conn.transaction():
        if directory.get_workspace(conn, workspace_id) is None:
            directory.create_workspace(conn, workspace_id=workspace_id, name="Chaos accounting", timezone="UTC",
                                       snapshots_enabled=False, now=now)
        user, membership = directory.member_with_user(conn, workspace_id=workspace_id, user_id=SCHEDULE_PERSON)
        if user is None:
            directory.upsert_user(conn, user_id=SCHEDULE_PERSON, display_name="Chaos campaign", now=now)
        if membership is None:
            directory.add_member(conn, workspace_id=workspace_id, user_id=SCHEDULE_PERSON, roles=(), now=now)


class ApiDriver:
    """Makes the campaign's API requests when their instants come (:meth:`tick`)."""

    def __init__(self, instants: list[datetime], targets: ApiTargets, seed: int,
                 invoke: Any) -> None:
        self.pending = list(instants)
        self.targets = targets
        self.rng = random.Random(f"{seed}:api-requests")
        self.invoke = invoke
        self.requests: list[ApiRequest] = []
        #: Accepted exports and renders not yet seen finished, and the polls made.
        self.outstanding: list[ApiRequest] = []
        self.polls = 0
        self._turn = 0

    def tick(self, now: datetime) -> bool:
        """Make every request due at ``now`` (the simulated instant); True when one was made
        (its messages may wait on a queue)."""
        made = False
        while self.pending and self.pending[0] <= now:
            self.pending.pop(0)
            kind = KINDS[self._turn % len(KINDS)]
            self._turn += 1
            request = self._request(kind, now)
            if request is None:
                continue
            self._send(request)
            if self.rng.random() < 1 / 3:  # the client did not see the answer: the same request again
                self._send(request)
            if request.kind in ("export", "render") and request.ids:
                self.outstanding.append(request)
            made = True
        for request in list(self.outstanding):
            made = True
            if self._poll(request) in ("succeeded", "failed"):
                self.outstanding.remove(request)
        return made

    def _poll(self, request: ApiRequest) -> str | None:
        """``GET`` the export or render ``request`` made; its state, or None when the read
        was refused (polled again next minute)."""
        from timekeeper.local.apigw import proxy_event_from_wsgi
        from timekeeper.local.stack import FunctionCrashed

        self.polls += 1
        target = request.ids[-1]
        path = (f"/exports/{target}" if request.kind == "export"
                else f"{request.path}/{target}")
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "wsgi.input": io.BytesIO(b""),
                   "HTTP_AUTHORIZATION": f"Bearer dev:{self.targets.person}:{request.workspace}:{ROLES}"}
        try:
            answer = self.invoke("api", proxy_event_from_wsgi(environ), timeout_s=29)
        except FunctionCrashed:
            return None
        if int(answer.get("statusCode", 200)) != 200:
            return None
        return json.loads(answer.get("body") or "{}").get("state")

    def _request(self, kind: str, now: datetime) -> ApiRequest | None:
        target = self.targets.of(kind)
        if target is None:
            return None
        path = {"schedule_run": "/schedules/{}/run", "delivery_run": "/query-schedules/{}/run",
                "export": "/queries/{}/exports", "render": "/reports/{}/renders"}[kind].format(target[1])
        request = ApiRequest(kind, path, f"chaos-{uuid.UUID(int=self.rng.getrandbits(128))}", now, target[0])
        self.requests.append(request)
        return request

    def _send(self, request: ApiRequest) -> None:
        """One request with its immediate retries: each try's status and answer's id."""
        from timekeeper.local.apigw import proxy_event_from_wsgi
        from timekeeper.local.stack import FunctionCrashed

        body = json.dumps({"format": "csv"}).encode() if request.kind == "export" else b""
        person = SCHEDULE_PERSON if request.kind == "schedule_run" else self.targets.person
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": request.path, "wsgi.input": io.BytesIO(body),
                   "CONTENT_LENGTH": str(len(body)),
                   "HTTP_AUTHORIZATION": f"Bearer dev:{person}:{request.workspace}:{ROLES}",
                   "HTTP_IDEMPOTENCY_KEY": request.key}
        if body:
            environ["CONTENT_TYPE"] = "application/json"
        for _ in range(ATTEMPTS):
            environ["wsgi.input"] = io.BytesIO(body)
            try:
                answer = self.invoke("api", proxy_event_from_wsgi(environ), timeout_s=29)
            except FunctionCrashed:
                request.statuses.append(502)  # the integration failed: API Gateway answers 502
                continue
            status = int(answer.get("statusCode", 200))
            request.statuses.append(status)
            if 200 <= status < 300:
                reply = json.loads(answer.get("body") or "{}")
                request.ids.append(str(reply.get("run_id") or reply.get("id")))
                return
            if status not in RETRYABLE:
                return


def audit_api(conn: Any, driver: ApiDriver | None) -> Any:
    """The invariants of the API requests (see the module's description); a
    :class:`timekeeper.local.chaos.records.Check`."""

    check = Check("API requests during faults answer once per key (no 500; retries, runs, exports, renders)")
    if driver is None:
        return check
    runs_by_target: dict[str, set[str]] = {}
    for request in driver.requests:
        check.checked += 1
        label = f"{request.kind} {request.key} at {request.at:%Y-%m-%d %H:%M}"
        bad = [s for s in request.statuses if s >= 500 and s not in RETRYABLE]
        if bad or not request.ids:
            check.failures.append(f"{label}: answers {request.statuses}")
            continue
        if len(set(request.ids)) != 1:
            check.failures.append(f"{label}: one key named {sorted(set(request.ids))}")
            continue
        if request.kind in ("schedule_run", "delivery_run"):
            runs_by_target.setdefault(request.path, set()).add(request.ids[0])
        else:
            block = "export_state" if request.kind == "export" else "render_state"
            row = conn.execute(SQL[block], (request.ids[0],)).fetchone()
            if row is None or row["state"] not in ("succeeded", "failed"):
                check.failures.append(f"{label}: {request.kind} {request.ids[0]} is "
                                      f"{row['state'] if row else 'missing'} at the end")
    for path, accepted in runs_by_target.items():
        schedule_id = path.split("/")[2]
        manual = {str(r["id"]) for r in conn.execute(
            SQL["manual_runs_of_schedule"], (schedule_id,)).fetchall()}
        if manual != accepted:
            check.failures.append(f"{path}: manual runs {len(manual)}, accepted {len(accepted)} "
                                  f"(extra {sorted(manual - accepted)[:3]}, missing {sorted(accepted - manual)[:3]})")
    return check

