"""The local stack's one start-up, shared by ``simulate`` and ``serve``.

:func:`start_local_stack` brings up what both commands run on, in this order: a quiet
Lambda environment (Powertools settings, no tracing), the database (embedded PostgreSQL
or ``DATABASE_URL``; a named database, migrated), moto with every pipeline's queue,
dead-letter queue and the notification topic from the topology (and every work queue
and the files bucket), and an SQS event source mapping per pipeline and per work queue
that feeds the REAL consumer handler (with up to the mapping's concurrency at once when
asked: ``serve``). :class:`LocalStack` then
invokes the REAL dispatcher handler with EventBridge scheduled events
(:meth:`LocalStack.dispatch`) and polls the queues (:meth:`LocalStack.poll`), and
:meth:`LocalStack.stop` undoes everything: moto, the cached adapters, the clock and this
process's environment.

The handlers' metric lines (EMF, which CloudWatch would ingest) are discarded.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import os
import sys
import threading
import uuid
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from timekeeper.local import embedded
from timekeeper.settings import DATABASE_URL_VARIABLE

#: The event source of the message-events queue (SES's message states), by this name.
MESSAGE_EVENTS_SOURCE = "message-events"
#: The EventBridge rule named in the scheduled events the local stack sends.
RULE_ARN = "arn:aws:events:us-east-1:000000000000:rule/timekeeper-minute"


def quiet_lambda_environment(log_level: str = "ERROR") -> None:
    """Set the Powertools environment the handlers read when their singletons are built
    (service name, metrics namespace, tracing off, ``log_level``); values already set win.
    Metrics stay enabled (disabled, their set keeps growing); their output is discarded."""
    os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "timekeeper")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Timekeeper")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", log_level)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="No application metrics to publish")


class _QuietStdout(io.TextIOBase):
    """``sys.stdout`` while functions are invoked quietly: what a thread inside a quiet
    invocation writes (the handlers' EMF metric lines) is discarded, what any other thread
    writes goes to the stream it replaced (``contextlib.redirect_stdout`` would swap the
    stream of every thread of the process: ``serve``'s API threads, a command printing
    beside it)."""

    def __init__(self, target: Any) -> None:
        super().__init__()
        #: The stream replaced, which everyone but a quiet invocation writes to.
        self.target = target
        #: Quiet invocations running with this stream installed.
        self.users = 0

    def write(self, text: str) -> int:
        if getattr(_quiet_threads, "depth", 0):
            return len(text)
        return self.target.write(text)

    def flush(self) -> None:
        if not getattr(_quiet_threads, "depth", 0):
            self.target.flush()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", "utf-8")

    def isatty(self) -> bool:
        return bool(getattr(self.target, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self.target.fileno()


#: How many quiet invocations the current thread is inside.
_quiet_threads = threading.local()
_quiet_lock = threading.Lock()


@contextlib.contextmanager
def _quietly() -> Any:
    """Discard what this thread prints inside the block (see :class:`_QuietStdout`)."""
    with _quiet_lock:
        if not isinstance(sys.stdout, _QuietStdout):
            sys.stdout = _QuietStdout(sys.stdout)
        stream = sys.stdout
        stream.users += 1
    _quiet_threads.depth = getattr(_quiet_threads, "depth", 0) + 1
    try:
        yield
    finally:
        _quiet_threads.depth -= 1
        with _quiet_lock:
            stream.users -= 1
            if stream.users == 0 and sys.stdout is stream:
                sys.stdout = stream.target


class FunctionCrashed(Exception):  # noqa: N818 - what the caller of a killed Lambda sees
    """The invoked function died at a crash point (a fault campaign's injected crash):
    like a Lambda timeout or kill, its invocation failed and its execution environment is
    gone (the cached connections and clients are dropped)."""

    def __init__(self, function: str, point: str) -> None:
        super().__init__(f"{function} died at {point}")
        self.function = function
        self.point = point


def invoke_quietly(function: str, event: dict[str, Any], **kwargs: Any) -> Any:
    """Invoke ``functions/<function>/handler.py`` like the Lambda runtime (see
    :func:`timekeeper.local.lambdas.invoke`), discarding what it prints.

    Raises :class:`FunctionCrashed` when the invocation died at an injected crash point
    (:mod:`timekeeper.faults`), after dropping the execution environment's cached
    adapters as a new Lambda environment would start without them (this thread's
    connections only: another thread's invocation keeps its own)."""
    from timekeeper import edge, faults
    from timekeeper.local.lambdas import invoke

    try:
        with _quietly():
            return invoke(function, event, **kwargs)
    except faults.InjectedCrash as crash:
        edge.drop_environment()  # this environment's (thread's): others may be mid-invocation
        raise FunctionCrashed(function, crash.point) from None


def scheduled_event(now: datetime, detail: dict[str, Any] | None = None) -> dict[str, Any]:
    """The EventBridge "Scheduled Event" of the minute rule at instant ``now`` (aware), with
    ``detail`` (a dispatcher partition's rule sends ``{"partition": i, "partitions": k}``)."""
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "000000000000", "time": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1", "resources": [RULE_ARN], "detail": dict(detail or {})}


def prepare_database(name: str, *, reset: bool) -> str:
    """Create database ``name`` on the local server (``reset``: drop it first), apply the
    migrations, record the holiday data (recomputing business-day schedules when it is new,
    as a deploy does) and return its URL. Raises ``ValueError`` for a name that is not a plain
    identifier, ``psycopg.Error`` when the server refuses."""
    from timekeeper import clock
    from timekeeper.db.connection import connect
    from timekeeper.db.migrate import apply_migrations
    from timekeeper.schedules.closures import refresh_holiday_data

    url = embedded.create_database(embedded.server_url(), name, drop_existing=reset)
    with connect(url) as conn:
        apply_migrations(conn)
        refresh_holiday_data(conn, now=clock.now())  # as the deploy's migration step does
    return url


def platform_sample_day(now: datetime) -> datetime:
    """The instant the local stack's Platform sample ends at for a start at ``now``
    (aware): midnight UTC of that day, so every start on one day describes the same data."""
    return datetime.combine(now.astimezone(UTC).date(), datetime.min.time(), tzinfo=UTC)


def load_platform_sample(database_url: str, *, now: datetime, seed: int = 7) -> Any:
    """Load the Platform sample tenant set (:func:`timekeeper.local.platform_data.load_sample`)
    ending at ``now`` into the migrated database ``database_url``; idempotent. Returns its
    :class:`~timekeeper.local.platform_data.SampleSet`."""
    from timekeeper.db.connection import connect
    from timekeeper.local.platform_data import load_sample

    with connect(database_url) as conn:
        return load_sample(conn, seed=seed, now=now)


@dataclass
class LocalStack:
    """A running local stack: the migrated ``database_url``, the local AWS (moto), an SQS
    event source per pipeline and per work queue (``sources``, by name) and the Platform sample
    tenant set loaded into the database (``platform``; None when none was asked for)."""

    database_url: str
    aws: Any
    sources: dict[str, Any]
    #: The report renderer (:class:`timekeeper.local.renderer.LocalRendererClient`).
    renderer: Any = None
    #: The Platform sample loaded at start-up (:class:`timekeeper.local.platform_data.SampleSet`), if any.
    platform: Any = None
    #: Scheduled invocations (dispatchers, planner) that raised or died, by (function, error).
    scheduled_errors: collections.Counter = field(default_factory=collections.Counter)
    _saved_environment: dict[str, str] = field(default_factory=dict, repr=False)

    def _scheduled(self, function: str, now: datetime, timeout_s: int, failed: dict[str, Any],
                   detail: dict[str, Any] | None = None) -> dict[str, Any]:
        """Invoke a scheduled function with the event of ``now`` (and ``detail``); an
        invocation that raised or died (a Lambda error: the next scheduled event tries again)
        is counted in :attr:`scheduled_errors` by function and exception type, and reports
        ``failed``."""
        try:
            return invoke_quietly(function, scheduled_event(now, detail), timeout_s=timeout_s)
        except FunctionCrashed as crash:
            self.scheduled_errors[(function, f"crashed at {crash.point}")] += 1
        except Exception as error:  # noqa: BLE001 - a Lambda error; the next minute's invocation recovers
            self.scheduled_errors[(function, type(error).__name__)] += 1
        return dict(failed)

    def dispatch(self, pipeline: Any, now: datetime) -> dict[str, Any]:
        """Invoke the dispatcher handler of each of ``pipeline``'s partitions
        (``dispatch_partitions``, in order) with the scheduled event of ``now`` naming the
        partition, as each partition's rule does; return their reports summed (``claimed``,
        ``published``, ``reoffered``, ...). A pass that raised or died reports zero counts
        (see :meth:`_scheduled`)."""
        total: dict[str, Any] = {"claimed": 0, "published": 0, "reoffered": 0}
        for index in pipeline.partitions:
            report = self._scheduled(pipeline.dispatcher_function, now, pipeline.dispatcher_timeout_s,
                                     {"claimed": 0, "published": 0, "reoffered": 0},
                                     {"partition": index, "partitions": pipeline.dispatch_partitions})
            for name, value in report.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    total[name] = total.get(name, 0) + value
        return total

    def plan_snapshots(self, now: datetime) -> dict[str, Any]:
        """Invoke the snapshot planner's handler with the scheduled event of ``now``, then the
        snapshot dispatcher when something was planned (the nudge the deployed planner sends
        by an asynchronous invoke); return the planner's summary (with ``sent``: the jobs the
        nudged dispatcher sent)."""
        from timekeeper.topology import SNAPSHOTS

        summary = self._scheduled(SNAPSHOTS.planner_function, now, SNAPSHOTS.planner_timeout_s,
                                  {"planned": 0, "overdue_periods": []})
        if summary["planned"]:
            summary = {**summary, "sent": self.dispatch_snapshots(now)["sent"]}
        return summary

    def dispatch_snapshots(self, now: datetime) -> dict[str, Any]:
        """Invoke the snapshot dispatcher's handler (admission, reoffers, lost jobs, sends);
        a pass that raised or died sends nothing (see :meth:`_scheduled`)."""
        from timekeeper.topology import SNAPSHOTS

        return self._scheduled(SNAPSHOTS.dispatcher_function, now, SNAPSHOTS.dispatcher_timeout_s, {"sent": 0})

    def poll(self, now: datetime, names: Any = None) -> int:
        """Let the event sources ``names`` (default: all) deliver what is visible at
        ``now``; return the records delivered. With concurrent consumers (see
        :func:`start_local_stack`) the invocations started are still running on return
        (:meth:`wait` waits for them)."""
        return sum(source.poll(now) for name, source in self.sources.items() if names is None or name in names)

    def drain(self, now: datetime, names: Any = None) -> int:
        """Poll the event sources ``names`` (default: all) at ``now`` and wait for their
        invocations until a poll delivers nothing more; return the records delivered (with
        serial consumers this is one :meth:`poll`, and one that finds nothing)."""
        self.wait()
        delivered = 0
        while started := self.poll(now, names):
            delivered += started
            self.wait()
        return delivered

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for every running consumer invocation (concurrent consumers; at most
        ``timeout_s`` seconds each source) and take what they reported."""
        for source in self.sources.values():
            source.wait(timeout_s)

    def sources_visible_at(self, now: datetime) -> list[str]:
        """The event sources holding a failed message whose visibility timeout has passed."""
        return [name for name, source in self.sources.items()
                if (at := source.next_visible_at()) is not None and at <= now]

    def next_visible_at(self) -> datetime | None:
        """The earliest instant a failed message becomes visible again, if any waits."""
        return min((at for s in self.sources.values() if (at := s.next_visible_at()) is not None), default=None)

    def consumer_stats(self) -> dict[str, int]:
        """The event sources' counters summed: invocations, delivered, deleted, failed
        (batch item failures) and function_errors (invocations that raised)."""
        totals: dict[str, int] = {}
        for source in self.sources.values():
            for name, value in vars(source.stats).items():
                totals[name] = totals.get(name, 0) + value
        return totals

    def dlq_depths(self) -> dict[str, int]:
        """Messages in each pipeline's dead-letter queue."""
        sqs = self.aws.client("sqs")
        return {name: int(sqs.get_queue_attributes(QueueUrl=pair.dlq_url, AttributeNames=[
            "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"])
            for name, pair in self.aws.queues.items()}

    def stop(self) -> None:
        """Stop moto, forget the cached adapters and connections, restore the real clock
        and this process's environment as it was before the start. Idempotent."""
        from timekeeper import clock, edge
        from timekeeper.edge import adapters
        from timekeeper.edge import api as api_edge

        for source in self.sources.values():
            source.stop()
        if self.renderer is not None:
            self.renderer.wait()
            self.renderer.close()
            adapters.install_renderer_client(None)
        adapters.install_visibility_changer(None)
        adapters.install_run_releaser(None)
        adapters.install_redrive_by_receiving(False)
        self.aws.stop()
        api_edge.reset()
        edge.reset()
        clock.install(None)
        if self._saved_environment:
            os.environ.clear()
            os.environ.update(self._saved_environment)
            self._saved_environment = {}


def start_local_stack(*, database: str, reset: bool, aws_server: bool, database_url: str | None = None,
                      log_level: str = "ERROR", background_renders: bool = True,
                      platform_sample_at: datetime | None = None, platform_seed: int = 7,
                      concurrent_consumers: bool = False) -> LocalStack:
    """Start the local stack (see the module docstring) and point this process at it
    (``DATABASE_URL``, the queue URLs, the topic ARN, fake AWS credentials).

    ``database`` is created on the local server (``reset`` drops it first) unless
    ``database_url`` names an already migrated one. ``platform_sample_at`` (aware): load
    the Platform sample tenant set (seed ``platform_seed``) ending at that instant, about
    half a second; rows already there are kept. ``aws_server`` False: moto in-process
    (fastest; the simulation); True: a moto server on 127.0.0.1 (``serve``). Raises what
    the database start raises (``psycopg.Error``, ``ValueError``); nothing is left running
    then. Render requests run the real renderer handler (``background_renders``: on a
    background thread, as Lambda's asynchronous invoke would; False: at once, in the
    requesting thread). ``concurrent_consumers``: each event source mapping invokes its
    consumer with up to its maximum concurrency at once, each invocation on a thread with
    connections of its own, and :meth:`LocalStack.poll` returns without waiting for them,
    as Lambda's poller does (``serve``, the benchmarks); False: a poll invokes every batch
    in the calling thread, one after the other, and returns once all is delivered (a
    deterministic drain on a simulated clock: ``simulate``, the tests, the fault campaigns).
    """
    saved = dict(os.environ)
    quiet_lambda_environment(log_level)  # before the first import of the handlers' singletons
    from timekeeper import clock, edge
    from timekeeper.edge import adapters
    from timekeeper.edge import api as api_edge
    from timekeeper.local.aws import start_local_aws
    from timekeeper.local.event_source import SqsEventSource
    from timekeeper.local.renderer import LocalRendererClient

    try:
        url = database_url or prepare_database(database, reset=reset)
        platform = (load_platform_sample(url, now=platform_sample_at, seed=platform_seed)
                    if platform_sample_at is not None else None)
        os.environ[DATABASE_URL_VARIABLE] = url
        local_aws = start_local_aws(server=aws_server)
    except BaseException:
        os.environ.clear()
        os.environ.update(saved)
        raise
    edge.reset()
    api_edge.reset()
    sqs = local_aws.client("sqs")
    sources = {
        name: SqsEventSource(
            sqs=sqs, queue_url=pair.url, queue_arn=pair.arn,
            function=lambda event, fn=pair.pipeline.consumer.function, timeout=pair.pipeline.consumer.timeout_s:
                invoke_quietly(fn, event, timeout_s=timeout),
            batch_size=pair.pipeline.consumer.batch_size, max_concurrency=pair.pipeline.consumer.max_concurrency,
            visibility_timeout=timedelta(seconds=pair.pipeline.consumer.visibility_timeout_s),
            concurrent=concurrent_consumers, name=f"consumer-{name}")
        for name, pair in {**local_aws.queues, **local_aws.work_queues}.items()}
    if local_aws.message_events is not None:
        events = local_aws.message_events.pipeline
        sources[MESSAGE_EVENTS_SOURCE] = SqsEventSource(
            sqs=sqs, queue_url=local_aws.message_events.url, queue_arn=local_aws.message_events.arn,
            function=lambda event: invoke_quietly(events.function, event, timeout_s=events.timeout_s),
            batch_size=events.batch_size, max_concurrency=events.max_concurrency,
            visibility_timeout=timedelta(seconds=events.visibility_timeout_s),
            concurrent=concurrent_consumers, name=f"consumer-{MESSAGE_EVENTS_SOURCE}")
    by_arn = {source.queue_arn: source for source in sources.values()}

    def change_visibility(queue_arn: str, receipt_handle: str, seconds: int) -> None:
        by_arn[queue_arn].change_visibility(receipt_handle, seconds)

    adapters.install_visibility_changer(change_visibility)

    def release_run(pipeline: str, message: Any, delay_s: int) -> bool:
        sources[pipeline].send_later(message.model_dump_json(), str(message.workspace_id), delay_s, clock.now())
        return True

    adapters.install_run_releaser(release_run)
    adapters.install_redrive_by_receiving(True)  # moto has no message move task
    renderer = LocalRendererClient(invoke_quietly, background=background_renders)
    adapters.install_renderer_client(renderer)
    return LocalStack(database_url=url, aws=local_aws, sources=sources, renderer=renderer, platform=platform,
                      _saved_environment=saved)
