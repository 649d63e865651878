"""Alarms and the dashboard: the :class:`Monitoring` construct builds every alarm and
assembles the dashboard from the rows of :mod:`infra.dashboard`.

The metrics are :mod:`infra.metrics`' (names and namespace from
:mod:`timekeeper.observability`, the same constants the code emits; the ``service``
dimension is the one Powertools adds). Thresholds come from the topology; the period of
every alarm but dispatcher silence is :data:`infra.settings.ALARM_PERIOD_MINUTES`.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra import dashboard as dashboard_rows
from infra import settings
from infra.alarms import (
    ALARM_DATAPOINTS,
    ALARM_EVALUATION_PERIODS,
    DURATION_ALARM_SHARE,
    ERROR_RATE_ALARM_PERCENT,
    ERROR_RATE_MIN_INVOCATIONS,
    LONG_FUNCTION_TIMEOUT_S,
    SES_THROTTLED_ALARM_COUNT,
    ApiAlarms,
    DatabaseAlarms,
    MailAlarms,
    PipelineAlarms,
    RendererAlarms,
    WorkQueueAlarms,
    error_rate,
    rate_of,
    with_runbook,
)
from infra.api import HttpApi
from infra.database import AuroraDatabase, Network
from infra.mail import MailResources
from infra.metrics import (
    DISPATCHER_METRICS,
    OUTCOME_METRICS,
    alarm_period,
    pipeline_metric,
    proxy_metric,
    ses_metric,
    timekeeper_metric,
)
from infra.nat import NAT_FORWARDING_METRIC
from infra.pipeline import PipelineResources
from infra.renderer import ReportRendererResources
from infra.snapshots import SnapshotResources
from infra.work_queue import WorkQueueResources
from timekeeper import observability as obs
from timekeeper.topology import CONNECT_TIMEOUT_S, connection_budget


class Monitoring(Construct):
    """Per pipeline: dispatcher silence (no invocation in the topology's window, missing data
    breaching), dispatcher heartbeat (no successful pass in that window, missing data
    breaching), dispatcher errors, queue age above the topology's threshold, DLQ depth > 0,
    DLQ arrivals (the depth grew: fires again for a new poison message while the depth alarm
    is still in ALARM), consumer errors; for the application: ScheduleAutoPaused > 0. Every
    alarm notifies ``topic`` when it fires and when it clears; alarm and dashboard names
    start with the capitalized ``name_prefix``. One dashboard with a row per pipeline. Per
    work queue (``work_queues``): queue age, DLQ depth, DLQ arrivals and consumer errors,
    and a dashboard row. The renderer's on-failure queue alarms on depth and on arrivals
    (a second failure notifies again, as a DLQ does). ``api``: its function's errors and
    throttles, API Gateway's 5XX answers and p95 latency, and a dashboard row.
    ``database`` (the created one; None for an existing database): Aurora's ACU
    utilisation and connections, RDS Proxy's client connections and borrow latency, and a
    dashboard row. ``mail``: the configuration set's bounce and complaint rates.
    ``network`` with a NAT instance: its status checks (missing data breaching)."""

    def __init__(self, scope: Construct, construct_id: str, *, pipelines: list[PipelineResources],
                 topic: sns.ITopic, name_prefix: str = "timekeeper", snapshots: SnapshotResources | None = None,
                 renderer: ReportRendererResources | None = None,
                 work_queues: list[WorkQueueResources] | None = None, delivery: Any = None,
                 api: HttpApi | None = None, database: AuroraDatabase | None = None,
                 mail: MailResources | None = None, network: Network | None = None,
                 message_events: Any = None):
        super().__init__(scope, construct_id)
        self._action = actions.SnsAction(topic)
        self._title = name_prefix.capitalize()
        self.pipeline_alarms: dict[str, PipelineAlarms] = {}
        for resources in pipelines:
            self.pipeline_alarms[resources.pipeline.name] = self._pipeline_alarms(resources)
        self.snapshots = snapshots
        self.snapshot_alarms: dict[str, cw.Alarm] = self._snapshot_alarms(snapshots) if snapshots else {}
        self.renderer = renderer
        self.renderer_alarms = self._renderer_alarms(renderer) if renderer is not None else None
        self.work_queues = list(work_queues or [])
        self.work_queue_alarms: dict[str, WorkQueueAlarms] = {
            r.work_queue.name: self._work_queue_alarms(r) for r in self.work_queues}
        self.auto_paused = self._alarm(
            "ScheduleAutoPaused", name=f"{self._title}-schedule-auto-paused",
            metric=timekeeper_metric(obs.SCHEDULE_AUTO_PAUSED),
            threshold=0, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cw.TreatMissingData.NOT_BREACHING,
            description="A schedule was paused after repeated failures; its owner was notified.")
        self.delivery_failed = None
        if delivery is not None:
            self.delivery_failed = self._alarm(
                "DeliveryFailed", name=f"{self._title}-delivery-failed",
                metric=timekeeper_metric(obs.DELIVERY_FAILED),
                threshold=0, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING,
                description="Scheduled delivery: a recipient's message could not be submitted (the run is retried; "
                            "see the run's query_deliveries rows).")
        #: SES throttling the delivery sender (``SesThrottled``), when delivery is built.
        self.mail_throttled = None
        if delivery is not None:
            self.mail_throttled = self._alarm(
                "MailThrottled", name=f"{self._title}-mail-throttled",
                metric=timekeeper_metric(obs.SES_THROTTLED), threshold=SES_THROTTLED_ALARM_COUNT,
                comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD, missing=cw.TreatMissingData.NOT_BREACHING,
                periods=ALARM_EVALUATION_PERIODS, datapoints=ALARM_DATAPOINTS,
                description=f"SES throttled the delivery sender more than {SES_THROTTLED_ALARM_COUNT} times in "
                            f"{ALARM_DATAPOINTS} of {ALARM_EVALUATION_PERIODS} five-minute periods (metric "
                            f"{obs.SES_THROTTLED}): the sending rate or the daily quota is reached; deliveries slow "
                            "down and continue in later receives.")
        self.posting_jobs_failed = self._posting_jobs_failed_alarm()
        self.api = api
        self.api_alarms = self._api_alarms(api) if api is not None else None
        self.database = database
        self.database_alarms = self._database_alarms(database) if database is not None else None
        self.mail = mail
        self.mail_alarms = self._mail_alarms(mail) if mail is not None else None
        self.nat_instance_alarm = self._nat_instance_alarm(network) if network and network.nat_instance else None
        self.nat_forwarding_alarm = self._nat_forwarding_alarm(network) if network and network.nat_instance else None
        #: The message-events queue's alarms (``queue-age``, ``dlq-depth``, ``dlq-arrivals``,
        #: ``consumer-errors``; names ``<Title>-message-events-...``), when built.
        self.message_event_alarms: dict[str, cw.Alarm] = (
            self._message_event_alarms(message_events) if message_events is not None else {})
        self._pipelines, self._message_events = pipelines, message_events
        #: Every long function's duration-near-timeout alarm, by alarm name.
        self.duration_alarms = self._duration_alarms()
        #: The one page for dispatchers failing together (their error rate and heartbeat alarms).
        self.dispatchers_failing = self._dispatchers_failing()
        self.dashboard = self._dashboard(self._title, pipelines)

    def _posting_jobs_failed_alarm(self) -> cw.Alarm:
        """Owner notices: failed posting jobs nobody retried. Each posting sweep (every five
        minutes) emits the count of every workspace's failed jobs; the alarm fires while it
        is above zero and clears once each was retried and posted. Missing data (no sweep
        yet, or an account without accounting schedules) is not breaching."""
        return self._alarm(
            "PostingJobsFailed", name=f"{self._title}-posting-jobs-failed",
            metric=timekeeper_metric(obs.POSTING_JOBS_FAILED, statistic="Maximum", period=Duration.minutes(10)),
            threshold=0, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cw.TreatMissingData.NOT_BREACHING,
            description="A posting job failed and was not retried: its batch is closed and unposted. The owner "
                        "was notified; list them with GET /posting-jobs/failed, fix the cause, then retry.")

    def _message_event_alarms(self, resources: Any) -> dict[str, cw.Alarm]:
        """The message-events queue (SES's message states): the three queue alarms and its
        consumer's errors."""
        c = resources.queues.built.consumer
        scope = Construct(self, "message-events")
        named = f"{self._title}-message-events"
        queue_age, dlq_depth, dlq_arrivals = self._queue_alarms(
            scope, named=named, what="message event", queue=resources.queues.queue,
            dlq=resources.queues.dead_letter_queue, age_alarm_s=c.queue_age_alarm_s, receives=c.max_receive_count)
        errors = self._error_rate_alarm(
            "ConsumerErrors", name=f"{named}-consumer-errors", function=resources.consumer.function, scope=scope,
            description="Message-events consumer invocations fail: their SES events return to the queue "
                        "(message states and suppressions wait).")
        return {"queue-age": queue_age, "dlq-depth": dlq_depth, "dlq-arrivals": dlq_arrivals,
                "consumer-errors": errors}

    def _alarm(self, construct_id: str, *, name: str, metric: cw.IMetric, threshold: float,
               comparison: cw.ComparisonOperator, missing: cw.TreatMissingData, description: str,
               scope: Construct | None = None, periods: int = 1, datapoints: int | None = None,
               notify: bool = True) -> cw.Alarm:
        """One alarm, its description ending with its runbook's address
        (:func:`infra.alarms.with_runbook`); it notifies the topic when it fires and clears
        unless ``notify`` is False (a member of a composite alarm that notifies instead).
        ``datapoints`` of ``periods`` must breach (default: all)."""
        alarm = cw.Alarm(scope or self, construct_id, alarm_name=name, metric=metric, threshold=threshold,
                         comparison_operator=comparison, evaluation_periods=periods,
                         datapoints_to_alarm=datapoints or periods, treat_missing_data=missing,
                         alarm_description=with_runbook(name, description))
        if notify:
            alarm.add_alarm_action(self._action)
            alarm.add_ok_action(self._action)
        return alarm

    def _error_rate_alarm(self, construct_id: str, *, name: str, function: lambda_.IFunction, description: str,
                          scope: Construct | None = None, notify: bool = True) -> cw.Alarm:
        """``function``'s error rate (:func:`infra.alarms.error_rate`) above
        :data:`~infra.alarms.ERROR_RATE_ALARM_PERCENT` in two of three periods."""
        rule = (f" (over {ERROR_RATE_ALARM_PERCENT} % of its invocations in {ALARM_DATAPOINTS} of "
                f"{ALARM_EVALUATION_PERIODS} periods; a period with fewer than {ERROR_RATE_MIN_INVOCATIONS} "
                "invocations does not count)")
        return self._alarm(
            construct_id, name=name, metric=error_rate(function, label=f"{name}: errors (% of invocations)"),
            threshold=ERROR_RATE_ALARM_PERCENT, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cw.TreatMissingData.NOT_BREACHING, description=description.rstrip(".") + rule + ".",
            scope=scope, periods=ALARM_EVALUATION_PERIODS, datapoints=ALARM_DATAPOINTS, notify=notify)

    def _duration_alarms(self) -> dict[str, cw.Alarm]:
        """Every long function (timeout at least :data:`~infra.alarms.LONG_FUNCTION_TIMEOUT_S`):
        its maximum ``Duration`` above :data:`~infra.alarms.DURATION_ALARM_SHARE` of the
        timeout it was built with (the topology's) in two of three periods. By alarm name."""
        functions = [(f"{r.pipeline.name}-dispatcher" + (f"-p{i}" if i else ""), d)
                     for r in self._pipelines for i, d in enumerate(r.dispatchers)]
        functions += [(f"{r.pipeline.name}-consumer", r.consumer) for r in self._pipelines]
        functions += [(f"{r.work_queue.name}-consumer", r.consumer) for r in self.work_queues]
        if self.renderer is not None:
            functions.append((self.renderer.renderer.name, self.renderer.function))
        if self.snapshots is not None:
            name = self.snapshots.pipeline.name
            functions += [(f"{name}-dispatcher", self.snapshots.dispatcher),
                          (f"{name}-planner", self.snapshots.planner), (f"{name}-job", self.snapshots.job)]
        if self._message_events is not None:
            functions.append(("message-events-consumer", self._message_events.consumer))
        scope = Construct(self, "duration")
        alarms = {}
        for what, function in functions:
            if function.timeout_s < LONG_FUNCTION_TIMEOUT_S:
                continue
            limit_ms = int(DURATION_ALARM_SHARE * function.timeout_s * 1000)
            name = f"{self._title}-{what}-duration"
            alarms[name] = self._alarm(
                name.removeprefix(f"{self._title}-"), name=name, scope=scope,
                metric=function.function.metric_duration(statistic="Maximum", period=alarm_period()),
                threshold=limit_ms, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, periods=ALARM_EVALUATION_PERIODS,
                datapoints=ALARM_DATAPOINTS,
                description=f"The {what} function ran over {limit_ms / 1000:g} s of its {function.timeout_s} s "
                            f"timeout in {ALARM_DATAPOINTS} of {ALARM_EVALUATION_PERIODS} periods: it is about "
                            "to time out (a slower database or service, or more work per invocation).")
        return alarms

    def _dispatchers_failing(self) -> cw.CompositeAlarm:
        """One page when dispatchers fail together (the database or the proxy unreachable
        raises every dispatcher's error rate and heartbeat alarms): any of them in ALARM."""
        members = [alarm for alarms in self.pipeline_alarms.values()
                   for alarm in (alarms.dispatcher_errors, alarms.dispatcher_heartbeat,
                                 *(errors for _, errors in alarms.partitions))]
        name = f"{self._title}-dispatchers-failing"
        composite = cw.CompositeAlarm(
            self, "DispatchersFailing", composite_alarm_name=name, alarm_rule=cw.AlarmRule.any_of(*members),
            alarm_description=with_runbook(name, "Dispatcher passes fail (error rate) or none completes "
                                                 "(heartbeat): one cause, the database, the proxy or a deploy, "
                                                 "usually raises several; the members in ALARM say which."))
        composite.add_alarm_action(self._action)
        composite.add_ok_action(self._action)
        return composite

    def _queue_alarms(self, scope: Construct, *, named: str, what: str, queue: Any, dlq: Any, age_alarm_s: int,
                      receives: int) -> tuple[cw.Alarm, cw.Alarm, cw.Alarm]:
        """The three alarms every queue with a dead-letter queue gets: the oldest message's age
        above ``age_alarm_s``, the DLQ's depth above zero, and new arrivals in the DLQ (its
        depth grew: fires again for a new dead letter while the depth alarm is still in
        ALARM). Names ``<named>-queue-age``, ``-dlq-depth``, ``-dlq-arrivals``."""
        above_zero = {"threshold": 0, "comparison": cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                      "missing": cw.TreatMissingData.NOT_BREACHING, "scope": scope}
        depth = dlq.metric_approximate_number_of_messages_visible(statistic="Maximum", period=alarm_period())
        return (
            self._alarm(
                "QueueAge", name=f"{named}-queue-age",
                metric=queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=alarm_period()),
                threshold=age_alarm_s, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, scope=scope,
                description=f"The oldest {what} message waited over {age_alarm_s} s: its consumer is failing, "
                            "throttled or too slow for the load."),
            self._alarm(
                "DlqDepth", name=f"{named}-dlq-depth", metric=depth, **above_zero,
                description=f"{what} messages reached the dead-letter queue after {receives} receives: "
                            "inspect, fix, then redrive."),
            self._arrivals_alarm(
                scope, "DlqArrivals", name=f"{named}-dlq-arrivals", depth=depth,
                description=f"More {what} messages reached the dead-letter queue (its depth grew), even while "
                            "older ones are still there: inspect the new ones."),
        )

    def _arrivals_alarm(self, scope: Construct, construct_id: str, *, name: str, depth: cw.IMetric,
                        description: str) -> cw.Alarm:
        """An alarm on new arrivals in a queue of failures: its visible depth (``depth``)
        grew during a period (``DIFF`` above zero), so a second failure notifies again while
        the depth alarm is still in ALARM."""
        return self._alarm(
            construct_id, name=name, scope=scope,
            metric=cw.MathExpression(expression="DIFF(depth)", label="messages newly in the queue",
                                     period=alarm_period(), using_metrics={"depth": depth}),
            threshold=0, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cw.TreatMissingData.NOT_BREACHING, description=description)

    def _pipeline_alarms(self, resources: PipelineResources) -> PipelineAlarms:
        p = resources.pipeline
        scope = Construct(self, p.name)
        dispatcher = resources.dispatcher.function
        consumer = resources.consumer.function
        silence_window = Duration.minutes(p.dispatcher_silence_alarm_minutes)
        named = f"{self._title}-{p.name}"
        queue_age, dlq_depth, dlq_arrivals = self._queue_alarms(
            scope, named=named, what=f"{p.name} run", queue=resources.queues.queue,
            dlq=resources.queues.dead_letter_queue, age_alarm_s=p.consumer.queue_age_alarm_s,
            receives=p.consumer.max_receive_count)
        def silence(function: lambda_.IFunction, construct_id: str, alarm_name: str, which: str) -> cw.Alarm:
            return self._alarm(
                construct_id, name=alarm_name,
                metric=function.metric_invocations(
                    statistic="Sum", period=Duration.minutes(p.dispatcher_silence_alarm_minutes)),
                threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING, scope=scope,
                description=f"The {p.name} dispatcher{which} was not invoked for {p.dispatcher_silence_alarm_minutes} "
                            "minutes: its rule is disabled or deleted, or Lambda throttles it.")

        def errors(function: lambda_.IFunction, construct_id: str, alarm_name: str, which: str) -> cw.Alarm:
            return self._error_rate_alarm(
                construct_id, name=alarm_name, function=function, scope=scope, notify=False,
                description=f"{p.name} dispatcher{which} passes fail (database, queue or code): no runs are "
                            "claimed or offered by them. Notifies through the dispatchers-failing alarm.")

        partitions = [
            (silence(d.function, f"DispatcherSilence{i}", f"{named}-dispatcher-silence-p{i}", f" partition {i}"),
             errors(d.function, f"DispatcherErrors{i}", f"{named}-dispatcher-errors-p{i}", f" partition {i}"))
            for i, d in enumerate(resources.dispatchers) if i]
        first = " partition 0" if partitions else ""
        return PipelineAlarms(
            dispatcher_silence=silence(dispatcher, "DispatcherSilence", f"{named}-dispatcher-silence", first),
            dispatcher_heartbeat=self._alarm(
                "DispatcherHeartbeat", name=f"{named}-dispatcher-heartbeat",
                metric=pipeline_metric(obs.DISPATCHER_HEARTBEAT, p.name, period=silence_window),
                threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING, scope=scope, notify=False,
                description=f"No {p.name} dispatcher pass completed for {p.dispatcher_silence_alarm_minutes} "
                            "minutes: it runs but fails (database, queue, code) or is not invoked at all. "
                            "Notifies through the dispatchers-failing alarm."),
            dispatcher_errors=errors(dispatcher, "DispatcherErrors", f"{named}-dispatcher-errors", first),
            queue_age=queue_age, dlq_depth=dlq_depth, dlq_arrivals=dlq_arrivals,
            consumer_errors=self._error_rate_alarm(
                "ConsumerErrors", name=f"{named}-consumer-errors", function=consumer, scope=scope,
                description=f"Whole {p.name} consumer batches fail (an uncaught error, a timeout or "
                            "the database): its messages return to the queue."),
            partitions=partitions,
            run_failure_rate=self._run_failure_rate_alarm(scope, p, named),
        )

    def _run_failure_rate_alarm(self, scope: Construct, p: Any, named: str) -> cw.Alarm:
        """The pipeline's failure rate: its failed runs as a percentage of its settled runs
        (``RunFailed``, ``RunSucceeded``, ``RunSkipped`` with the pipeline's dimension, summed
        per alarm period), counted only in a period that settled at least
        ``failure_rate_alarm_min_runs`` runs, above ``failure_rate_alarm_percent`` in
        ``failure_rate_alarm_periods`` periods in a row. A lone failure never fires it (its
        owner is told); a work kind or dependency failing for many schedules does."""
        period = alarm_period()
        outcomes = {"failed": obs.RUN_FAILED, "succeeded": obs.RUN_SUCCEEDED, "skipped": obs.RUN_SKIPPED}
        runs = "(FILL(failed, 0) + FILL(succeeded, 0) + FILL(skipped, 0))"
        rate = cw.MathExpression(
            expression=f"IF({runs} >= {p.failure_rate_alarm_min_runs}, 100 * FILL(failed, 0) / {runs}, 0)",
            label=f"{p.name}: failed runs (% of settled runs)", period=period,
            using_metrics={key: pipeline_metric(name, p.name, period=period) for key, name in outcomes.items()})
        minutes = p.failure_rate_alarm_periods * settings.ALARM_PERIOD_MINUTES
        return self._alarm(
            "RunFailureRate", name=f"{named}-run-failure-rate", metric=rate, scope=scope,
            threshold=p.failure_rate_alarm_percent, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cw.TreatMissingData.NOT_BREACHING, periods=p.failure_rate_alarm_periods,
            description=f"More than {p.failure_rate_alarm_percent} % of the {p.name} pipeline's runs failed in "
                        f"each of {p.failure_rate_alarm_periods} periods in a row ({minutes} minutes; periods with "
                        f"fewer than {p.failure_rate_alarm_min_runs} runs do not count): a work kind or what it "
                        "calls fails for many schedules. The dashboard's outcomes by kind say which.")
    def _dashboard(self, name: str, pipelines: list[PipelineResources]) -> cw.Dashboard:
        dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=name,
                                 default_interval=Duration.hours(3))
        every_alarm = [alarm for alarms in self.pipeline_alarms.values() for alarm in alarms.all()]
        every_alarm += list(self.snapshot_alarms.values())
        if self.renderer_alarms is not None:
            every_alarm += self.renderer_alarms.all()
        if self.delivery_failed is not None:
            every_alarm.append(self.delivery_failed)
        every_alarm += [alarm for alarms in self.work_queue_alarms.values() for alarm in alarms.all()]
        for group in (self.api_alarms, self.database_alarms, self.mail_alarms):
            if group is not None:
                every_alarm += group.all()
        if self.nat_instance_alarm is not None:
            every_alarm.append(self.nat_instance_alarm)
        if self.nat_forwarding_alarm is not None:
            every_alarm.append(self.nat_forwarding_alarm)
        every_alarm += [*self.duration_alarms.values(), self.dispatchers_failing]
        dashboard.add_widgets(
            cw.TextWidget(markdown=(
                "# Timekeeper\nOne row per pipeline of `timekeeper.topology`. Alarms and the operator's "
                "actions: docs/operations.md (each alarm's runbook is its own section there)."), width=24, height=2))
        dashboard.add_widgets(
            cw.AlarmStatusWidget(title="Alarms", alarms=[*every_alarm, self.auto_paused], width=8, height=6),
            cw.GraphWidget(title="All pipelines: dispatcher passes", width=8, height=6,
                           left=[timekeeper_metric(m) for m in DISPATCHER_METRICS]),
            cw.GraphWidget(title="All pipelines: run outcomes and auto-pauses", width=8, height=6,
                           left=[timekeeper_metric(m) for m in OUTCOME_METRICS]),
        )
        for resources in pipelines:
            dashboard.add_widgets(*dashboard_rows.pipeline_row(resources))
        if self.snapshots is not None:
            dashboard.add_widgets(*dashboard_rows.snapshot_row(self.snapshots))
        if self.renderer is not None:
            dashboard.add_widgets(*dashboard_rows.renderer_row(self.renderer))
        for queue_resources in self.work_queues:
            dashboard.add_widgets(*dashboard_rows.work_queue_row(queue_resources))
        if self.api is not None:
            dashboard.add_widgets(*dashboard_rows.api_row(self.api))
        if self.database is not None:
            dashboard.add_widgets(*dashboard_rows.database_row(self.database))
        if self.mail is not None:
            dashboard.add_widgets(*dashboard_rows.mail_row(self.mail))
        return dashboard

    def _snapshot_alarms(self, resources: SnapshotResources) -> dict[str, cw.Alarm]:
        """The snapshot pipeline's alarms, by name suffix."""
        p = resources.pipeline
        scope = Construct(self, p.name)
        named = f"{self._title}-{p.name}"
        above_zero = {"threshold": 0, "comparison": cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                      "missing": cw.TreatMissingData.NOT_BREACHING, "scope": scope}
        silence = Duration.minutes(p.dispatcher_silence_alarm_minutes)
        planner_silence = Duration.minutes(2 * p.planner_rate_minutes)
        queue_age, dlq_depth, dlq_arrivals = self._queue_alarms(
            scope, named=named, what="snapshot job", queue=resources.queue, dlq=resources.dead_letter_queue,
            age_alarm_s=p.consumer.queue_age_alarm_s, receives=p.consumer.max_receive_count)
        return {
            "dispatcher-silence": self._alarm(
                "DispatcherSilence", name=f"{named}-dispatcher-silence",
                metric=resources.dispatcher.function.metric_invocations(statistic="Sum", period=silence),
                threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING, scope=scope,
                description=f"The snapshot dispatcher was not invoked for {p.dispatcher_silence_alarm_minutes} "
                            "minutes: planned runs are not admitted."),
            "dispatcher-heartbeat": self._alarm(
                "DispatcherHeartbeat", name=f"{named}-dispatcher-heartbeat",
                metric=timekeeper_metric(obs.SNAPSHOT_DISPATCHER_HEARTBEAT, period=silence),
                threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING, scope=scope,
                description="No snapshot dispatcher pass completed recently: it runs but fails, or is not invoked."),
            "planner-silence": self._alarm(
                "PlannerSilence", name=f"{named}-planner-silence",
                metric=resources.planner.function.metric_invocations(statistic="Sum", period=planner_silence),
                threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING, scope=scope,
                description=f"The snapshot planner was not invoked for {2 * p.planner_rate_minutes} minutes."),
            "planner-errors": self._alarm(
                "PlannerErrors", name=f"{named}-planner-errors",
                metric=resources.planner.function.metric_errors(statistic="Sum", period=alarm_period()), **above_zero,
                description="A snapshot planner pass failed: completed months may not be planned."),
            "job-errors": self._error_rate_alarm(
                "JobErrors", name=f"{named}-job-errors", function=resources.job.function, scope=scope,
                description="Snapshot run job invocations fail as a whole (timeout, memory, database)."),
            "queue-age": queue_age, "dlq-depth": dlq_depth, "dlq-arrivals": dlq_arrivals,
            "overdue": self._alarm(
                "Overdue", name=f"{named}-overdue",
                metric=timekeeper_metric(obs.SNAPSHOT_OVERDUE, statistic="Maximum",
                                         period=Duration.minutes(p.planner_rate_minutes)),
                **above_zero,
                description=f"A snapshot period is not published {p.overdue_grace_hours} hours after its "
                            "workspace-local month end (the planner's log names the periods)."),
            "failed": self._alarm(
                "Failed", name=f"{named}-failed", metric=timekeeper_metric(obs.SNAPSHOT_FAILED), **above_zero,
                description="A snapshot run failed for good (validation, or its fourth retryable failure: a "
                            "lost job found by the dispatcher included)."),
        }

    def _renderer_alarms(self, resources: ReportRendererResources) -> RendererAlarms:
        r = resources.renderer
        scope = Construct(self, r.name)
        function = resources.function.function
        above_zero = {"threshold": 0, "comparison": cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                      "missing": cw.TreatMissingData.NOT_BREACHING, "scope": scope}
        named = f"{self._title}-{r.name}"
        depth = resources.failure_queue.metric_approximate_number_of_messages_visible(
            statistic="Maximum", period=alarm_period())
        return RendererAlarms(
            errors=self._error_rate_alarm(
                "Errors", name=f"{named}-errors", function=function, scope=scope,
                description="Report renders raise (database, S3, code or timeout): Lambda retries it "
                            f"{r.retry_attempts} times; the render's row shows attempts and any recorded failure."),
            throttles=self._alarm(
                "Throttles", name=f"{named}-throttles",
                metric=function.metric_throttles(statistic="Sum", period=alarm_period()), **above_zero,
                description=f"Report renders waited for the renderer's {r.reserved_concurrency} concurrent "
                            f"executions; past {r.max_event_age_s} s an event goes to the on-failure queue."),
            failed_events=self._alarm(
                "FailedEvents", name=f"{named}-failed-events", metric=depth, **above_zero,
                description="Lambda gave up on render requests (every attempt failed, or they waited too "
                            "long): they are in the renderer's on-failure queue; callers may request them again."),
            failed_arrivals=self._arrivals_alarm(
                scope, "FailedArrivals", name=f"{named}-failed-arrivals", depth=depth,
                description="Lambda gave up on more render requests (the on-failure queue grew), even while "
                            "older ones are still there: inspect the new ones."),
        )

    def _api_alarms(self, api: HttpApi) -> ApiAlarms:
        scope = Construct(self, "api")
        function = api.function.function
        stage = api.api.deployment_stage
        above_zero = {"threshold": 0, "comparison": cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                      "missing": cw.TreatMissingData.NOT_BREACHING, "scope": scope}
        named = f"{self._title}-api"
        return ApiAlarms(
            errors=self._error_rate_alarm(
                "Errors", name=f"{named}-errors", function=function, scope=scope,
                description="The API function raises or times out (bad input is a 422, never an error): callers "
                            "get a 502 or 504."),
            throttles=self._alarm(
                "Throttles", name=f"{named}-throttles",
                metric=function.metric_throttles(statistic="Sum", period=alarm_period()), **above_zero,
                description="API requests found every reserved execution of the API function busy: callers "
                            "got a 500 (raise its reserved concurrency with the connection budget)."),
            server_errors=self._alarm(
                "ServerErrors", name=f"{named}-5xx", scope=scope,
                metric=rate_of(stage.metric_server_error(statistic="Sum", period=alarm_period()),
                               stage.metric_count(statistic="Sum", period=alarm_period()),
                               label="API: 5XX answers (% of requests)"),
                threshold=ERROR_RATE_ALARM_PERCENT, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, periods=ALARM_EVALUATION_PERIODS,
                datapoints=ALARM_DATAPOINTS,
                description=f"API Gateway answered 5XX to over {ERROR_RATE_ALARM_PERCENT} % of requests in "
                            f"{ALARM_DATAPOINTS} of {ALARM_EVALUATION_PERIODS} periods (the function failed, timed "
                            "out or was throttled, or the authorizer failed)."),
            latency=self._alarm(
                "Latency", name=f"{named}-latency",
                metric=stage.metric_latency(statistic="p95", period=alarm_period()),
                threshold=settings.API_LATENCY_ALARM_MS, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, scope=scope,
                description=f"The API's p95 latency exceeded {settings.API_LATENCY_ALARM_MS} ms: the database, "
                            "the proxy or a called service is slow."),
            download_errors=self._error_rate_alarm(
                "DownloadErrors", name=f"{named}-downloads-errors", function=api.downloads.function, scope=scope,
                description="The public download function raises or times out: recipients opening a link got "
                            "a 502 or 504 instead of their file (a lost or expired file is a 404 or 410, never "
                            "an error)."),
            download_throttles=self._alarm(
                "DownloadThrottles", name=f"{named}-downloads-throttles",
                metric=api.downloads.function.metric_throttles(statistic="Sum", period=alarm_period()), **above_zero,
                description="Download requests found every reserved execution of the download function busy: "
                            "recipients got a 500 (a burst of link openings, or a scraper: see the stage "
                            "throttle and the optional rate rule)."),
            authorizer_errors=self._error_rate_alarm(
                "AuthorizerErrors", name=f"{named}-authorizer-errors", function=api.jwt_authorizer.function.function,
                scope=scope,
                description="The JWT authorizer raises or times out (a bad token is a Deny, never an error): "
                            "every caller got a 500, usually because the issuer's JWKS could not be fetched.",
            ) if api.jwt_authorizer is not None else None,
        )

    def _database_alarms(self, database: AuroraDatabase) -> DatabaseAlarms:
        scope = Construct(self, "database")
        budget = connection_budget().total
        named = f"{self._title}-database"
        borrow_alarm_us = int(settings.PROXY_BORROW_ALARM_SHARE * CONNECT_TIMEOUT_S * 1_000_000)
        return DatabaseAlarms(
            capacity=self._alarm(
                "Capacity", name=f"{named}-capacity",
                metric=database.cluster.metric_acu_utilization(statistic="Maximum", period=alarm_period()),
                threshold=settings.AURORA_ACU_ALARM_PERCENT,
                comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, scope=scope,
                description=f"Aurora used over {settings.AURORA_ACU_ALARM_PERCENT} % of its "
                            f"{settings.AURORA_MAX_ACU} ACU maximum: queries slow down at the ceiling."),
            connections=self._alarm(
                "Connections", name=f"{named}-connections",
                metric=database.cluster.metric_database_connections(statistic="Maximum", period=alarm_period()),
                threshold=budget + settings.DB_RESERVED_CONNECTIONS,
                comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, scope=scope,
                description=f"Aurora held more connections than the budget ({budget}) plus "
                            f"{settings.DB_RESERVED_CONNECTIONS} reserved: something connects outside it."),
            proxy_clients=self._alarm(
                "ProxyClients", name=f"{named}-proxy-clients",
                metric=proxy_metric(database, "ClientConnections"), threshold=budget,
                comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, scope=scope,
                description=f"RDS Proxy had more client connections than the connection budget ({budget}): "
                            "concurrency is no longer bounded as the topology says."),
            proxy_borrow_latency=self._alarm(
                "ProxyBorrowLatency", name=f"{named}-proxy-borrow-latency",
                metric=proxy_metric(database, "DatabaseConnectionsBorrowLatency"), threshold=borrow_alarm_us,
                comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                missing=cw.TreatMissingData.NOT_BREACHING, scope=scope,
                description=f"Borrowing a connection from RDS Proxy took over {borrow_alarm_us / 1e6:g} s of "
                            f"the {CONNECT_TIMEOUT_S} s connect timeout: the pool is exhausted or the cluster slow."),
        )

    def _mail_alarms(self, mail: MailResources) -> MailAlarms:
        scope = Construct(self, "mail")
        named = f"{self._title}-mail"
        period = Duration.minutes(settings.SES_REPUTATION_PERIOD_MINUTES)
        common = {"comparison": cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                  "missing": cw.TreatMissingData.NOT_BREACHING, "scope": scope}
        return MailAlarms(
            bounce_rate=self._alarm(
                "BounceRate", name=f"{named}-bounce-rate", metric=ses_metric(mail, "Reputation.BounceRate", period),
                threshold=settings.SES_BOUNCE_RATE_ALARM, **common,
                description=f"Deliveries' bounce rate reached {settings.SES_BOUNCE_RATE_ALARM:.0%}: SES reviews an "
                            "account at 5 % (remove the bouncing recipients; see the run's delivery rows)."),
            complaint_rate=self._alarm(
                "ComplaintRate", name=f"{named}-complaint-rate",
                metric=ses_metric(mail, "Reputation.ComplaintRate", period),
                threshold=settings.SES_COMPLAINT_RATE_ALARM, **common,
                description=f"Deliveries' complaint rate reached {settings.SES_COMPLAINT_RATE_ALARM:.1%}: SES "
                            "reviews an account at 0.1 % and may pause it at 0.5 %."),
        )

    def _nat_instance_alarm(self, network: Network) -> cw.Alarm:
        """The lean profile's NAT instance failed a status check, or reports nothing (stopped,
        terminated): every function's AWS calls but S3's have no route."""
        [instance] = network.nat_instance.gateway_instances  # type: ignore[union-attr]
        return self._alarm(
            "NatInstance", name=f"{self._title}-network-nat-instance",
            metric=cw.Metric(namespace="AWS/EC2", metric_name="StatusCheckFailed", statistic="Maximum",
                             period=alarm_period(), dimensions_map={"InstanceId": instance.instance_id}),
            threshold=0, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cw.TreatMissingData.BREACHING,
            description="The NAT instance failed a status check or reports nothing (stopped, terminated): the "
                        "functions cannot reach SQS, SNS, SES, Lambda or Secrets Manager. Start or replace it "
                        "(redeploy the data stack).")

    def _nat_forwarding_alarm(self, network: Network) -> cw.Alarm:
        """The NAT instance's forwarding heartbeat (:mod:`infra.nat`, one a minute while it
        forwards and masquerades) is absent for a whole alarm period: missing data breaching."""
        [instance] = network.nat_instance.gateway_instances  # type: ignore[union-attr]
        return self._alarm(
            "NatForwarding", name=f"{self._title}-network-nat-forwarding",
            metric=cw.Metric(namespace=obs.NAMESPACE, metric_name=NAT_FORWARDING_METRIC, statistic="SampleCount",
                             period=alarm_period(), dimensions_map={"InstanceId": instance.instance_id}),
            threshold=1, comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cw.TreatMissingData.BREACHING,
            description="The NAT instance did not report forwarding for a whole period: forwarding or the "
                        "masquerade rule is off (its setup unit failed), or it cannot reach AWS. The functions "
                        "cannot reach SQS, SNS, SES, Lambda or Secrets Manager. Runbook: "
                        "docs/operations.md#nat-forwarding")

    def _work_queue_alarms(self, resources: WorkQueueResources) -> WorkQueueAlarms:
        q = resources.work_queue
        scope = Construct(self, q.name)
        consumer = resources.consumer.function
        dlq = resources.queues.dead_letter_queue
        named = f"{self._title}-{q.name}"
        queue_age, dlq_depth, dlq_arrivals = self._queue_alarms(
            scope, named=named, what=q.name, queue=resources.queues.queue, dlq=dlq,
            age_alarm_s=q.consumer.queue_age_alarm_s,
            receives=q.consumer.max_receive_count)
        return WorkQueueAlarms(
            queue_age=queue_age, dlq_depth=dlq_depth, dlq_arrivals=dlq_arrivals,
            consumer_errors=self._error_rate_alarm(
                "ConsumerErrors", name=f"{named}-consumer-errors", function=consumer, scope=scope,
                description=f"{q.name} consumer invocations fail (a timeout, memory, or the database "
                            "unreachable): its messages return to the queue."),
        )

