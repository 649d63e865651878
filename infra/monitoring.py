"""Alarms and the dashboard.

Metric names and the namespace come from :mod:`timekeeper.observability`, the same
constants the code emits; the ``service`` dimension is the one Powertools adds
(``observability.metrics.service``). Thresholds come from the topology; the period of
every alarm but dispatcher silence is :data:`infra.settings.ALARM_PERIOD_MINUTES`.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra import settings
from infra.pipeline import PipelineResources
from infra.work_queue import WorkQueueResources
from timekeeper import observability as obs

#: The dimensions Powertools puts on every Timekeeper metric.
SERVICE_DIMENSIONS = {"service": obs.metrics.service}
#: The dimension naming a metric's pipeline (emitted by observability.PipelineMetrics).
PIPELINE_DIMENSION = obs.PIPELINE_DIMENSION

DISPATCHER_METRICS = (obs.SCHEDULES_CLAIMED, obs.RUNS_PUBLISHED, obs.PUBLISH_REFUSED, obs.RUNS_REOFFERED,
                      obs.BACKLOG_SKIPPED, obs.DEFINITIONS_INVALID)
OUTCOME_METRICS = (obs.RUN_SUCCEEDED, obs.RUN_SKIPPED, obs.RUN_FAILED, obs.SCHEDULE_AUTO_PAUSED)


def _period() -> Duration:
    return Duration.minutes(settings.ALARM_PERIOD_MINUTES)


def timekeeper_metric(name: str, *, statistic: str = "Sum", period: Duration | None = None) -> cw.Metric:
    """A Timekeeper EMF metric (``name`` from :mod:`timekeeper.observability`) with the
    dimensions the code emits."""
    return cw.Metric(namespace=obs.NAMESPACE, metric_name=name, dimensions_map=SERVICE_DIMENSIONS,
                     statistic=statistic, period=period or _period())


def pipeline_search(name: str, pipeline: str, *, label: str) -> cw.MathExpression:
    """Every series of metric ``name`` carrying ``pipeline=<pipeline>`` (one line per extra
    dimension, e.g. per work kind)."""
    return cw.MathExpression(
        expression=(f"SEARCH('{{{obs.NAMESPACE}}} MetricName=\"{name}\" "
                    f"{PIPELINE_DIMENSION}=\"{pipeline}\"', 'Sum', {settings.ALARM_PERIOD_MINUTES * 60})"),
        label=label, period=_period(), using_metrics={})


def pipeline_metric(name: str, pipeline: str, *, period: Duration) -> cw.Metric:
    """The copy of Timekeeper metric ``name`` the code emits with ``pipeline=<pipeline>``."""
    return cw.Metric(namespace=obs.NAMESPACE, metric_name=name, statistic="Sum", period=period,
                     dimensions_map={**SERVICE_DIMENSIONS, PIPELINE_DIMENSION: pipeline})


@dataclass
class PipelineAlarms:
    """The seven alarms of one pipeline."""

    dispatcher_silence: cw.Alarm
    dispatcher_heartbeat: cw.Alarm
    dispatcher_errors: cw.Alarm
    queue_age: cw.Alarm
    dlq_depth: cw.Alarm
    dlq_arrivals: cw.Alarm
    consumer_errors: cw.Alarm

    def all(self) -> list[cw.Alarm]:
        """The alarms in a fixed order."""
        return [self.dispatcher_silence, self.dispatcher_heartbeat, self.dispatcher_errors, self.queue_age,
                self.dlq_depth, self.dlq_arrivals, self.consumer_errors]


@dataclass
class WorkQueueAlarms:
    """The four alarms of one work queue (no dispatcher)."""

    queue_age: cw.Alarm
    dlq_depth: cw.Alarm
    dlq_arrivals: cw.Alarm
    consumer_errors: cw.Alarm

    def all(self) -> list[cw.Alarm]:
        """The alarms in a fixed order."""
        return [self.queue_age, self.dlq_depth, self.dlq_arrivals, self.consumer_errors]


class Monitoring(Construct):
    """Per pipeline: dispatcher silence (no invocation in the topology's window, missing data
    breaching), dispatcher heartbeat (no successful pass in that window, missing data
    breaching), dispatcher errors, queue age above the topology's threshold, DLQ depth > 0,
    DLQ arrivals (the depth grew: fires again for a new poison message while the depth alarm
    is still in ALARM), consumer errors; for the application: ScheduleAutoPaused > 0. Every
    alarm notifies ``topic`` when it fires and when it clears; alarm and dashboard names
    start with the capitalized ``name_prefix``. One dashboard with a row per pipeline. Per
    work queue (``work_queues``): queue age, DLQ depth, DLQ arrivals and consumer errors,
    and a dashboard row."""

    def __init__(self, scope: Construct, construct_id: str, *, pipelines: list[PipelineResources],
                 topic: sns.ITopic, name_prefix: str = "timekeeper",
                 work_queues: list[WorkQueueResources] | None = None):
        super().__init__(scope, construct_id)
        self._action = actions.SnsAction(topic)
        self._title = name_prefix.capitalize()
        self.pipeline_alarms: dict[str, PipelineAlarms] = {}
        for resources in pipelines:
            self.pipeline_alarms[resources.pipeline.name] = self._pipeline_alarms(resources)
        self.work_queues = list(work_queues or [])
        self.work_queue_alarms: dict[str, WorkQueueAlarms] = {
            r.work_queue.name: self._work_queue_alarms(r) for r in self.work_queues}
        self.auto_paused = self._alarm(
            "ScheduleAutoPaused", name=f"{self._title}-schedule-auto-paused",
            metric=timekeeper_metric(obs.SCHEDULE_AUTO_PAUSED),
            threshold=0, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cw.TreatMissingData.NOT_BREACHING,
            description="A schedule was paused after repeated failures; its owner was notified.")
        self.dashboard = self._dashboard(self._title, pipelines)

    def _alarm(self, construct_id: str, *, name: str, metric: cw.IMetric, threshold: float,
               comparison: cw.ComparisonOperator, missing: cw.TreatMissingData, description: str,
               scope: Construct | None = None) -> cw.Alarm:
        alarm = cw.Alarm(scope or self, construct_id, alarm_name=name, metric=metric, threshold=threshold,
                         comparison_operator=comparison, evaluation_periods=1, datapoints_to_alarm=1,
                         treat_missing_data=missing, alarm_description=description)
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        return alarm

    def _pipeline_alarms(self, resources: PipelineResources) -> PipelineAlarms:
        p = resources.pipeline
        scope = Construct(self, p.name)
        dispatcher = resources.dispatcher.function
        consumer = resources.consumer.function
        errors_above_zero = {"threshold": 0, "comparison": cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                             "missing": cw.TreatMissingData.NOT_BREACHING, "scope": scope}
        silence_window = Duration.minutes(p.dispatcher_silence_alarm_minutes)
        named = f"{self._title}-{p.name}"
        dlq = resources.queues.dead_letter_queue
        return PipelineAlarms(
            dispatcher_silence=self._alarm(
                "DispatcherSilence", name=f"{named}-dispatcher-silence",
                metric=dispatcher.metric_invocations(
                    statistic="Sum", period=Duration.minutes(p.dispatcher_silence_alarm_minutes)),
                threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING, scope=scope,
                description=f"The {p.name} dispatcher was not invoked for {p.dispatcher_silence_alarm_minutes} "
                            "minutes: its rule is disabled or deleted, or Lambda throttles it."),
            dispatcher_heartbeat=self._alarm(
                "DispatcherHeartbeat", name=f"{named}-dispatcher-heartbeat",
                metric=pipeline_metric(obs.DISPATCHER_HEARTBEAT, p.name, period=silence_window),
                threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING, scope=scope,
                description=f"No {p.name} dispatcher pass completed for {p.dispatcher_silence_alarm_minutes} "
                            "minutes: it runs but fails (database, queue, code) or is not invoked at all."),
            dispatcher_errors=self._alarm(
                "DispatcherErrors", name=f"{named}-dispatcher-errors",
                metric=dispatcher.metric_errors(statistic="Sum", period=_period()), **errors_above_zero,
                description=f"A {p.name} dispatcher pass failed (database, queue or code): no runs were "
                            "claimed or offered by it."),
            queue_age=self._alarm(
                "QueueAge", name=f"{named}-queue-age",
                metric=resources.queues.queue.metric_approximate_age_of_oldest_message(
                    statistic="Maximum", period=_period()),
                threshold=p.queue_age_alarm_s, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, scope=scope,
                description=f"The oldest {p.name} run message waited over {p.queue_age_alarm_s} s: the "
                            "consumer is failing, throttled or too slow for the load."),
            dlq_depth=self._alarm(
                "DlqDepth", name=f"{named}-dlq-depth",
                metric=dlq.metric_approximate_number_of_messages_visible(
                    statistic="Maximum", period=_period()), **errors_above_zero,
                description=f"{p.name} run messages reached the dead-letter queue after "
                            f"{p.max_receive_count} receives: inspect, fix, then redrive."),
            dlq_arrivals=self._alarm(
                "DlqArrivals", name=f"{named}-dlq-arrivals",
                metric=cw.MathExpression(
                    expression="DIFF(depth)", label="messages newly in the DLQ", period=_period(),
                    using_metrics={"depth": dlq.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=_period())}),
                **errors_above_zero,
                description=f"More {p.name} run messages reached the dead-letter queue (its depth grew), even "
                            "while older ones are still there: inspect the new ones."),
            consumer_errors=self._alarm(
                "ConsumerErrors", name=f"{named}-consumer-errors",
                metric=consumer.metric_errors(statistic="Sum", period=_period()), **errors_above_zero,
                description=f"A whole {p.name} consumer batch failed (an uncaught error, a timeout or "
                            "the database): its messages return to the queue."),
        )

    def _dashboard(self, name: str, pipelines: list[PipelineResources]) -> cw.Dashboard:
        dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=name,
                                 default_interval=Duration.hours(3))
        every_alarm = [alarm for alarms in [*self.pipeline_alarms.values(), *self.work_queue_alarms.values()]
                       for alarm in alarms.all()]
        dashboard.add_widgets(
            cw.TextWidget(markdown=(
                "# Timekeeper\nOne row per pipeline of `timekeeper.topology`. Alarms and the operator's "
                "actions: README.md."), width=24, height=2))
        dashboard.add_widgets(
            cw.AlarmStatusWidget(title="Alarms", alarms=[*every_alarm, self.auto_paused], width=8, height=6),
            cw.GraphWidget(title="All pipelines: dispatcher passes", width=8, height=6,
                           left=[timekeeper_metric(m) for m in DISPATCHER_METRICS]),
            cw.GraphWidget(title="All pipelines: run outcomes and auto-pauses", width=8, height=6,
                           left=[timekeeper_metric(m) for m in OUTCOME_METRICS]),
        )
        for resources in pipelines:
            dashboard.add_widgets(*self._pipeline_row(resources))
        for queue_resources in self.work_queues:
            dashboard.add_widgets(*self._work_queue_row(queue_resources))
        return dashboard

    def _work_queue_alarms(self, resources: WorkQueueResources) -> WorkQueueAlarms:
        q = resources.work_queue
        scope = Construct(self, q.name)
        consumer = resources.consumer.function
        dlq = resources.queues.dead_letter_queue
        above_zero = {"threshold": 0, "comparison": cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                      "missing": cw.TreatMissingData.NOT_BREACHING, "scope": scope}
        named = f"{self._title}-{q.name}"
        return WorkQueueAlarms(
            queue_age=self._alarm(
                "QueueAge", name=f"{named}-queue-age",
                metric=resources.queues.queue.metric_approximate_age_of_oldest_message(
                    statistic="Maximum", period=_period()),
                threshold=q.queue_age_alarm_s, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, scope=scope,
                description=f"The oldest {q.name} message waited over {q.queue_age_alarm_s} s: the consumer is "
                            "failing, throttled or too slow for the load."),
            dlq_depth=self._alarm(
                "DlqDepth", name=f"{named}-dlq-depth",
                metric=dlq.metric_approximate_number_of_messages_visible(statistic="Maximum", period=_period()),
                **above_zero,
                description=f"{q.name} messages reached the dead-letter queue after {q.max_receive_count} "
                            "receives (malformed, or their settlement failed): inspect, fix, then redrive."),
            dlq_arrivals=self._alarm(
                "DlqArrivals", name=f"{named}-dlq-arrivals",
                metric=cw.MathExpression(
                    expression="DIFF(depth)", label="messages newly in the DLQ", period=_period(),
                    using_metrics={"depth": dlq.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=_period())}),
                **above_zero,
                description=f"More {q.name} messages reached the dead-letter queue (its depth grew), even while "
                            "older ones are still there: inspect the new ones."),
            consumer_errors=self._alarm(
                "ConsumerErrors", name=f"{named}-consumer-errors",
                metric=consumer.metric_errors(statistic="Sum", period=_period()), **above_zero,
                description=f"A {q.name} consumer invocation failed (a timeout, memory, or the database "
                            "unreachable): its messages return to the queue."),
        )

    def _work_queue_row(self, resources: WorkQueueResources) -> list[cw.IWidget]:
        q = resources.work_queue
        consumer = resources.consumer.function
        queue, dlq = resources.queues.queue, resources.queues.dead_letter_queue
        period = _period()
        return [
            cw.TextWidget(markdown=f"## Work queue `{q.name}` (consumer max concurrency {q.max_concurrency}, "
                                   f"batch {q.batch_size}, {q.max_receive_count} receives)", width=24, height=1),
            cw.GraphWidget(title=f"{q.name}: queue age (s) and DLQ depth", width=8, height=6,
                           left=[queue.metric_approximate_age_of_oldest_message(
                               statistic="Maximum", period=period, label="oldest message age (s)")],
                           right=[dlq.metric_approximate_number_of_messages_visible(
                               statistic="Maximum", period=period, label="DLQ messages")],
                           left_annotations=[cw.HorizontalAnnotation(value=q.queue_age_alarm_s, label="age alarm")]),
            cw.GraphWidget(title=f"{q.name}: messages sent and received", width=8, height=6,
                           left=[queue.metric_number_of_messages_sent(statistic="Sum", period=period, label="sent"),
                                 queue.metric_number_of_messages_received(statistic="Sum", period=period,
                                                                          label="received")]),
            cw.GraphWidget(title=f"{q.name}: consumer", width=8, height=6,
                           left=[consumer.metric_invocations(statistic="Sum", period=period, label="invocations"),
                                 consumer.metric_errors(statistic="Sum", period=period, label="errors"),
                                 consumer.metric_throttles(statistic="Sum", period=period, label="throttles")],
                           right=[consumer.metric_duration(statistic="p95", period=period,
                                                           label="duration p95 (ms)"),
                                  consumer.metric_duration(statistic="Maximum", period=period,
                                                           label="duration max (ms)")]),
        ]

    def _pipeline_row(self, resources: PipelineResources) -> list[cw.IWidget]:
        p = resources.pipeline
        dispatcher, consumer = resources.dispatcher.function, resources.consumer.function
        queue, dlq = resources.queues.queue, resources.queues.dead_letter_queue
        period = _period()
        return [
            cw.TextWidget(markdown=f"## Pipeline `{p.name}` (rule rate {p.rule_rate_minutes} min, consumer "
                                   f"max concurrency {p.max_concurrency}, {p.max_receive_count} receives)",
                          width=24, height=1),
            cw.GraphWidget(title=f"{p.name}: claims, publishes, refusals", width=6, height=6, left=[
                pipeline_search(obs.SCHEDULES_CLAIMED, p.name, label="claimed"),
                pipeline_search(obs.RUNS_PUBLISHED, p.name, label="published"),
                pipeline_search(obs.PUBLISH_REFUSED, p.name, label="refused"),
                pipeline_search(obs.RUNS_REOFFERED, p.name, label="reoffered")]),
            cw.GraphWidget(title=f"{p.name}: outcomes by kind", width=6, height=6, left=[
                pipeline_search(obs.RUN_SUCCEEDED, p.name, label="succeeded"),
                pipeline_search(obs.RUN_SKIPPED, p.name, label="skipped"),
                pipeline_search(obs.RUN_FAILED, p.name, label="failed")]),
            cw.GraphWidget(title=f"{p.name}: queue age (s) and DLQ depth", width=6, height=6,
                           left=[queue.metric_approximate_age_of_oldest_message(
                               statistic="Maximum", period=period, label="oldest message age (s)")],
                           right=[dlq.metric_approximate_number_of_messages_visible(
                               statistic="Maximum", period=period, label="DLQ messages")],
                           left_annotations=[cw.HorizontalAnnotation(value=p.queue_age_alarm_s,
                                                                     label="age alarm")]),
            cw.GraphWidget(title=f"{p.name}: dispatcher and consumer", width=6, height=6,
                           left=[dispatcher.metric_invocations(statistic="Sum", period=period,
                                                               label="dispatcher invocations"),
                                 dispatcher.metric_errors(statistic="Sum", period=period, label="dispatcher errors"),
                                 consumer.metric_errors(statistic="Sum", period=period, label="consumer errors")],
                           right=[consumer.metric_duration(statistic="p95", period=period,
                                                           label="consumer duration p95 (ms)"),
                                  consumer.metric_duration(statistic="Maximum", period=period,
                                                           label="consumer duration max (ms)")]),
        ]
