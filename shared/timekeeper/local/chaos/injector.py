"""The fault injector and recorder of a campaign (:class:`Campaign`, the hooks the
simulation calls), the extra traffic it adds (:func:`add_load`) and the command's entry
(:func:`run_chaos`); what each fault is: the package's docstring (:mod:`timekeeper.local.chaos`)."""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from timekeeper import clock, faults
from timekeeper.db.sql import load_queries
from timekeeper.local.chaos.audit import audit
from timekeeper.local.chaos.records import ChaosOptions, ChaosResult, Execution, Stall

SQL = load_queries("timekeeper.local.chaos", "injector.sql")

_TOKEN = re.compile(r"/downloads/([A-Za-z0-9_.\-]+)")


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
        row = self._conn.execute(SQL["attempts_of_run"], (ctx.run_id,)).fetchone()
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
            from timekeeper.local.chaos.api import ApiDriver, api_instants, enrol_api_person, find_targets
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
        SQL["accounting_workspaces"]).fetchall()]
    platform = stack.platform
    query = conn.execute(SQL["open_invoices_query"],
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
    """Run the campaign ``options`` describes; return its :class:`~.records.ChaosResult` (the audit's
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
