"""Observability singletons and the metric names shared by code and dashboards (DESIGN 8).

Keys on every log line: ``run_id``, ``schedule_id``, ``workspace_id`` (appended by the
handlers). No personal data (addresses, names) in logs or metrics.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

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

#: Every metric the code emits, for the dashboard and its tests.
ALL_METRICS = (
    SCHEDULES_CLAIMED, RUNS_PUBLISHED, PUBLISH_REFUSED, RUNS_REOFFERED, BACKLOG_SKIPPED,
    DEFINITIONS_INVALID, RUN_SUCCEEDED, RUN_SKIPPED, RUN_FAILED, SCHEDULE_AUTO_PAUSED,
    DISPATCHER_HEARTBEAT, SNAPSHOT_PUBLISHED, SNAPSHOT_OVERDUE,
)

logger = Logger(service="timekeeper")
metrics = Metrics(namespace=NAMESPACE, service="timekeeper")
tracer = Tracer(service="timekeeper")


class MetricsRecorder:
    """An in-memory stand-in with Powertools' ``add_metric`` signature (tests, benchmarks)."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def add_metric(self, name: str, unit: object, value: float) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def get(self, name: str) -> float:
        return self.counts.get(name, 0)
