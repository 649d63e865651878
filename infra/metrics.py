"""The metrics alarms and the dashboard read: Timekeeper's own (names and namespace from
:mod:`timekeeper.observability`, the same constants the code emits, with the ``service``
dimension Powertools adds and, per pipeline, the pipeline dimension), RDS Proxy's and
SES's reputation metrics."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw

from infra import settings
from infra.database import AuroraDatabase
from infra.mail import MailResources
from timekeeper import observability as obs

#: The dimensions Powertools puts on every Timekeeper metric.
SERVICE_DIMENSIONS = {"service": obs.metrics.service}
#: The dimension naming a metric's pipeline (emitted by observability.PipelineMetrics).
PIPELINE_DIMENSION = obs.PIPELINE_DIMENSION

#: The dispatcher counters and the run outcomes the dashboard graphs over every pipeline.
DISPATCHER_METRICS = (obs.SCHEDULES_CLAIMED, obs.RUNS_PUBLISHED, obs.PUBLISH_REFUSED, obs.RUNS_REOFFERED,
                      obs.BACKLOG_SKIPPED, obs.DEFINITIONS_INVALID)
OUTCOME_METRICS = (obs.RUN_SUCCEEDED, obs.RUN_SKIPPED, obs.RUN_FAILED, obs.SCHEDULE_AUTO_PAUSED)


def alarm_period() -> Duration:
    """One alarm period: :data:`infra.settings.ALARM_PERIOD_MINUTES`."""
    return Duration.minutes(settings.ALARM_PERIOD_MINUTES)


def timekeeper_metric(name: str, *, statistic: str = "Sum", period: Duration | None = None) -> cw.Metric:
    """A Timekeeper EMF metric (``name`` from :mod:`timekeeper.observability`) with the
    dimensions the code emits."""
    return cw.Metric(namespace=obs.NAMESPACE, metric_name=name, dimensions_map=SERVICE_DIMENSIONS,
                     statistic=statistic, period=period or alarm_period())


def pipeline_search(name: str, pipeline: str, *, label: str) -> cw.MathExpression:
    """Every series of metric ``name`` carrying ``pipeline=<pipeline>`` (one line per extra
    dimension, e.g. per work kind)."""
    return cw.MathExpression(
        expression=(f"SEARCH('{{{obs.NAMESPACE}}} MetricName=\"{name}\" "
                    f"{PIPELINE_DIMENSION}=\"{pipeline}\"', 'Sum', {settings.ALARM_PERIOD_MINUTES * 60})"),
        label=label, period=alarm_period(), using_metrics={})


def pipeline_metric(name: str, pipeline: str, *, period: Duration) -> cw.Metric:
    """The copy of Timekeeper metric ``name`` the code emits with ``pipeline=<pipeline>``."""
    return cw.Metric(namespace=obs.NAMESPACE, metric_name=name, statistic="Sum", period=period,
                     dimensions_map={**SERVICE_DIMENSIONS, PIPELINE_DIMENSION: pipeline})


def proxy_metric(database: AuroraDatabase, name: str, *, label: str | None = None) -> cw.Metric:
    """RDS Proxy metric ``name`` (``AWS/RDS``, dimension ``ProxyName``), its maximum over
    one alarm period."""
    return cw.Metric(namespace="AWS/RDS", metric_name=name, statistic="Maximum", period=alarm_period(), label=label,
                     dimensions_map={"ProxyName": database.proxy.db_proxy_name})


def ses_metric(mail: MailResources, name: str, period: Duration, *, label: str | None = None) -> cw.Metric:
    """SES reputation metric ``name`` of the deliveries' configuration set (``AWS/SES``,
    dimension ``ses:configuration-set``; published because the set has reputation metrics
    on), its maximum over ``period``."""
    return cw.Metric(namespace="AWS/SES", metric_name=name, statistic="Maximum", period=period, label=label,
                     dimensions_map={"ses:configuration-set": mail.configuration_set.configuration_set_name})
