"""``python -m timekeeper chaos``: the simulation under injected faults, then an audit.

The campaign runs :func:`timekeeper.local.simulate.run_simulation` (the local stack, the
REAL handlers, every pipeline, the sample tenant sets) with faults injected for the first
``days`` simulated days, then ``quiet_hours`` without faults for recovery:

- **crashes** at the product's named crash points (:mod:`timekeeper.faults`): each hit
  dies with probability ``crash_rate``. The invocation ends as a killed Lambda does: its
  open transactions roll back, its execution environment (cached connections, clients) is
  gone, and its SQS messages come back after their visibility timeout;
- **database disconnects** at the crash points (probability ``disconnect_rate``): every
  connection the product holds is cut under its driver, as in a failover or a network
  fault (the server rolls back what was in flight); the code carries on and meets the
  broken connection at its next statement;
- **database restarts**: ``db_restarts`` times per simulated day of faults (instants drawn
  from the seed, :func:`restart_instants`), the first crash point reached at or after the
  instant restarts the embedded server on its data directory (fast mode:
  :func:`timekeeper.local.embedded.restart_server`) while the product keeps running: every
  connection it holds, idle ones too, is broken and met at its next statement, and the
  simulation's own connection is reopened. A server named by ``DATABASE_URL``, or an
  embedded one other processes hold, is never restarted: the result counts the skipped
  restarts and says why (:attr:`ChaosResult.notes`);
- **duplicate deliveries**: each received SQS message is sent again with probability
  ``duplicate_rate`` (standard queues deliver at least once);
- **publish refusals**: each entry of a SendMessageBatch the product makes is refused with
  probability ``refuse_rate``, and a whole call fails with a tenth of it;
- **stalled processes**: a consumer invocation freezes as its first handler starts
  (probability ``stall_rate``) for longer than its lease; meanwhile a second execution
  environment receives the run again (a redelivery, its own connections) at the simulated
  instant the lease has expired and takes the run over; then the stalled process resumes,
  runs its handler and tries to write and settle with its old attempt. The fences must
  refuse it (:func:`_stalled_attempts`);
- **SES throttling and refusals**: the campaign's mailer (:class:`CountingMailer`, wrapping
  the local stack's) raises instead of submitting, with probability ``ses_throttle_rate``,
  a botocore ``ClientError`` ``Throttling`` ("Maximum sending rate exceeded.": deliveries
  retry the recipient, notice e-mails the message) and with ``ses_reject_rate`` a
  ``MessageRejected`` (a permanent refusal: never retried), for deliveries and owner
  notices alike;
- **connections cut at arbitrary moments**: the product reaches the database through a
  TCP proxy (:class:`timekeeper.local.cut_proxy.CuttingProxy`; the simulation's own
  connection goes direct) that, ``cut_rate`` times per wall-clock second on average while
  faults are injected, cuts one of the product's open connections chosen from the seed:
  in the middle of a statement, between a transaction's statements, during a COMMIT
  (whose outcome the product then does not know) or while the connection sits idle in
  its pool. Unlike the disconnects, nothing ties a cut to a crash point;
- **the API driven meanwhile**: ``api_requests`` a simulated day, at seeded instants, the
  REAL API function is called as a client retrying with its Idempotency-Key would (Run
  now of a schedule and of a delivery, an export, a render;
  :mod:`timekeeper.local.chaos_api`), under the same faults.

The samples get extra traffic (:func:`add_load`) so that a month meets every crash point
many times. Then :func:`audit` checks the invariants on the database, the queues and what the
campaign recorded, and the command prints a table and exits 1 when one fails:

1. every due occurrence of every schedule has exactly one run (or was counted in a run's
   skipped backlog), nothing is left due, and every run and snapshot run is terminal;
2. no run was executed by two attempts at once: each run's handler executions carry
   strictly increasing attempt numbers, and one that started while an earlier attempt's
   killed process still held its lease (it died before its settlement committed) would
   have run beside it; and a stalled attempt whose run was taken over never settled it
   (the run's outcome is a later attempt's);
3. every handler effect exists once, per its idempotency contract: batches opened and
   closed by succeeded runs only, one posting job per closed batch and every one finished,
   invoices prepared only by succeeded runs, each delivery message sent once (twice only
   where the process died between the provider's acceptance and the record: the one
   documented window), a rejected recipient recorded ``rejected`` and never submitted
   after its rejection, a throttled one sent in the end unless its run failed, a rejected
   notice message's notices closed, snapshot rows written once per published version;
4. failure streaks and pauses equal what the settled history implies;
5. the run and job queues are empty, and the dead-letter queues hold only the deliberately
   malformed messages.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

from timekeeper import clock, faults
from timekeeper.local.chaos_api import audit_api

CHAOS_DATABASE = "timekeeper_chaos"
_TOKEN = re.compile(r"/downloads/([A-Za-z0-9_.\-]+)")


@dataclass(frozen=True)
class ChaosOptions:
    """A campaign: ``days`` of faults from ``start`` (UTC midnight), then ``quiet_hours``
    without; rates are probabilities per crash-point hit (``crash_rate``,
    ``disconnect_rate``), per received message (``duplicate_rate``), per published
    message (``refuse_rate``) and per consumer invocation's first handler start
    (``stall_rate``: the process stalls past its lease while another takes the run over),
    per mail submission (``ses_throttle_rate``: SES answers ``Throttling``;
    ``ses_reject_rate``: ``MessageRejected``), and ``db_restarts`` restarts of the database
    server per simulated day of faults (a count, at instants drawn from the seed).
    ``each_point_once``: instead of random crashes, crash at the first hit of every crash
    point (one crash per point), for a deterministic test. ``load``: units of traffic
    added to the simulation's samples (see :func:`add_load`)."""

    days: int = 30
    seed: int = 1
    crash_rate: float = 0.05
    duplicate_rate: float = 0.10
    refuse_rate: float = 0.02
    disconnect_rate: float = 0.01
    quiet_hours: int = 6
    start: date = date(2027, 3, 1)
    database: str = CHAOS_DATABASE
    each_point_once: bool = False
    show_progress: bool = True
    load: int = 1
    #: Probability per consumer invocation's first handler start of a stall past the lease.
    stall_rate: float = 0.02
    #: Probability per mail submission (deliveries and owner notices) that SES throttles it.
    ses_throttle_rate: float = 0.1
    #: Probability per mail submission that SES refuses it permanently (``MessageRejected``).
    ses_reject_rate: float = 0.1
    #: Restarts of the database server per simulated day of faults (at seeded instants).
    db_restarts: int = 1
    #: Connections cut per wall-clock second while faults are injected (a Poisson process):
    #: the product reaches the database through a TCP proxy (:mod:`timekeeper.local.cut_proxy`)
    #: that cuts one of its open connections, chosen from the seed, at each event. 0: no proxy.
    cut_rate: float = 0.5
    #: API requests per simulated day of faults (Run now of a schedule and of a delivery, an
    #: export, a render, in turn; :mod:`timekeeper.local.chaos_api`).
    api_requests: int = 24


@dataclass
class Execution:
    """One handler execution: the run, its attempt number, the simulated instant it started,
    the lease it held until, the invocation it ran in, whether its settlement committed
    (its outcome recorded or its lease given back for a retry) and whether that invocation
    died."""

    run_id: UUID
    attempt: int
    started_at: datetime
    lease_until: datetime
    invocation: int
    settled: bool = False
    killed: bool = False


@dataclass
class Stall:
    """One stalled process: the run and attempt it held, the simulated instant it stalled
    (its attempt's instant), the instant a second environment received the run again, and
    whether that one took the run over (its start counted a later attempt)."""

    run_id: UUID
    attempt: int
    stalled_at: datetime
    resumed_at: datetime
    taken_over: bool = False


@dataclass
class Check:
    """One audited invariant: its name, whether it held, what was checked and the failures."""

    name: str
    checked: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.failures


@dataclass
class ChaosResult:
    """What a campaign injected (``faults`` by (kind, where)), how often each crash point
    was reached, the audit's checks and the simulation's own result."""

    options: ChaosOptions
    faults: collections.Counter = field(default_factory=collections.Counter)
    point_hits: collections.Counter = field(default_factory=collections.Counter)
    checks: list[Check] = field(default_factory=list)
    simulation: Any = None
    #: Well-formed messages in dead-letter queues whose consumer was killed on their receives
    #: (or whose final receive's invocation raised on an injected fault).
    dead_lettered_killed: int = 0
    #: Delivery messages sent again because the attempt that sent them died before recording them.
    resent_in_window: int = 0
    #: The campaign's API requests (:mod:`timekeeper.local.chaos_api`): answers by HTTP
    #: status over every try, and requests by kind.
    api_answers: collections.Counter = field(default_factory=collections.Counter)
    api_requests: collections.Counter = field(default_factory=collections.Counter)
    #: The stalled processes, in the order they stalled.
    stalls: list[Stall] = field(default_factory=list)
    #: The database restarts made: (simulated instant, the crash point it interrupted, seconds).
    restarts: list[tuple[datetime, str, float]] = field(default_factory=list)
    #: Restarts drawn but not made, and why (e.g. the server is ``DATABASE_URL``'s).
    skipped_restarts: int = 0
    #: What the campaign could not do as asked, in words (printed under the faults).
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.held for check in self.checks)

    def fault_totals(self) -> dict[str, int]:
        """Injected faults by kind (crash, disconnect, duplicate, refusal, stall,
        ses_throttle, ses_reject, db_restart, cut)."""
        totals: dict[str, int] = collections.Counter()
        for (kind, _), count in self.faults.items():
            totals[kind] += count
        return dict(totals)


class CountingMailer:
    """Wraps the communications adapter: every accepted message is recorded with the
    (run, recipient) its personal link names (read back with the link signer), its
    provider message id and the consumer invocation that sent it; an owner notice message
    (no link) with its address and the scheduled invocation that sent it (the queries
    dispatcher's people pass; ``invocation()`` numbers both kinds).

    ``refuse(kind)`` (optional; ``kind`` is ``"delivery"`` or ``"notice"``) is asked before
    each submission and returns ``None`` or a provider error code to raise instead, as SES
    does (a botocore ``ClientError`` of ``SendEmail``: ``Throttling`` "Maximum sending rate
    exceeded.", ``MessageRejected``); every refused submission is recorded in
    :attr:`refused` with the code, the invocation and how many messages had been accepted
    for that recipient before it."""

    #: The provider's message of each injected error code (SES's wording).
    MESSAGES = {"Throttling": "Maximum sending rate exceeded.", "MessageRejected": "Email address is not verified."}

    def __init__(self, inner: Any, signer: Any, invocation: Callable[[], int],
                 refuse: Callable[[str], str | None] | None = None) -> None:
        self.inner = inner
        self.signer = signer
        self.invocation = invocation
        self.refuse = refuse
        self.sends: dict[tuple[str, str], list[tuple[str, int]]] = collections.defaultdict(list)
        #: Owner notice messages (no personal link) by address, in order: (provider message
        #: id, the invocation that sent it).
        self.notice_sends: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
        #: Refused submissions by (run, recipient), or ("notice", address): (error code,
        #: invocation, messages accepted for that key before it), in order.
        self.refused: dict[tuple[str, str], list[tuple[str, int, int]]] = collections.defaultdict(list)

    def send(self, *, to: str, subject: str, html: str, text: str, headers: Any = None) -> str:
        """Submit through the wrapped adapter (or raise the refusal ``refuse`` chose) and
        record it; returns the provider's message id. Raises ``ClientError`` for a refusal."""
        match = _TOKEN.search(html)
        key: tuple[str, str] = ("?", to)
        notice = False
        if match:
            link = self.signer.verify(match.group(1), now=datetime(2000, 1, 1, tzinfo=UTC))
            key = (str(link.run_id), link.user_id)
        elif subject.startswith(NOTICE_SUBJECT):
            key, notice = ("notice", to), True
        code = self.refuse("notice" if notice else "delivery") if self.refuse is not None else None
        if code is not None:
            from botocore.exceptions import ClientError

            accepted = len(self.notice_sends.get(to, ())) if notice else len(self.sends.get(key, ()))
            self.refused[key].append((code, self.invocation(), accepted))
            raise ClientError({"Error": {"Code": code, "Message": self.MESSAGES.get(code, code)}}, "SendEmail")
        message_id = self.inner.send(to=to, subject=subject, html=html, text=text, headers=headers)
        if notice:
            self.notice_sends[to].append((message_id, self.invocation()))
            return message_id
        self.sends[key].append((message_id, self.invocation()))
        return message_id


#: How every owner notice message's subject begins (``timekeeper.reporting.notice_mail``).
NOTICE_SUBJECT = "[Timekeeper] "


class Campaign:
    """The fault injector and recorder of one campaign (hooks of the simulation)."""

    def __init__(self, options: ChaosOptions) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.result = ChaosResult(options)
        self.faults_until = datetime.combine(options.start, datetime.min.time(), tzinfo=UTC) + timedelta(
            days=options.days)
        self.executions: list[Execution] = []
        #: Consumer invocations that raised or died, and scheduled invocations during which
        #: a fault was injected (both numbered by :attr:`_invocations`).
        self.failed_invocations: set[int] = set()
        #: Consumer invocations running when the proxy cut a connection of the product (the
        #: cut may have been theirs: they may have lost their database without failing).
        self.cut_invocations: set[int] = set()
        #: Receives of a run's messages whose invocation died, by run id.
        self.killed_receives: collections.Counter = collections.Counter()
        #: Every receive of each message by a consumer, by SQS message id: (receive count,
        #: how it ended: ``acknowledged``, ``item failed``, ``killed`` or ``raised <error>``).
        self.receives: collections.defaultdict[str, list[tuple[int, str]]] = collections.defaultdict(list)
        #: The consumer invocation running now (0: none), and how many were made.
        self._invocation = 0
        self._invocations = 0
        #: Handler starts in the invocation running now.
        self._handlers = 0
        #: Whether a stalled process's takeover is running (no faults are injected in it).
        self._stalling = False
        self._stack: Any = None
        self._conn: Any = None
        self._open: list[Execution] = []
        self._crashed_points: set[str] = set()
        #: The entries the current thread's SendMessageBatch call dropped (a publish sends
        #: its calls from several threads at once; each call's two hooks run on its thread).
        self._refusals = threading.local()
        #: Guards the random draws and the fault counts of those concurrent calls.
        self._refusal_lock = threading.Lock()
        self.mailer: CountingMailer | None = None
        self._session_hooks: list[tuple[str, Callable[..., Any]]] = []
        #: The mail provider's refusals are drawn from their own seeded stream, and so are the
        #: restarts' instants, so adding them left every other fault's draws as they were.
        self._mail_rng = random.Random(f"{options.seed}:mail")
        #: The embedded server's data directory (None: the server is ``DATABASE_URL``'s, not
        #: restartable), set by :func:`run_chaos`; and the instants of the restarts to come.
        self.server_dir: Any = None
        self._restarts_at = restart_instants(options)
        self._restart_lock = threading.Lock()
        #: The TCP proxy in front of the database (``cut_rate`` > 0), the product's database
        #: URL before it, and the thread that cuts.
        self.proxy: Any = None
        #: The API requests of the campaign (``api_requests`` > 0), made as their instants come.
        self.api: Any = None
        self._direct_url: str | None = None
        self._proxied_url: str | None = None
        self._cutter: threading.Thread | None = None
        self._cutting = threading.Event()

    # ------------------------------------------------------------------ injection

    def active(self) -> bool:
        """Whether faults are injected now (the simulated clock is before the quiet period)."""
        return clock.now() < self.faults_until

    def __call__(self, point: str, context: Any) -> None:
        """The crash-point injector (see :func:`timekeeper.faults.install`)."""
        self.result.point_hits[point] += 1
        if point == "consumer.handler_started":
            from timekeeper.topology import PIPELINES

            lease = next((p.lease for p in PIPELINES.values() if p.owner == context.owner), timedelta(0))
            execution = Execution(context.run_id, context.attempt, context.now, context.now + lease,
                                  self._invocation)
            self.executions.append(execution)
            self._open.append(execution)
            self._handlers += 1
        elif point == "consumer.after_settle_commit":
            # Every execution this invocation started so far is settled: the point follows
            # the commit of their outcomes (or of their leases given back for a retry).
            for execution in self._open:
                execution.settled = True
        if not self.active() or self._stalling:
            return
        if self._restarts_at and clock.now() >= self._restarts_at[0] and self._restart(point):
            return
        if point == "consumer.handler_started" and self._handlers == 1 and self.options.stall_rate \
                and self.rng.random() < self.options.stall_rate:
            # The first handler of the invocation: the invocation's transaction holds no
            # row of its own yet, so the takeover is not blocked by the stalled process.
            self._stall(context)
            return
        if self.options.each_point_once:
            if point in self._crashed_points:
                return
            self._crashed_points.add(point)
            self._crash(point, context)
        draw = self.rng.random()
        if draw < self.options.crash_rate:
            self._crash(point, context)
        elif draw < self.options.crash_rate + self.options.disconnect_rate:
            self.result.faults[("disconnect", point)] += 1
            self._disconnect()

    def _stall(self, ctx: Any) -> None:
        """The consumer process holding ``ctx`` (a RunContext) freezes past its lease: a
        second execution environment (its own database connections, the clock at the lease's
        end plus a second) receives the run's message again and processes it through the
        real consumer handler, taking the run over; then this process resumes, its handler
        runs and it tries to write and settle under its old attempt. No fault is injected
        into the takeover."""
        from timekeeper.edge import adapters
        from timekeeper.schedules.messages import RunMessage
        from timekeeper.topology import pipeline_for_owner

        pipeline = pipeline_for_owner(ctx.owner)
        resumed_at = ctx.now + pipeline.lease + timedelta(seconds=1)
        stall = Stall(ctx.run_id, ctx.attempt, ctx.now, resumed_at)
        self.result.stalls.append(stall)
        self.result.faults[("stall", f"{pipeline.name} consumer past its lease")] += 1
        body = RunMessage(run_id=ctx.run_id, schedule_id=ctx.schedule_id, workspace_id=ctx.workspace_id,
                          owner=ctx.owner, work_kind=ctx.work_kind).model_dump_json()
        held = [provider.exchange(None) for provider in (adapters.database(), adapters.journal_database())]
        saved_clock = clock.installed()
        self._stalling = True
        try:
            clock.install(lambda: resumed_at)
            self._stack.sources[pipeline.name].deliver_copy(body, resumed_at)
        finally:
            self._stalling = False
            clock.install(saved_clock)
            # The takeover's environment is gone (its connections closed); the stalled one's
            # connections are its own again (the providers may be new if the takeover reset them).
            for provider, conn in zip((adapters.database(), adapters.journal_database()), held, strict=True):
                taken = provider.exchange(conn)
                if taken is not None and taken is not conn and not taken.closed:
                    taken.close()
        row = self._conn.execute("SELECT attempts FROM schedule_runs WHERE id = %s", (ctx.run_id,)).fetchone()
        stall.taken_over = row is not None and row["attempts"] > ctx.attempt

    def _restart(self, point: str) -> bool:
        """Restart the database server now, inside the product's step at ``point`` (its
        open transactions roll back; every connection it holds, idle ones too, is broken
        and met at its next statement), then reopen the simulation's own connection.
        Returns whether it restarted: not while the simulation's connection is inside a
        transaction, nor twice in one simulated minute (instants that fell where the product
        reached no crash point are spread over the next minutes' hits), nor when another
        thread took the instant."""
        import psycopg

        from timekeeper.local import embedded

        if self._conn is not None and self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return False
        with self._restart_lock:
            if not self._restarts_at or clock.now() < self._restarts_at[0]:
                return False
            if self.result.restarts and self.result.restarts[-1][0] >= clock.now():
                return False
            self._restarts_at.pop(0)
            seconds = embedded.restart_server(self.server_dir)
            if self._conn is not None:
                self._conn.reopen()
            self.result.restarts.append((clock.now(), point, seconds))
            self.result.faults[("db_restart", point)] += 1
        return True

    def refuse_mail(self, kind: str) -> str | None:
        """The mail provider's answer to one submission (``kind``: ``"delivery"`` or
        ``"notice"``; the :class:`CountingMailer`'s ``refuse`` hook): ``"Throttling"`` with
        probability ``ses_throttle_rate``, ``"MessageRejected"`` with ``ses_reject_rate``,
        otherwise None (accepted). Nothing is refused in the quiet hours or a takeover."""
        options = self.options
        if not self.active() or self._stalling or not (options.ses_throttle_rate or options.ses_reject_rate):
            return None
        with self._refusal_lock:
            draw = self._mail_rng.random()
            if draw < options.ses_throttle_rate:
                self.result.faults[("ses_throttle", f"{kind} submission")] += 1
                return "Throttling"
            if draw < options.ses_throttle_rate + options.ses_reject_rate:
                self.result.faults[("ses_reject", f"{kind} submission")] += 1
                return "MessageRejected"
        return None

    def _crash(self, point: str, context: Any) -> None:
        self.result.faults[("crash", point)] += 1
        raise faults.InjectedCrash(point)

    def _disconnect(self) -> None:
        """Cut every database connection the product holds (its run connection, the
        delivery journal, the renderer's), as a failover or a network fault does: the
        socket is shut down under the driver, so the server rolls back what was in flight
        and the code meets the broken connection at its next statement. Works through a
        pooler too (the simulation's own connection is not touched)."""
        import socket

        from timekeeper.edge import adapters

        for provider in (adapters.database, adapters.journal_database, adapters.renderer_database):
            conn = provider().current()
            if conn is None or conn.closed:
                continue
            with socket.fromfd(conn.pgconn.socket, socket.AF_UNIX, socket.SOCK_STREAM) as duplicate:
                try:
                    duplicate.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already gone

    def duplicate(self, message: dict[str, Any]) -> bool:
        """Whether to deliver ``message`` once more (an event source's duplicate hook)."""
        if self.active() and self.rng.random() < self.options.duplicate_rate:
            self.result.faults[("duplicate", "sqs message")] += 1
            return True
        return False

    def _refuse_entries(self, params: dict[str, Any], **_: Any) -> None:
        """Before a SendMessageBatch: drop refused entries (reported back after the call);
        sometimes fail the whole call. Safe for calls made at once from several threads."""
        from botocore.exceptions import ClientError

        self._refusals.pending = []
        if not self.active():
            return
        rate = self.options.refuse_rate
        entries = params.get("Entries", [])
        with self._refusal_lock:
            whole_call = self.rng.random() < rate / 10
            refused = [] if whole_call else [e for e in entries if self.rng.random() < rate]
            if whole_call:
                self.result.faults[("refusal", "whole SendMessageBatch call")] += 1
            elif refused:
                self.result.faults[("refusal", "SendMessageBatch entry")] += len(refused)
        if whole_call or (refused and len(refused) == len(entries)):
            raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "injected refusal"}},
                              "SendMessageBatch")
        if not refused:
            return
        params["Entries"] = [e for e in entries if e not in refused]
        self._refusals.pending = [e["Id"] for e in refused]

    def _report_refusals(self, parsed: dict[str, Any], **_: Any) -> None:
        """After a SendMessageBatch: report the dropped entries as failed, as SQS does."""
        pending = getattr(self._refusals, "pending", [])
        if pending:
            parsed.setdefault("Failed", []).extend(
                {"Id": entry_id, "SenderFault": False, "Code": "InternalError", "Message": "injected refusal"}
                for entry_id in pending)
            self._refusals.pending = []

    def _wrap_consumer(self, function: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        """Number each consumer invocation; mark its executions killed when it dies."""
        from timekeeper.local.stack import FunctionCrashed

        def invoke(event: dict[str, Any]) -> Any:
            # Saved and restored: a stalled invocation's takeover runs inside it.
            outer = (self._invocation, self._open, self._handlers)
            self._invocations += 1
            self._invocation, self._open, self._handlers = self._invocations, [], 0
            records = event.get("Records", [])
            try:
                response = function(event)
            except FunctionCrashed:
                self.failed_invocations.add(self._invocation)
                for execution in self._open:
                    execution.killed = True
                for record in records:
                    try:
                        self.killed_receives[str(json.loads(record["body"])["run_id"])] += 1
                    except (ValueError, KeyError, TypeError):
                        pass  # a malformed message
                self._record_receives(records, lambda _: "killed")
                raise
            except Exception as error:
                self.failed_invocations.add(self._invocation)
                ending = f"raised {type(error).__name__}"
                self._record_receives(records, lambda _: ending)
                raise
            finally:
                self._invocation, self._open, self._handlers = outer
            failed = {f.get("itemIdentifier") for f in (response or {}).get("batchItemFailures", [])}
            self._record_receives(records, lambda mid: "item failed" if mid in failed else "acknowledged")
            return response

        return invoke

    def _wrap_scheduled(self, scheduled: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        """Number each scheduled invocation (dispatcher partitions, the planner) as consumer
        invocations are numbered; one during which any fault was injected (a cut, a crash,
        a restart: the stack reports its failure as counts, never raises) counts as one
        that may have lost its database (:meth:`lost_database`)."""

        def invoke(*args: Any, **kwargs: Any) -> dict[str, Any]:
            outer = self._invocation
            self._invocations += 1
            self._invocation = self._invocations
            before = self.faults_injected()
            try:
                return scheduled(*args, **kwargs)
            finally:
                if self.faults_injected() != before:
                    self.failed_invocations.add(self._invocation)
                self._invocation = outer

        return invoke

    def _record_receives(self, records: list[dict[str, Any]], ending: Callable[[str], str]) -> None:
        for record in records:
            try:
                count = int(record.get("attributes", {}).get("ApproximateReceiveCount") or 0)
            except (TypeError, ValueError):
                count = 0
            self.receives[record.get("messageId", "")].append((count, ending(record.get("messageId", ""))))

    def faults_injected(self) -> int:
        """How many faults of every kind the campaign has injected so far (any thread)."""
        return sum(dict(self.result.faults).values())  # a copy: other threads add faults

    def lost_database(self, invocation: int) -> bool:
        """Whether invocation ``invocation`` (a consumer's, or a scheduled one's: numbered
        alike) died, raised, ran while the proxy cut a connection of the product, or (a
        scheduled one) ran while any fault was injected: what it wrote after its last commit
        may be lost though it lived (the documented window of a send whose record did not
        commit)."""
        return invocation in self.failed_invocations or invocation in self.cut_invocations

    def lost_final_receive(self, message_id: str) -> bool:
        """Whether the last receive of message ``message_id`` ended with its invocation
        killed or raising (an injected crash, disconnect or restart): SQS counted the
        receive, so the message may rest in the dead-letter queue without a fault of the
        product's."""
        history = self.receives.get(message_id)
        return bool(history) and history[-1][1] not in ("acknowledged", "item failed")

    # ------------------------------------------------------------------ simulation hooks

    def started(self, stack: Any, conn: Any) -> None:
        """Arm the campaign on the started local stack (``conn``: the simulation's own
        connection, which receives the extra load's schedules)."""
        import boto3

        from timekeeper import edge
        from timekeeper.edge import adapters

        self._stack, self._conn = stack, conn
        add_load(conn, stack, units=self.options.load, now=clock.now())
        if self.options.api_requests:
            from timekeeper.local.chaos_api import ApiDriver, api_instants, enrol_api_person, find_targets
            from timekeeper.local.stack import invoke_quietly

            first = datetime.combine(self.options.start, datetime.min.time(), tzinfo=UTC)
            targets = find_targets(conn, stack.platform)
            enrol_api_person(conn, targets, now=clock.now())
            self.api = ApiDriver(api_instants(self.options.days, self.options.api_requests, first, self.options.seed),
                                 targets, self.options.seed, invoke_quietly)
        for source in stack.sources.values():
            source.duplicate = self.duplicate
            source.function = self._wrap_consumer(source.function)
        stack._scheduled = self._wrap_scheduled(stack._scheduled)  # noqa: SLF001 - its own stack's invocations
        session = boto3._get_default_session()  # noqa: SLF001 - the clients the handlers create come from it
        self._session_hooks = [("provide-client-params.sqs.SendMessageBatch", self._refuse_entries),
                               ("after-call.sqs.SendMessageBatch", self._report_refusals)]
        for event, handler in self._session_hooks:
            session.events.register(event, handler)
        if self.options.cut_rate > 0:
            self._start_cutting()
        edge.reset()  # the handlers' clients are created again, with the hooks
        self.mailer = CountingMailer(adapters.mailer(), adapters.link_signer(), lambda: self._invocation,
                                     refuse=self.refuse_mail)
        adapters.install_mailer(self.mailer)
        self._check_restartable()
        # A disconnect makes psycopg warn about every rollback it could not send: expected here.
        logging.getLogger("psycopg").setLevel(logging.ERROR)
        faults.install(self)

    def _start_cutting(self) -> None:
        """Put the cutting proxy between the product and its database (the product's
        ``DATABASE_URL`` names the proxy from now on) and start the thread that cuts."""
        from timekeeper import settings
        from timekeeper.local.cut_proxy import CuttingProxy, through, upstream_of

        self._direct_url = os.environ[settings.DATABASE_URL_VARIABLE]
        self.proxy = CuttingProxy(upstream_of(self._direct_url))
        self._proxied_url = through(self._direct_url, self.proxy.port)
        os.environ[settings.DATABASE_URL_VARIABLE] = self._proxied_url
        settings.settings.cache_clear()
        self._cutting.clear()
        self._cutter = threading.Thread(target=self._cut_connections, name="timekeeper-chaos-cutter", daemon=True)
        self._cutter.start()

    def _cut_connections(self) -> None:
        """The cutter: waits an exponential time (mean ``1 / cut_rate`` wall seconds), then,
        while faults are injected and no takeover runs, cuts one open connection of the
        proxy chosen from the campaign's seed (its own stream)."""
        rng = random.Random(f"{self.options.seed}:cuts")
        while not self._cutting.wait(rng.expovariate(self.options.cut_rate)):
            live = self.proxy.live()
            if not live or not self.active() or self._stalling:
                continue
            invocation = self._invocation
            if self.proxy.cut(rng.choice(live)):
                with self._refusal_lock:
                    self.result.faults[("cut", "database connection (TCP proxy)")] += 1
                    if invocation:
                        self.cut_invocations.add(invocation)

    def _stop_cutting(self) -> None:
        """Stop the cutter, give the product its direct database URL back and close the
        proxy (idempotent)."""
        from timekeeper import settings

        self._cutting.set()
        if self._cutter is not None:
            self._cutter.join(10)
            self._cutter = None
        if self._direct_url is not None:
            # (unless the local stack gave the environment back already, when it stopped)
            if os.environ.get(settings.DATABASE_URL_VARIABLE) == self._proxied_url:
                os.environ[settings.DATABASE_URL_VARIABLE] = self._direct_url
                settings.settings.cache_clear()
            self._direct_url = None
        if self.proxy is not None:
            self.proxy.close()

    def minute(self, stack: Any, conn: Any, now: datetime) -> bool:
        """Each simulated minute the simulation runs: make the API requests due by ``now``;
        True when one was made (the simulation then polls every queue)."""
        return self.api.tick(now) if self.api is not None else False

    def _check_restartable(self) -> None:
        """Drop the restarts when the server cannot be restarted safely: it is
        ``DATABASE_URL``'s (another server, perhaps shared), or other processes hold the
        embedded one; the result says how many were skipped and why."""
        from timekeeper.local import embedded

        if not self._restarts_at:
            return
        reason = None
        if self.server_dir is None:
            reason = "the database server is DATABASE_URL's, which the campaign does not restart"
        elif holders := embedded.other_holders(self.server_dir):
            reason = f"the embedded server is shared with the processes {', '.join(map(str, holders))}"
        if reason is not None:
            self.result.skipped_restarts = len(self._restarts_at)
            self.result.notes.append(f"{len(self._restarts_at)} database restart(s) skipped: {reason}.")
            self._restarts_at = []

    def finished(self, stack: Any, conn: Any, simulation: Any) -> None:
        """Disarm, then audit the final state (before the local stack stops)."""
        import boto3

        faults.install(None)
        self._stop_cutting()  # the audit reads the database directly
        logging.getLogger("psycopg").setLevel(logging.NOTSET)
        session = boto3._get_default_session()  # noqa: SLF001
        for event, handler in self._session_hooks:
            session.events.unregister(event, handler)
        self.result.simulation = simulation
        if self.api is not None:
            for request in self.api.requests:
                self.result.api_requests[request.kind] += 1
                self.result.api_answers.update(request.statuses)
        self.result.checks = audit(conn, stack, self)

    def disarm(self) -> None:
        """Remove the injector and the proxy (idempotent; after the campaign, failed or not)."""
        faults.install(None)
        self._stop_cutting()


def restart_instants(options: ChaosOptions) -> list[datetime]:
    """The simulated instants (aware UTC, ascending) of the campaign's database restarts:
    ``db_restarts`` per day of faults, uniform over the days of faults but their last hour,
    from the campaign's seed (their own stream). Each restart happens at the first crash
    point the product reaches at or after its instant."""
    rng = random.Random(f"{options.seed}:restarts")
    start = datetime.combine(options.start, datetime.min.time(), tzinfo=UTC)
    span = max(options.days * 86400 - 3600, 0)
    return sorted(start + timedelta(seconds=rng.uniform(0, span)) for _ in range(options.days * options.db_restarts))


def add_load(conn: Any, stack: Any, *, units: int, now: datetime) -> int:
    """Add ``units`` units of traffic to the loaded samples, from ``now`` (aware UTC): per
    unit, a reconciliation sweep every 30 minutes in each accounting workspace, and an
    hourly delivery of the "Open invoices" query in the Platform sample's first workspace
    to its admin, analyst, viewer and the user without an address (the viewer's address
    bounces in the sample, so after its first delivery it is suppressed: every run still
    makes at least two sends, the admin's and the analyst's, and a skip). Returns the
    schedules created."""
    from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule
    from timekeeper.schedules import service

    created = 0
    workspaces = [r["workspace_id"] for r in conn.execute(
        "SELECT DISTINCT workspace_id FROM schedules WHERE owner = 'accounting' ORDER BY 1").fetchall()]
    platform = stack.platform
    query = conn.execute("SELECT id FROM saved_queries WHERE workspace_id = %s AND name = 'Open invoices'",
                         (platform.first_workspace,)).fetchone()
    for unit in range(units):
        for workspace_id in workspaces:
            service.create_schedule(conn, workspace_id=workspace_id, owner="accounting",
                                    work_kind="reconciliation.sweep", actor="chaos-load", now=now,
                                    recurrence={"cron": "*/30 * * * *", "timezone": "UTC"},
                                    name=f"load {unit}: sweep every 30 minutes")
            created += 1
        if query is not None:
            users = platform.users
            create_query_schedule(
                conn, workspace_id=platform.first_workspace, actor=users["analyst"],
                new=NewQuerySchedule(name=f"load {unit}: hourly open invoices",
                                     recurrence={"cron": "5 * * * *", "timezone": "UTC"},
                                     source=Source("query", query["id"]), format="csv",
                                     recipients=[users["admin"], users["analyst"], users["viewer"], users["no_email"]],
                                     subject_template="Open invoices {{ run_date }}",
                                     body_template='<p>{{ row_count }} rows: <a href="{{ link }}">download</a></p>'),
                now=now)
            created += 1
    return created


def run_chaos(options: ChaosOptions, console: Any = None) -> ChaosResult:
    """Run the campaign ``options`` describes; return its :class:`ChaosResult` (the audit's
    checks included). The database ``options.database`` is created afresh and kept."""
    from timekeeper.local.embedded import default_data_dir, state_home
    from timekeeper.local.simulate import SimulationOptions, run_simulation

    campaign = Campaign(options)
    if not os.environ.get("DATABASE_URL"):  # the local stack starts (or reuses) the embedded server
        campaign.server_dir = default_data_dir()
    home = state_home()
    simulation = SimulationOptions(
        start=options.start, days=options.days, extra_minutes=options.quiet_hours * 60, seed=7, outages=(), poison=1,
        show_progress=options.show_progress, database=options.database, delivery_dir=home / "chaos-deliveries")
    try:
        run_simulation(simulation, console, hooks=campaign)
    finally:
        campaign.disarm()
    return campaign.result


# ---------------------------------------------------------------------- audit


def audit(conn: Any, stack: Any, campaign: Campaign) -> list[Check]:
    """Check the campaign's invariants (see the module docstring); returns one
    :class:`Check` per invariant."""
    return [_occurrences(conn), _terminal(conn), _no_concurrent_execution(campaign), _stalled_attempts(conn, campaign),
            _accounting_effects(conn),
            _delivery_effects(conn, campaign), _snapshot_effects(conn), _streaks(conn, campaign),
            _queues(conn, stack, campaign), audit_api(conn, campaign.api)]


def _occurrences(conn: Any) -> Check:
    """Every due occurrence of every schedule has exactly one run, or was counted in a
    run's skipped backlog; an active schedule has nothing left due."""
    from timekeeper.schedules.recurrence import parse_rule_text

    check = Check("every due occurrence has exactly one run (or is counted as skipped backlog)")
    last_pass = conn.execute("SELECT max(queued_at) AS at FROM schedule_runs").fetchone()["at"]
    pauses = {r["schedule_id"]: r["at"] for r in conn.execute(
        "SELECT schedule_id, min(at) AS at FROM schedule_events WHERE kind = 'paused' GROUP BY 1").fetchall()}
    runs: dict[UUID, list[dict[str, Any]]] = collections.defaultdict(list)
    for run in conn.execute("""SELECT schedule_id, occurrence_at, skipped_backlog, first_skipped_at
                                 FROM schedule_runs WHERE trigger = 'scheduled' ORDER BY occurrence_at""").fetchall():
        runs[run["schedule_id"]].append(run)
    for schedule in conn.execute("""SELECT id, name, recurrence::text AS rule_text, status, next_due_at
                                      FROM schedules WHERE deleted_at IS NULL""").fetchall():
        mine = runs.get(schedule["id"], [])
        if schedule["status"] == "active" and schedule["next_due_at"] is not None \
                and schedule["next_due_at"] <= last_pass:
            check.failures.append(f"{schedule['name']}: still due at {schedule['next_due_at']:%Y-%m-%d %H:%M}")
        if not mine:
            continue
        first = mine[0]["first_skipped_at"] or mine[0]["occurrence_at"]
        until = min(pauses.get(schedule["id"], last_pass), last_pass)
        until = max(until, mine[-1]["occurrence_at"])
        covered: collections.Counter = collections.Counter()
        for run in mine:
            covered[run["occurrence_at"]] += 1
        backlog = [(r["first_skipped_at"], r["occurrence_at"], r["skipped_backlog"]) for r in mine
                   if r["skipped_backlog"]]
        counted = collections.Counter()
        rule = parse_rule_text(schedule["rule_text"])
        for occurrence in rule.occurrences_after(first - timedelta(microseconds=1)):
            if occurrence.at > until:
                break
            check.checked += 1
            windows = [i for i, (low, high, _) in enumerate(backlog) if low <= occurrence.at < high]
            total = covered[occurrence.at] + len(windows)
            for i in windows:
                counted[i] += 1
            if total != 1:
                check.failures.append(f"{schedule['name']}: occurrence {occurrence.at:%Y-%m-%d %H:%M} has "
                                      f"{covered[occurrence.at]} runs and is in {len(windows)} skipped backlogs")
        for i, (low, _high, skipped) in enumerate(backlog):
            if counted[i] != skipped:
                check.failures.append(f"{schedule['name']}: backlog from {low:%Y-%m-%d %H:%M} counts {skipped}, "
                                      f"the rule has {counted[i]}")
    return check


def _terminal(conn: Any) -> Check:
    """Every run and every snapshot run is terminal, or waits for a documented reason."""
    check = Check("every run is terminal (or explained)")
    check.checked = conn.execute("SELECT count(*) AS n FROM schedule_runs").fetchone()["n"]
    for run in conn.execute("""SELECT r.id, s.name, r.state, r.attempts FROM schedule_runs r
                                 JOIN schedules s ON s.id = r.schedule_id
                                WHERE r.state IN ('queued', 'running')""").fetchall():
        check.failures.append(f"run {run['id']} of {run['name']} is {run['state']} (attempts {run['attempts']})")
    check.checked += conn.execute("SELECT count(*) AS n FROM snapshot_runs").fetchone()["n"]
    for run in conn.execute("""SELECT id, snapshot_type, period, state FROM snapshot_runs
                                WHERE state IN ('planned', 'queued', 'running')""").fetchall():
        check.failures.append(f"snapshot run {run['id']} ({run['snapshot_type']} {run['period']:%Y-%m}) "
                              f"is {run['state']}")
    return check


def _no_concurrent_execution(campaign: Campaign) -> Check:
    """No two attempts of one run executed at once."""
    check = Check("no run executed concurrently (fencing: attempts increase, killed leases respected)")
    by_run: dict[UUID, list[Execution]] = collections.defaultdict(list)
    for execution in campaign.executions:
        by_run[execution.run_id].append(execution)
    for run_id, executions in by_run.items():
        check.checked += len(executions)
        for earlier, later in zip(executions, executions[1:], strict=False):
            if later.attempt <= earlier.attempt:
                check.failures.append(f"run {run_id}: attempt {later.attempt} executed after attempt "
                                      f"{earlier.attempt}")
            if earlier.killed and not earlier.settled and later.started_at < earlier.lease_until:
                check.failures.append(f"run {run_id}: attempt {later.attempt} started at {later.started_at} while "
                                      f"the killed attempt {earlier.attempt} held its lease until "
                                      f"{earlier.lease_until}")
    return check


def _stalled_attempts(conn: Any, campaign: Campaign) -> Check:
    """A stalled attempt whose run was taken over acted no more: the run's outcome is not
    its settlement (a settlement records the attempt's instant as ``finished_at``, and the
    stalled attempt's instant is earlier than every later attempt's), and no delivery
    journal row carries its attempt (it stalled before its first write, so any such row
    was written after it lost its lease). The effect checks count its other writes."""
    check = Check("a stalled attempt never settles or writes after its run was taken over")
    for stall in campaign.result.stalls:
        if not stall.taken_over:
            continue
        check.checked += 1
        run = conn.execute("SELECT state, attempts, finished_at FROM schedule_runs WHERE id = %s",
                           (stall.run_id,)).fetchone()
        if run["finished_at"] is not None and run["finished_at"] <= stall.stalled_at:
            check.failures.append(f"run {stall.run_id}: settled {run['state']} at {run['finished_at']} by the "
                                  f"stalled attempt {stall.attempt} after attempt {run['attempts']} took it over")
        written = conn.execute("""
            SELECT (SELECT count(*) FROM query_deliveries WHERE run_id = %(run)s AND attempt = %(attempt)s)
                 + (SELECT count(*) FROM query_delivery_outbox WHERE run_id = %(run)s
                       AND claimed_attempt = %(attempt)s) AS n""",
                               {"run": stall.run_id, "attempt": stall.attempt}).fetchone()["n"]
        if written:
            check.failures.append(f"run {stall.run_id}: {written} delivery journal rows written by the stalled "
                                  f"attempt {stall.attempt} after the run was taken over")
    return check


def _accounting_effects(conn: Any) -> Check:
    """Batches opened and closed only by succeeded runs and as they report; one finished
    posting job per closed auto-posting batch; invoices prepared only by succeeded runs."""
    check = Check("accounting effects exist once (batches, posting jobs, invoices)")
    for row in conn.execute("""
            SELECT b.id, b.name, r.state, r.detail -> 'opened_batch' ->> 'id' AS reported
              FROM batches b LEFT JOIN schedule_runs r ON r.id = b.opened_by_run_id
             WHERE b.opened_by_run_id IS NOT NULL""").fetchall():
        check.checked += 1
        if row["state"] != "succeeded" or row["reported"] != str(row["id"]):
            check.failures.append(f"batch {row['name']} opened by a run that is {row['state']} and reports "
                                  f"{row['reported']}")
    for row in conn.execute("""
            SELECT r.id, r.detail -> 'opened_batch' ->> 'id' AS reported,
                   (SELECT count(*) FROM batches b WHERE b.opened_by_run_id = r.id) AS opened
              FROM schedule_runs r
             WHERE r.work_kind = 'batch.roll' AND r.state = 'succeeded'""").fetchall():
        check.checked += 1
        if (row["reported"] is not None) != (row["opened"] == 1):
            check.failures.append(f"roll run {row['id']} reports {row['reported']} and opened {row['opened']}")
    for row in conn.execute("""
            SELECT b.id, b.name, b.status, count(j.id) AS jobs, min(j.status) AS job_status
              FROM batches b LEFT JOIN posting_jobs j ON j.batch_id = b.id
             WHERE b.status <> 'open' AND b.auto_post GROUP BY b.id, b.name, b.status""").fetchall():
        check.checked += 1
        if row["jobs"] != 1 or row["job_status"] != "succeeded" or row["status"] != "posted":
            check.failures.append(f"closed batch {row['name']} is {row['status']} with {row['jobs']} posting "
                                  f"job(s) ({row['job_status']})")
    for row in conn.execute("""
            SELECT i.id, r.state FROM draft_invoices i LEFT JOIN schedule_runs r ON r.id = i.prepared_by_run_id
             WHERE i.prepared_by_run_id IS NOT NULL""").fetchall():
        check.checked += 1
        if row["state"] != "succeeded":
            check.failures.append(f"invoice {row['id']} prepared by a run that is {row['state']}")
    return check


def _delivery_effects(conn: Any, campaign: Campaign) -> Check:
    """Each delivery message sent once per (run, recipient), and the recorded one is among
    the sends. An extra message is allowed only in the documented window: the provider
    accepted it, and the invocation that sent it died or lost its database before the
    message id was recorded (the next attempt cannot know it went out). Every ``sent`` row
    is backed by a send, and every succeeded delivery run's recipients are sent, skipped, or
    refused permanently by the provider (``failed`` with a permanent ``error_code``).

    The mail provider's refusals (:meth:`Campaign.refuse_mail`): a recipient the provider
    rejected is recorded ``failed`` / ``rejected`` and never submitted again after the
    recorded rejection (only an attempt that died before recording its rejection is
    followed by another submission); a throttled recipient is retried until it is sent
    (once, as above), skipped or refused, unless its run failed; an owner notice message
    the provider rejected keeps no message id and its notices are closed (never retried).
    """
    from timekeeper.reporting.delivery import PERMANENT_REFUSALS

    check = Check("delivery messages sent once per (run, recipient) (twice only in the documented window)")
    sends = campaign.mailer.sends if campaign.mailer else {}
    recorded = {(str(r["run_id"]), r["user_id"]): r["provider_message_id"] for r in conn.execute(
        "SELECT run_id, user_id, provider_message_id FROM query_delivery_outbox WHERE run_id IS NOT NULL").fetchall()}
    # Owner notice messages (no run): each one recorded was sent once; one sent and not
    # recorded is the documented window (the pass that sent it lost its database before
    # the record committed; the next pass sends it again).
    notices = collections.defaultdict(set)
    for r in conn.execute("""SELECT u.email, o.provider_message_id FROM query_delivery_outbox o
                               JOIN users u ON u.id = o.user_id
                              WHERE o.run_id IS NULL AND o.provider_message_id IS NOT NULL""").fetchall():
        notices[r["email"]].add(r["provider_message_id"])
    notice_sends = campaign.mailer.notice_sends if campaign.mailer else {}
    for address, made in notice_sends.items():
        check.checked += 1
        recorded_ids = notices.get(address, set())
        sent_ids = [message_id for message_id, _ in made]
        unexplained = [message_id for message_id, invocation in made
                       if message_id not in recorded_ids and not campaign.lost_database(invocation)]
        if unexplained or not recorded_ids <= set(sent_ids) or len(sent_ids) != len(set(sent_ids)):
            check.failures.append(f"notice messages to {address}: {len(made)} sent, {len(recorded_ids)} recorded, "
                                  f"{len(unexplained)} unrecorded by passes that kept their database")
        campaign.result.resent_in_window += len(made) - len(recorded_ids)
    for (run_id, user_id), made in sends.items():
        check.checked += 1
        kept = recorded.get((run_id, user_id))
        unrecorded_in_failed = sum(1 for message_id, invocation in made
                                   if message_id != kept and campaign.lost_database(invocation))
        recorded_a_send = kept in {m for m, _ in made} or (kept is None and unrecorded_in_failed == len(made))
        if run_id == "?" or len(made) - unrecorded_in_failed > 1 or not recorded_a_send:
            check.failures.append(f"run {run_id} recipient {user_id}: {len(made)} messages sent, "
                                  f"{unrecorded_in_failed} by attempts that died or lost their database before "
                                  "recording them")
        campaign.result.resent_in_window += len(made) - 1
    deliveries = {}
    for row in conn.execute("""SELECT d.run_id, d.user_id, d.status, d.error_code, r.state AS run_state
                                 FROM query_deliveries d JOIN schedule_runs r ON r.id = d.run_id""").fetchall():
        check.checked += 1
        key = (str(row["run_id"]), row["user_id"])
        deliveries[key] = row
        if row["status"] == "sent" and not sends.get(key):
            check.failures.append(f"run {key[0]} recipient {key[1]}: recorded sent, never sent")
    refused = campaign.mailer.refused if campaign.mailer else {}
    for key, refusals in refused.items():
        if key[0] == "notice":
            continue  # the notice messages' outbox rows are checked below
        check.checked += 1
        row = deliveries.get(key)
        rejections = [r for r in refusals if r[0] == "MessageRejected"]
        lived = [r for r in rejections if not campaign.lost_database(r[1])]
        if row is not None and row["status"] == "failed" and row["error_code"] == "rejected":
            if refusals[-1][0] != "MessageRejected" or len(sends.get(key, ())) > refusals[-1][2]:
                check.failures.append(f"run {key[0]} recipient {key[1]}: recorded rejected, submitted again after "
                                      f"the rejection")
            if len(lived) > 1:
                check.failures.append(f"run {key[0]} recipient {key[1]}: rejected {len(lived)} times by attempts "
                                      f"that lived (a permanent refusal was retried)")
        elif lived:
            check.failures.append(f"run {key[0]} recipient {key[1]}: rejected by an attempt that lived, recorded "
                                  f"{row['status'] + '/' + str(row['error_code']) if row else 'nothing'}")
        elif row is None or (row["status"] == "failed" and row["error_code"] not in PERMANENT_REFUSALS.values()):
            state = row["run_state"] if row is not None else conn.execute(
                "SELECT state FROM schedule_runs WHERE id = %s", (key[0],)).fetchone()["state"]
            if state != "failed":
                check.failures.append(f"run {key[0]} recipient {key[1]}: refused {len(refusals)} times "
                                      f"({refusals[-1][0]} last), left {row['status'] if row else 'unrecorded'} "
                                      f"by a run that is {state}")
    for row in conn.execute("""
            SELECT o.communication_key, o.provider_message_id, u.email,
                   (SELECT count(*) FROM owner_notices n
                     WHERE n.mail_key = o.communication_key AND n.mailed_at IS NULL) AS open
              FROM query_delivery_outbox o JOIN users u ON u.id = o.user_id
             WHERE o.run_id IS NULL AND o.last_error = 'rejected'""").fetchall():
        check.checked += 1
        seen = [r for r in refused.get(("notice", row["email"]), []) if r[0] == "MessageRejected"]
        if row["provider_message_id"] is not None or row["open"] or not seen:
            check.failures.append(f"notice message {row['communication_key']}: recorded rejected with "
                                  f"{row['open']} notices left open, message id {row['provider_message_id']}, "
                                  f"{len(seen)} rejections made")
    for row in conn.execute("""
            SELECT r.id, count(*) FILTER (WHERE d.status NOT IN ('sent', 'skipped')
                                              AND NOT COALESCE(d.error_code = ANY(%s::text[]), false)) AS open
              FROM schedule_runs r JOIN query_deliveries d ON d.run_id = r.id
             WHERE r.state = 'succeeded' GROUP BY r.id""", (sorted(PERMANENT_REFUSALS.values()),)).fetchall():
        check.checked += 1
        if row["open"]:
            check.failures.append(f"succeeded delivery run {row['id']} has {row['open']} undelivered recipients")
    return check


_SNAPSHOT_TABLES = {"membership_counts": "snapshot_membership_counts", "ar_aging": "snapshot_ar_aging",
                    "selftest": "snapshot_selftest_rows"}


def _snapshot_effects(conn: Any) -> Check:
    """A published version's rows are exactly the rows its chunks wrote; one current version
    per period."""
    check = Check("snapshot rows written once per published version; one current version per period")
    for run in conn.execute("""SELECT id, snapshot_type, period, rows_written FROM snapshot_runs
                                WHERE state = 'published'""").fetchall():
        check.checked += 1
        table = _SNAPSHOT_TABLES.get(run["snapshot_type"])
        if table is None:
            continue
        rows = conn.execute(f"SELECT count(*) AS n FROM {table} WHERE run_id = %s", (run["id"],)).fetchone()["n"]
        if rows != run["rows_written"]:
            check.failures.append(f"snapshot {run['snapshot_type']} {run['period']:%Y-%m}: {rows} rows, "
                                  f"{run['rows_written']} written")
    for row in conn.execute("""SELECT workspace_id, snapshot_type, period, count(*) AS n FROM snapshot_runs
                                WHERE is_current GROUP BY 1, 2, 3 HAVING count(*) > 1""").fetchall():
        check.failures.append(f"snapshot {row['snapshot_type']} {row['period']:%Y-%m}: {row['n']} current versions")
    return check


#: Pause reasons no settled run implies: the dispatcher found the saved definition
#: invalid, or the owner left or was deactivated (the owner hand-off).
_PAUSED_OUTSIDE_RUNS = frozenset({"definition_invalid", "ownerless"})


def _streaks(conn: Any, campaign: Campaign | None = None) -> Check:
    """Each schedule's failure streak and pause equal what its settled runs imply: a
    scheduled failure adds one, any success or skip resets; a schedule pauses when a
    scheduled failure brings the streak to the threshold or carries a pause reason
    (schedules paused for a reason no run implies, :data:`_PAUSED_OUTSIDE_RUNS`, or
    resumed by a person, are checked for their streak only).

    The history is taken in the order the settlements committed, which is the order of
    their ``finished_at`` but for a stalled process's takeover (``campaign``'s stalls): it
    runs on a clock past the lease (its settlement's ``finished_at`` is the stall's
    ``resumed_at``) while the simulation is still at the instant the process stalled, so
    it commits before everything later than that instant and is placed there."""
    from timekeeper.topology import PIPELINES

    thresholds = {p.owner: p.failure_pause_threshold for p in PIPELINES.values()}
    check = Check("failure streaks and pauses equal the settled history")
    committed_at = {(stall.run_id, stall.resumed_at): stall.stalled_at
                    for stall in (campaign.result.stalls if campaign is not None else [])}
    settled = conn.execute("""SELECT id, schedule_id, trigger, state, outcome_code, finished_at, occurrence_at
                                FROM schedule_runs WHERE finished_at IS NOT NULL""").fetchall()
    settled.sort(key=lambda r: (committed_at.get((r["id"], r["finished_at"]), r["finished_at"]), r["occurrence_at"],
                                str(r["id"])))
    history: dict[UUID, list[dict[str, Any]]] = collections.defaultdict(list)
    for run in settled:
        history[run["schedule_id"]].append(run)
    resumed = {r["schedule_id"] for r in conn.execute(
        "SELECT DISTINCT schedule_id FROM schedule_events WHERE kind = 'resumed'").fetchall()}
    for schedule in conn.execute("""SELECT id, name, owner, status, pause_reason, consecutive_failures
                                      FROM schedules WHERE deleted_at IS NULL""").fetchall():
        check.checked += 1
        streak, paused_by_runs = 0, False
        for run in history.get(schedule["id"], []):
            if run["state"] != "failed":
                streak = 0
            elif run["trigger"] == "scheduled":
                streak += 1
                if streak >= thresholds[schedule["owner"]] or run["outcome_code"] == schedule["pause_reason"]:
                    paused_by_runs = True
        if streak != schedule["consecutive_failures"]:
            check.failures.append(f"{schedule['name']}: streak {schedule['consecutive_failures']}, history implies "
                                  f"{streak}")
        if schedule["id"] in resumed or schedule["pause_reason"] in _PAUSED_OUTSIDE_RUNS:
            continue
        if (schedule["status"] == "paused") != paused_by_runs:
            check.failures.append(f"{schedule['name']}: {schedule['status']} ({schedule['pause_reason']}), history "
                                  f"implies {'paused' if paused_by_runs else 'not paused'}")
    return check


def _queues(conn: Any, stack: Any, campaign: Campaign) -> Check:
    """The run and job queues are empty; the dead-letter queues hold only malformed messages,
    and messages of runs that settled after invocations carrying them died or raised (a
    consumer killed on a receive, or a final receive whose invocation failed on an injected
    disconnect or restart: SQS dead-letters the message, the run settles without it). A
    failure lists the message's receives, each with how it ended."""
    from pydantic import ValidationError

    from timekeeper.schedules.messages import RunMessage
    from timekeeper.snapshots.jobs import JobMessage

    check = Check("queues empty; dead-letter queues hold only malformed and killed-on-receive messages")
    terminal = {str(r["id"]) for r in conn.execute(
        """SELECT id FROM schedule_runs WHERE state IN ('succeeded', 'skipped', 'failed')
           UNION ALL SELECT id FROM snapshot_runs WHERE state IN ('published', 'failed', 'skipped')""").fetchall()}
    sqs = stack.aws.client("sqs")
    for name, source in stack.sources.items():
        check.checked += 1
        if source.in_flight:
            check.failures.append(f"{name}: {source.in_flight} messages waiting for their visibility timeout")
    for name, pair in {**stack.aws.queues, **stack.aws.work_queues}.items():
        attributes = sqs.get_queue_attributes(QueueUrl=pair.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        waiting = int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"])
        if waiting and not stack.sources[name].in_flight:
            check.failures.append(f"{name}: {waiting} messages left in the queue")
        model = JobMessage if name == "snapshots" else RunMessage
        while True:
            got = sqs.receive_message(QueueUrl=pair.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=3600,
                                      WaitTimeSeconds=0).get("Messages", [])
            if not got:
                break
            for message in got:
                check.checked += 1
                try:
                    parsed = model.model_validate_json(message["Body"])
                except ValidationError:
                    continue  # a malformed message rests in the dead-letter queue by design
                run_id = str(parsed.run_id)
                history = ", ".join(f"#{count} {ending}" for count, ending in
                                    campaign.receives.get(message["MessageId"], [])) or "never delivered"
                if run_id in terminal and (campaign.killed_receives[run_id]
                                           or campaign.lost_final_receive(message["MessageId"])):
                    campaign.result.dead_lettered_killed += 1
                    campaign.result.notes.append(f"{name} dead-letter queue: run {run_id}, receives {history}")
                    continue
                check.failures.append(f"{name} dead-letter queue holds a message of run {run_id} "
                                      f"({'terminal' if run_id in terminal else 'unfinished'}, "
                                      f"{campaign.killed_receives[run_id]} killed receives; its receives: "
                                      f"{history})")
    return check


def print_chaos(result: ChaosResult, console: Any) -> None:
    """Render the campaign's faults, crash-point hits and audit as rich tables."""
    from rich.table import Table

    options = result.options
    console.print(f"[bold]Chaos[/] seed {options.seed}: {options.days} day{'s' if options.days != 1 else ''} of "
                  f"faults (crash rate "
                  f"{options.crash_rate:g}, disconnect rate {options.disconnect_rate:g}, duplicate rate "
                  f"{options.duplicate_rate:g}, refuse rate {options.refuse_rate:g}, stall rate "
                  f"{options.stall_rate:g}, SES throttle rate {options.ses_throttle_rate:g}, SES reject rate "
                  f"{options.ses_reject_rate:g}, {options.db_restarts:g} database restart"
                  f"{'s' if options.db_restarts != 1 else ''} a day, {options.cut_rate:g} connection cuts a "
                  f"second) then {options.quiet_hours} quiet hours; "
                  f"{result.simulation.wall_seconds:.1f}s wall time; "
                  f"{sum(s.taken_over for s in result.stalls)} of {len(result.stalls)} stalled attempts taken over.")
    faults_table = Table(title="Injected faults")
    for column in ("kind", "where", "count"):
        faults_table.add_column(column, justify="right" if column == "count" else "left")
    for (kind, where), count in sorted(result.faults.items()):
        faults_table.add_row(kind, where, f"{count:,}")
    if result.skipped_restarts:
        faults_table.add_row("db_restart", "[yellow]skipped: the server cannot be restarted (see below)[/]",
                             f"0 of {result.skipped_restarts}")
    faults_table.add_row("[bold]total[/]", "", f"[bold]{sum(result.faults.values()):,}[/]")
    console.print(faults_table)
    for at, point, seconds in result.restarts:
        console.print(f"Database restarted at {at:%Y-%m-%d %H:%M} UTC inside {point} ({seconds:.1f}s).")
    for note in result.notes:
        console.print(f"[yellow]{note}[/]")
    hits = Table(title="Crash points reached")
    hits.add_column("crash point")
    hits.add_column("reached", justify="right")
    hits.add_column("crashed", justify="right")
    for point in faults.CRASH_POINTS:
        hits.add_row(point, f"{result.point_hits[point]:,}", f"{result.faults[('crash', point)]:,}")
    console.print(hits)
    checks = Table(title="Audit")
    for column in ("invariant", "checked", "result"):
        checks.add_column(column, justify="right" if column == "checked" else "left")
    for check in result.checks:
        if not check.held:
            verdict = f"[red]FAILED[/] ({len(check.failures)})"
        else:  # an invariant with nothing to check in this campaign says so rather than "held"
            verdict = "[green]held[/]" if check.checked else "[yellow]nothing to check[/]"
        checks.add_row(check.name, f"{check.checked:,}", verdict)
    console.print(checks)
    for check in result.checks:
        for failure in check.failures[:20]:
            console.print(f"[red]{check.name}[/]: {failure}")
    errors = getattr(result.simulation, "scheduled_errors", {})
    console.print(f"Dispatcher and planner invocations that raised or died: {sum(errors.values()):,}; consumer "
                  f"invocations that raised or died: {result.simulation.consumer.get('function_errors', 0):,}; "
                  f"run messages dead-lettered after their consumer was killed on each receive (the run settled "
                  f"without them): {result.dead_lettered_killed}; delivery messages sent twice because the "
                  f"attempt died between the provider's acceptance and the record: {result.resent_in_window}.")
    if result.api_requests:
        kinds = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in sorted(result.api_requests.items()))
        answers = ", ".join(f"{status} x {n}" for status, n in sorted(result.api_answers.items()))
        console.print(f"API requests during the faults: {sum(result.api_requests.values())} ({kinds}); "
                      f"answers over every try: {answers}.")
    console.print("[green]All invariants held.[/]" if result.passed else "[red]An invariant failed.[/]")
