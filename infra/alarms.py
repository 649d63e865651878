"""What the alarms are made of: the groups :class:`infra.monitoring.Monitoring` builds, the
rules that make an alarm page for a reason (error rates over several periods, duration
near the timeout) and the runbook section of docs/operations.md each alarm names.

Why these numbers: dispatchers run once a minute, so a one-minute period holds one
invocation and no floor of invocations could apply; a five-minute period holds five
passes of each dispatcher partition. An error rate above :data:`ERROR_RATE_ALARM_PERCENT`
in :data:`ALARM_DATAPOINTS` of :data:`ALARM_EVALUATION_PERIODS` five-minute periods (two
of three: 10 to 15 minutes) pages on a cause that lasts, rides out one bad period (a
deploy, a database failover) and never pages on a single error: a period with fewer than
:data:`ERROR_RATE_MIN_INVOCATIONS` invocations does not count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_

from infra.metrics import alarm_period

#: A function's errors as a percentage of its invocations above which a period counts.
ERROR_RATE_ALARM_PERCENT = 10
#: A period with fewer invocations than this counts as no error (one error of two
#: invocations is not a 50 % failure worth a page).
ERROR_RATE_MIN_INVOCATIONS = 3
#: Datapoints (five-minute periods) that must breach, of the periods evaluated: the error
#: rate and the duration alarms.
ALARM_DATAPOINTS, ALARM_EVALUATION_PERIODS = 2, 3
#: A function whose timeout is at least this (seconds) gets a duration alarm.
LONG_FUNCTION_TIMEOUT_S = 60
#: The duration alarm: the maximum ``Duration`` above this share of the function's
#: timeout. Not 80 %: the queries consumer's delivery waits for a render up to 80 % of its
#: timeout by design; past 90 % a slower database or service is about to time it out.
DURATION_ALARM_SHARE = 0.9

#: SES throttling: submissions SES throttled (``SesThrottled``, summed per five-minute
#: period) above this in :data:`ALARM_DATAPOINTS` of :data:`ALARM_EVALUATION_PERIODS`
#: periods. The sender paces itself to the account's rate and backs off, so a few throttles
#: are absorbed; throttling that lasts 10 minutes means the quota read is wrong, another
#: sender shares the account's rate, or the daily quota is spent.
SES_THROTTLED_ALARM_COUNT = 20

#: Where each alarm's runbook is: (pattern its name ends with, the heading's anchor in
#: docs/operations.md), first match wins. An alarm without one fails synthesis.
RUNBOOKS: tuple[tuple[str, str], ...] = (
    (r"-duration(-p\d+)?$", "function-near-its-timeout"),
    (r"-dispatchers-failing$", "dispatchers-failing"),
    (r"-dispatcher-errors(-p\d+)?$", "dispatchers-failing"),
    (r"-dispatcher-(silence|heartbeat)(-p\d+)?$", "dispatcher-silent"),
    (r"-planner-(silence|errors)$", "snapshot-planner-silent-or-failing"),
    (r"-queue-age$", "queue-waiting"),
    (r"-dlq-(depth|arrivals)$", "read-a-dead-letter-queue-then-redrive-or-delete-after-fixing-the-cause"),
    (r"-(consumer|job)-errors$", "consumer-errors"),
    (r"-report-renderer-(errors|throttles|failed-events|failed-arrivals)$", "renderer-failing"),
    (r"-api-downloads-(errors|throttles)$", "public-links-failing"),
    (r"-api-authorizer-errors$", "authorizer-failing"),
    (r"-api-(errors|throttles|5xx|latency)$", "api-failing-or-slow"),
    (r"-database-[a-z-]+$", "database-at-its-limits"),
    (r"-mail-(bounce|complaint)-rate$", "mail-reputation"),
    (r"-network-nat-instance$", "nat-instance-down"),
    (r"-network-nat-forwarding$", "nat-forwarding"),
    (r"-delivery-failed$", "delivery-failed"),
    (r"-mail-throttled$", "mail-throttled"),
    (r"-(overdue|failed)$", "snapshots-overdue-or-failed"),
    (r"-run-failure-rate$", "run-failure-rate"),
    (r"-schedule-auto-paused$", "resume-a-paused-schedule"),
    (r"-posting-jobs-failed$", "posting-jobs-failed"),
)
#: The runbooks' page, as alarm descriptions name it.
RUNBOOK_PAGE = "docs/operations.md"


def runbook_anchor(alarm_name: str) -> str:
    """The anchor (a heading of :data:`RUNBOOK_PAGE`) of ``alarm_name``'s runbook. Raises
    ``ValueError`` for an alarm :data:`RUNBOOKS` does not cover."""
    for pattern, anchor in RUNBOOKS:
        if re.search(pattern, alarm_name):
            return anchor
    raise ValueError(f"alarm {alarm_name}: no runbook in infra.alarms.RUNBOOKS")


def with_runbook(alarm_name: str, description: str) -> str:
    """``description`` ending with the runbook's address (``Runbook: docs/operations.md#...``)."""
    return f"{description} Runbook: {RUNBOOK_PAGE}#{runbook_anchor(alarm_name)}"


def error_rate(function: lambda_.IFunction, *, label: str) -> cw.MathExpression:
    """``function``'s errors as a percentage of its invocations per alarm period (5
    minutes), 0 in a period with fewer than :data:`ERROR_RATE_MIN_INVOCATIONS`."""
    period = alarm_period()
    return rate_of(function.metric_errors(statistic="Sum", period=period),
                   function.metric_invocations(statistic="Sum", period=period), label=label)


def rate_of(errors: cw.IMetric, invocations: cw.IMetric, *, label: str) -> cw.MathExpression:
    """``errors`` as a percentage of ``invocations`` (both sums per alarm period), 0 in a
    period with fewer than :data:`ERROR_RATE_MIN_INVOCATIONS` (an API stage's 5XX answers
    over its requests, too)."""
    return cw.MathExpression(
        expression=(f"IF(FILL(invocations, 0) >= {ERROR_RATE_MIN_INVOCATIONS}, "
                    "100 * FILL(errors, 0) / invocations, 0)"),
        label=label, period=alarm_period(), using_metrics={"errors": errors, "invocations": invocations})


@dataclass
class PipelineAlarms:
    """The alarms of one pipeline (silence, heartbeat and error rate of its dispatcher
    partition 0: the last two feed the dispatchers' composite alarm and notify through it),
    and a silence and an error-rate alarm for each further dispatcher partition."""

    dispatcher_silence: cw.Alarm
    dispatcher_heartbeat: cw.Alarm
    dispatcher_errors: cw.Alarm
    queue_age: cw.Alarm
    dlq_depth: cw.Alarm
    dlq_arrivals: cw.Alarm
    consumer_errors: cw.Alarm
    #: Partitions 1..K-1: (silence, errors) each.
    partitions: list[tuple[cw.Alarm, cw.Alarm]] = field(default_factory=list)
    #: The share of the pipeline's settled runs that failed, over several periods.
    run_failure_rate: cw.Alarm | None = None

    def all(self) -> list[cw.Alarm]:
        """The alarms in a fixed order."""
        return [self.dispatcher_silence, self.dispatcher_heartbeat, self.dispatcher_errors, self.queue_age,
                self.dlq_depth, self.dlq_arrivals, self.consumer_errors,
                *(alarm for pair in self.partitions for alarm in pair),
                *([self.run_failure_rate] if self.run_failure_rate is not None else [])]


@dataclass
class RendererAlarms:
    """The report renderer's alarms."""

    errors: cw.Alarm
    throttles: cw.Alarm
    failed_events: cw.Alarm
    failed_arrivals: cw.Alarm

    def all(self) -> list[cw.Alarm]:
        """The alarms in a fixed order."""
        return [self.errors, self.throttles, self.failed_events, self.failed_arrivals]


@dataclass
class ApiAlarms:
    """The HTTP API's alarms: its function's errors and throttles, API Gateway's 5XX
    answers and latency; the public download function's errors and throttles; and the JWT
    authorizer's errors when the stack creates that authorizer (None otherwise: the
    operator's own authorizer is the operator's to watch)."""

    errors: cw.Alarm
    throttles: cw.Alarm
    server_errors: cw.Alarm
    latency: cw.Alarm
    download_errors: cw.Alarm
    download_throttles: cw.Alarm
    authorizer_errors: cw.Alarm | None = None

    def all(self) -> list[cw.Alarm]:
        """The alarms in a fixed order."""
        return [self.errors, self.throttles, self.server_errors, self.latency, self.download_errors,
                self.download_throttles, *([self.authorizer_errors] if self.authorizer_errors else [])]


@dataclass
class DatabaseAlarms:
    """The created database's alarms: Aurora at its capacity ceiling, more connections than
    the budget allows, more proxy clients than the budget, slow borrows from the proxy."""

    capacity: cw.Alarm
    connections: cw.Alarm
    proxy_clients: cw.Alarm
    proxy_borrow_latency: cw.Alarm

    def all(self) -> list[cw.Alarm]:
        """The alarms in a fixed order."""
        return [self.capacity, self.connections, self.proxy_clients, self.proxy_borrow_latency]


@dataclass
class MailAlarms:
    """SES reputation of the deliveries' configuration set."""

    bounce_rate: cw.Alarm
    complaint_rate: cw.Alarm

    def all(self) -> list[cw.Alarm]:
        """The alarms in a fixed order."""
        return [self.bounce_rate, self.complaint_rate]


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
