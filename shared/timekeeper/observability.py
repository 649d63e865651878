"""Observability singletons and the metric names shared by code and dashboards.

Keys on log lines: ``run_id``, ``schedule_id``, ``workspace_id`` (the consumer's run ids
while a work kind's handler runs, the caller's workspace during an API request; both kept
in the context, not the process). No personal data (addresses, names) in logs or metrics.
"""

from __future__ import annotations

import logging
import threading
from contextvars import ContextVar, Token
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import single_metric
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

NAMESPACE = "Timekeeper"

SCHEDULES_CLAIMED = "SchedulesClaimed"
RUNS_PUBLISHED = "RunsPublished"
PUBLISH_REFUSED = "PublishRefused"
RUNS_REOFFERED = "RunsReoffered"
BACKLOG_SKIPPED = "BacklogSkipped"
DEFINITIONS_INVALID = "DefinitionsInvalid"
RUN_SUCCEEDED = "RunSucceeded"
RUN_SKIPPED = "RunSkipped"
RUN_FAILED = "RunFailed"
SCHEDULE_AUTO_PAUSED = "ScheduleAutoPaused"
DISPATCHER_HEARTBEAT = "DispatcherHeartbeat"
SNAPSHOT_PUBLISHED = "SnapshotPublished"
SNAPSHOT_OVERDUE = "SnapshotOverdue"
SNAPSHOT_FAILED = "SnapshotFailed"
SNAPSHOTS_PLANNED = "SnapshotsPlanned"
SNAPSHOTS_ADMITTED = "SnapshotsAdmitted"
SNAPSHOT_DISPATCHER_HEARTBEAT = "SnapshotDispatcherHeartbeat"
#: One per render the report renderer finished: succeeded, or failed with its code recorded.
REPORT_RENDERED = "ReportRendered"
REPORT_RENDER_FAILED = "ReportRenderFailed"
#: Scheduled delivery: recipients whose submission failed in an attempt (the run is retried).
DELIVERY_FAILED = "DeliveryFailed"
#: Scheduled delivery: submissions SES throttled (each retried after a backoff), per receive.
SES_THROTTLED = "SesThrottled"
#: Staff operations actions taken (a dead-letter redrive, a staff resume), one per action.
OPERATIONS_ACTIONS = "OperationsActions"
#: History retention: rows deleted by one maintenance pass (runs with their delivery rows,
#: events, exports; the generated rows of failed snapshot runs), per pipeline.
HISTORY_PRUNED = "HistoryPruned"
#: Owner notices: failed posting jobs nobody retried yet (a count of every workspace's,
#: emitted by each posting sweep), and notice messages mailed (a digest counts once).
POSTING_JOBS_FAILED = "PostingJobsFailed"
NOTICES_MAILED = "NoticesMailed"

#: Every metric the code emits, for the dashboard and its tests.
ALL_METRICS = (
    SCHEDULES_CLAIMED, RUNS_PUBLISHED, PUBLISH_REFUSED, RUNS_REOFFERED, BACKLOG_SKIPPED,
    DEFINITIONS_INVALID, RUN_SUCCEEDED, RUN_SKIPPED, RUN_FAILED, SCHEDULE_AUTO_PAUSED,
    DISPATCHER_HEARTBEAT, SNAPSHOT_PUBLISHED, SNAPSHOT_OVERDUE, SNAPSHOT_FAILED, SNAPSHOTS_PLANNED,
    SNAPSHOTS_ADMITTED, SNAPSHOT_DISPATCHER_HEARTBEAT, REPORT_RENDERED, REPORT_RENDER_FAILED, DELIVERY_FAILED,
    OPERATIONS_ACTIONS, HISTORY_PRUNED, POSTING_JOBS_FAILED, NOTICES_MAILED, SES_THROTTLED,
)

class _SerializedEMFProvider(AmazonCloudWatchEMFProvider):
    """Powertools' EMF provider whose metric set is changed and flushed by one thread at a
    time. The set is shared by the process (every ``Metrics`` instance), and the local
    stack's consumers run invocations on several threads at once: without the
    lock, one invocation's flush (``log_metrics``) iterating the set while another adds a
    metric raises ``RuntimeError`` (or finds the set emptied between its check and its
    serialization: ``SchemaValidationError``), failing that invocation's whole batch, and
    its clear could drop a metric added meanwhile. With it, a flush emits every metric added
    before it and none added after it is lost. In Lambda one thread runs a function: the
    lock is never contended."""

    _lock = threading.RLock()

    def add_metric(self, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            super().add_metric(*args, **kwargs)

    def add_dimension(self, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            super().add_dimension(*args, **kwargs)

    def add_metadata(self, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            super().add_metadata(*args, **kwargs)

    def serialize_metric_set(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return super().serialize_metric_set(*args, **kwargs)

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None:
        with self._lock:
            super().flush_metrics(raise_on_empty_metrics=raise_on_empty_metrics)

    def clear_metrics(self) -> None:
        with self._lock:
            super().clear_metrics()


def _metrics(namespace: str, service: str) -> Metrics:
    """A ``Metrics`` (the process's shared set) whose provider is :class:`_SerializedEMFProvider`."""
    shared = Metrics(namespace=namespace, service=service)
    shared.provider = _SerializedEMFProvider(
        namespace=namespace, service=service, metric_set=shared.metric_set, dimension_set=shared.dimension_set,
        metadata_set=shared.metadata_set, default_dimensions=shared.default_dimensions)
    return shared


logger = Logger(service="timekeeper")
#: The process's metrics (``log_metrics`` flushes them at the end of each invocation); safe to
#: add to and flush from several threads at once (:class:`_SerializedEMFProvider`).
metrics = _metrics(NAMESPACE, "timekeeper")
tracer = Tracer(service="timekeeper")

#: The keys added to every log line written in this context (values made strings only when
#: a line is written), or None. Set through :func:`set_log_keys` and :func:`push_log_keys`.
_LOG_KEYS: ContextVar[dict[str, Any] | None] = ContextVar("timekeeper_log_keys", default=None)


class _ContextKeys(logging.Filter):
    """Adds the context's log keys (``run_id``, ``schedule_id``, ``workspace_id``, ...) to
    each record the product's log handler writes. Unlike ``Logger.append_keys``, which
    changes the handler's formatter for the whole process, the keys belong to the context
    (a thread, a request): two requests served at once never see each other's, and a run's
    keys cost a context-variable set and reset when its handler writes nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        keys = _LOG_KEYS.get()
        if keys:
            for name, value in keys.items():
                setattr(record, name, str(value))
        return True


logger.registered_handler.addFilter(_ContextKeys())


def set_log_keys(**keys: Any) -> None:
    """Add ``keys`` to every log line written from now on in this context (an API request,
    a Lambda invocation). Callers that must undo it run in a copied context."""
    _LOG_KEYS.set({**(_LOG_KEYS.get() or {}), **keys})


def push_log_keys(**keys: Any) -> Token:
    """Add ``keys`` to the log lines written in this context until :func:`pop_log_keys`
    is given the returned token (a run while its handler runs, an export while it is
    consumed)."""
    return _LOG_KEYS.set({**(_LOG_KEYS.get() or {}), **keys})


def pop_log_keys(token: Token) -> None:
    """Undo the matching :func:`push_log_keys`."""
    _LOG_KEYS.reset(token)


#: The dimension naming a metric's pipeline, and the one naming an outcome's work kind.
PIPELINE_DIMENSION = "pipeline"
WORK_KIND_DIMENSION = "work_kind"


class PipelineMetrics:
    """The metrics adapter the edge passes to the dispatcher and the consumer.

    ``add_metric(name, unit, value, **dimensions)`` emits each count twice: on the shared
    ``metrics`` object with the service dimension only (what the alarms watch), and as an
    EMF line of its own with ``pipeline`` plus the given dimensions (e.g. ``work_kind``),
    which the dashboard's per-pipeline rows search for. A count with extra dimensions is
    also emitted with ``pipeline`` alone, so every pipeline has one series per metric (the
    run outcomes' series feed the pipeline's failure-rate alarm).
    """

    def __init__(self, shared: Metrics, pipeline: str):
        self.shared = shared
        self.pipeline = pipeline

    def add_metric(self, name: str, unit: Any, value: float, **dimensions: str) -> None:
        self.shared.add_metric(name=name, unit=unit, value=value)
        with single_metric(name=name, unit=unit, value=value, namespace=NAMESPACE,
                           default_dimensions={"service": self.shared.service or "timekeeper",
                                               PIPELINE_DIMENSION: self.pipeline}) as detail:
            for key, dimension in dimensions.items():
                detail.add_dimension(name=key, value=dimension)
        if dimensions:
            with single_metric(name=name, unit=unit, value=value, namespace=NAMESPACE,
                               default_dimensions={"service": self.shared.service or "timekeeper",
                                                   PIPELINE_DIMENSION: self.pipeline}):
                pass


class MetricsRecorder:
    """An in-memory stand-in with the adapter's ``add_metric`` signature (tests, benchmarks).

    ``counts`` sums by name; ``detailed`` sums by (name, sorted dimension items); ``calls``
    counts the data points emitted."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.detailed: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.calls = 0

    def add_metric(self, name: str, unit: object, value: float, **dimensions: str) -> None:
        self.calls += 1
        self.counts[name] = self.counts.get(name, 0) + value
        key = (name, tuple(sorted(dimensions.items())))
        self.detailed[key] = self.detailed.get(key, 0) + value

    def get(self, name: str) -> float:
        return self.counts.get(name, 0)
