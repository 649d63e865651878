"""The dashboard's rows: one per pipeline, the snapshot pipeline, the report renderer,
each work queue, the API, the created database and mail. Each row is a heading text
widget and its graphs, 24 units wide; :class:`infra.monitoring.Monitoring` assembles
them under the alarm status widget."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw

from infra import settings
from infra.api import HttpApi
from infra.database import AuroraDatabase
from infra.mail import MailResources
from infra.metrics import alarm_period, pipeline_search, proxy_metric, ses_metric, timekeeper_metric
from infra.pipeline import PipelineResources
from infra.renderer import ReportRendererResources
from infra.snapshots import SnapshotResources
from infra.work_queue import WorkQueueResources
from timekeeper import observability as obs
from timekeeper.topology import connection_budget


def snapshot_row(resources: SnapshotResources) -> list[cw.IWidget]:
    """The snapshot pipeline's dashboard row: planned, admitted, published and failed runs,
    overdue periods, the job queue's age and DLQ depth."""
    p = resources.pipeline
    period = alarm_period()
    return [
        cw.TextWidget(markdown=f"## Monthly snapshots (planner every {p.planner_rate_minutes} min, cap "
                               f"{p.admission_cap}, backfill lane {p.backfill_lane})", width=24, height=1),
        cw.GraphWidget(title="snapshots: planned, admitted, published, failed", width=8, height=6, left=[
            timekeeper_metric(obs.SNAPSHOTS_PLANNED), timekeeper_metric(obs.SNAPSHOTS_ADMITTED),
            timekeeper_metric(obs.SNAPSHOT_PUBLISHED), timekeeper_metric(obs.SNAPSHOT_FAILED)]),
        cw.GraphWidget(title="snapshots: overdue periods", width=8, height=6, left=[
            timekeeper_metric(obs.SNAPSHOT_OVERDUE, statistic="Maximum")]),
        cw.GraphWidget(title="snapshots: job queue age (s) and DLQ depth", width=8, height=6,
                       left=[resources.queue.metric_approximate_age_of_oldest_message(
                           statistic="Maximum", period=period, label="oldest job age (s)")],
                       right=[resources.dead_letter_queue.metric_approximate_number_of_messages_visible(
                           statistic="Maximum", period=period, label="DLQ messages")]),
    ]


def api_row(api: HttpApi) -> list[cw.IWidget]:
    """The HTTP API's dashboard row: requests with 4XX and 5XX answers, latency (ms) against
    its alarm, and its function's invocations, errors, throttles and concurrency."""
    function = api.function.function
    stage = api.api.deployment_stage
    period = alarm_period()
    return [
        cw.TextWidget(markdown=f"## API `{api.api.rest_api_name}` (function `{api.function.folder}`, "
                               f"latency alarm p95 {settings.API_LATENCY_ALARM_MS} ms)", width=24, height=1),
        cw.GraphWidget(title="api: requests, 4XX, 5XX", width=8, height=6, left=[
            stage.metric_count(statistic="Sum", period=period, label="requests"),
            stage.metric_client_error(statistic="Sum", period=period, label="4XX"),
            stage.metric_server_error(statistic="Sum", period=period, label="5XX")]),
        cw.GraphWidget(title="api: latency (ms)", width=8, height=6, left=[
            stage.metric_latency(statistic="p50", period=period, label="p50"),
            stage.metric_latency(statistic="p95", period=period, label="p95"),
            stage.metric_integration_latency(statistic="p95", period=period, label="integration p95")],
            left_annotations=[cw.HorizontalAnnotation(value=settings.API_LATENCY_ALARM_MS,
                                                      label="latency alarm")]),
        cw.GraphWidget(title="api: function", width=8, height=6, left=[
            function.metric_invocations(statistic="Sum", period=period, label="invocations"),
            function.metric_errors(statistic="Sum", period=period, label="errors"),
            function.metric_throttles(statistic="Sum", period=period, label="throttles")],
            right=[function.metric("ConcurrentExecutions", statistic="Maximum", period=period,
                                   label="concurrent executions")]),
    ]


def database_row(database: AuroraDatabase) -> list[cw.IWidget]:
    """The created database's dashboard row: Aurora's capacity (ACU) and utilisation,
    connections against the connection budget, RDS Proxy's borrow latency (µs) and CPU."""
    cluster = database.cluster
    period = alarm_period()
    budget = connection_budget().total
    return [
        cw.TextWidget(markdown=f"## Database (Aurora Serverless v2 {settings.AURORA_MIN_ACU}-"
                               f"{settings.AURORA_MAX_ACU} ACU behind RDS Proxy; connection budget {budget})",
                      width=24, height=1),
        cw.GraphWidget(title="database: capacity (ACU) and utilisation (%)", width=8, height=6, left=[
            cluster.metric_serverless_database_capacity(statistic="Maximum", period=period, label="ACU")],
            right=[cluster.metric_acu_utilization(statistic="Maximum", period=period, label="ACU utilisation %")]),
        cw.GraphWidget(title="database: connections", width=8, height=6, left=[
            cluster.metric_database_connections(statistic="Maximum", period=period, label="Aurora connections"),
            proxy_metric(database, "ClientConnections", label="proxy client connections"),
            proxy_metric(database, "DatabaseConnections", label="proxy connections to Aurora")],
            left_annotations=[cw.HorizontalAnnotation(value=budget, label="connection budget")]),
        cw.GraphWidget(title="database: proxy borrow latency (µs) and CPU (%)", width=8, height=6, left=[
            proxy_metric(database, "DatabaseConnectionsBorrowLatency", label="borrow latency max")],
            right=[cluster.metric_cpu_utilization(statistic="Maximum", period=period, label="CPU %")]),
    ]


def mail_row(mail: MailResources) -> list[cw.IWidget]:
    """The mail dashboard row: the configuration set's bounce and complaint rates and
    delivery failures."""
    period = Duration.minutes(settings.SES_REPUTATION_PERIOD_MINUTES)
    name = mail.configuration_set.configuration_set_name
    return [
        cw.TextWidget(markdown=f"## Mail (SES configuration set `{name}`)", width=24, height=1),
        cw.GraphWidget(title="mail: bounce and complaint rates", width=12, height=6, left=[
            ses_metric(mail, "Reputation.BounceRate", period, label="bounce rate")],
            right=[ses_metric(mail, "Reputation.ComplaintRate", period, label="complaint rate")],
            left_annotations=[cw.HorizontalAnnotation(value=settings.SES_BOUNCE_RATE_ALARM,
                                                      label="bounce alarm")]),
        cw.GraphWidget(title="mail: delivery failures and SES throttles", width=12, height=6, left=[
            timekeeper_metric(obs.DELIVERY_FAILED)], right=[timekeeper_metric(obs.SES_THROTTLED)]),
    ]


def renderer_row(resources: ReportRendererResources) -> list[cw.IWidget]:
    """The report renderer's dashboard row: renders, invocations, errors, throttles,
    duration (ms) against its timeout, and its on-failure queue."""
    r = resources.renderer
    function = resources.function.function
    period = alarm_period()
    return [
        cw.TextWidget(markdown=f"## Report renderer `{r.function}` (reserved concurrency "
                               f"{r.reserved_concurrency}, timeout {r.timeout_s} s, "
                               f"{r.retry_attempts} async retries)", width=24, height=1),
        cw.GraphWidget(title=f"{r.name}: renders", width=6, height=6, left=[
            timekeeper_metric(obs.REPORT_RENDERED), timekeeper_metric(obs.REPORT_RENDER_FAILED)]),
        cw.GraphWidget(title=f"{r.name}: invocations, errors, throttles", width=6, height=6, left=[
            function.metric_invocations(statistic="Sum", period=period, label="invocations"),
            function.metric_errors(statistic="Sum", period=period, label="errors"),
            function.metric_throttles(statistic="Sum", period=period, label="throttles")]),
        cw.GraphWidget(title=f"{r.name}: duration (ms)", width=6, height=6, left=[
            function.metric_duration(statistic="p95", period=period, label="p95"),
            function.metric_duration(statistic="Maximum", period=period, label="max")],
            left_annotations=[cw.HorizontalAnnotation(value=r.timeout_s * 1000, label="timeout")]),
        cw.GraphWidget(title=f"{r.name}: on-failure queue", width=6, height=6, left=[
            resources.failure_queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=period, label="events given up")]),
    ]


def pipeline_row(resources: PipelineResources) -> list[cw.IWidget]:
    """A pipeline's dashboard row: claims, publishes and refusals, outcomes by work kind,
    the queue's age (s) and DLQ depth, and its dispatchers' and consumer's invocations,
    errors and duration."""
    p = resources.pipeline
    consumer = resources.consumer.function
    queue, dlq = resources.queues.queue, resources.queues.dead_letter_queue
    period = alarm_period()
    return [
        cw.TextWidget(markdown=f"## Pipeline `{p.name}` (rule rate {p.rule_rate_minutes} min, consumer "
                               f"max concurrency {p.consumer.max_concurrency}, "
                               f"{p.consumer.max_receive_count} receives)",
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
                       left_annotations=[cw.HorizontalAnnotation(value=p.consumer.queue_age_alarm_s,
                                                                 label="age alarm")]),
        cw.GraphWidget(title=f"{p.name}: dispatcher and consumer", width=6, height=6,
                       left=[*(d.function.metric_invocations(statistic="Sum", period=period,
                                                             label=f"dispatcher {i} invocations")
                               for i, d in enumerate(resources.dispatchers)),
                             *(d.function.metric_errors(statistic="Sum", period=period,
                                                        label=f"dispatcher {i} errors")
                               for i, d in enumerate(resources.dispatchers)),
                             consumer.metric_errors(statistic="Sum", period=period, label="consumer errors")],
                       right=[consumer.metric_duration(statistic="p95", period=period,
                                                       label="consumer duration p95 (ms)"),
                              consumer.metric_duration(statistic="Maximum", period=period,
                                                       label="consumer duration max (ms)")]),
    ]


def work_queue_row(resources: WorkQueueResources) -> list[cw.IWidget]:
    """A work queue's dashboard row: the queue's age (s) and DLQ depth, messages sent and
    received, and its consumer's invocations, errors, throttles and duration."""
    q = resources.work_queue
    consumer = resources.consumer.function
    queue, dlq = resources.queues.queue, resources.queues.dead_letter_queue
    period = alarm_period()
    return [
        cw.TextWidget(markdown=f"## Work queue `{q.name}` (consumer max concurrency "
                               f"{q.consumer.max_concurrency}, batch {q.consumer.batch_size}, "
                               f"{q.consumer.max_receive_count} receives)", width=24, height=1),
        cw.GraphWidget(title=f"{q.name}: queue age (s) and DLQ depth", width=8, height=6,
                       left=[queue.metric_approximate_age_of_oldest_message(
                           statistic="Maximum", period=period, label="oldest message age (s)")],
                       right=[dlq.metric_approximate_number_of_messages_visible(
                           statistic="Maximum", period=period, label="DLQ messages")],
                       left_annotations=[cw.HorizontalAnnotation(value=q.consumer.queue_age_alarm_s,
                                                                 label="age alarm")]),
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
