"""The monthly-snapshot pipeline: a planner rule (every 15 minutes) and function, a
dispatcher rule (every minute) and reserved-concurrency-one function the planner nudges,
the job queue with its dead-letter queue, and the run job reading it.

Every number comes from :data:`timekeeper.topology.SNAPSHOTS`.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra import settings
from infra.functions import WORKER, DatabaseAccess, TimekeeperFunction
from infra.pipeline import ConsumedQueue
from timekeeper.settings import (
    ENVIRONMENT_VARIABLE,
    SNAPSHOT_JOB_QUEUE_URL_VARIABLE,
    SNAPSHOT_NUDGE_FUNCTION_VARIABLE,
)
from timekeeper.topology import SnapshotPipeline


class SnapshotResources(Construct):
    """Rules, planner, dispatcher, job queues and run job of the snapshot pipeline.

    The planner may invoke the dispatcher (the nudge); the dispatcher and the run job may
    send to the job queue (the run job re-sends its own message when it hands over); all
    three log in to the database as the workers. ``environment`` (``production`` |
    ``development``) selects the enabled snapshot types.
    """

    def __init__(self, scope: Construct, construct_id: str, *, pipeline: SnapshotPipeline,
                 layer: lambda_.ILayerVersion, database: DatabaseAccess, log_retention: logs.RetentionDays,
                 environment: str, name_prefix: str = "timekeeper"):
        super().__init__(scope, construct_id)
        self.pipeline = pipeline
        self.jobs = ConsumedQueue(self, consumer=pipeline.consumer, name_prefix=name_prefix, queue_id="JobQueue")
        self.queue, self.dead_letter_queue = self.jobs.queue, self.jobs.dead_letter_queue
        common = {"layer": layer, "database": database, "login": WORKER, "log_retention": log_retention}
        env = {ENVIRONMENT_VARIABLE: environment}

        self.dispatcher = TimekeeperFunction(
            self, "Dispatcher", folder=pipeline.dispatcher_function, timeout_s=pipeline.dispatcher_timeout_s,
            memory_mb=settings.DISPATCHER_MEMORY_MB,
            environment={**env, SNAPSHOT_JOB_QUEUE_URL_VARIABLE: self.queue.queue_url},
            description=f"Timekeeper snapshot dispatcher (cap {pipeline.admission_cap}, backfill lane "
                        f"{pipeline.backfill_lane})", **common)
        self.dispatcher.function.configure_async_invoke(retry_attempts=0, max_event_age=Duration.seconds(60))
        self.queue.grant_send_messages(self.dispatcher.role)
        self.dispatcher_rule = events.Rule(
            self, "DispatcherSchedule", description="Timekeeper snapshots: one admission pass per minute",
            schedule=events.Schedule.rate(Duration.minutes(pipeline.dispatcher_rate_minutes)),
            targets=[targets.LambdaFunction(self.dispatcher.function, retry_attempts=0,
                                            max_event_age=Duration.seconds(60))])

        self.planner = TimekeeperFunction(
            self, "Planner", folder=pipeline.planner_function, timeout_s=pipeline.planner_timeout_s,
            memory_mb=settings.DISPATCHER_MEMORY_MB,
            environment={**env, SNAPSHOT_NUDGE_FUNCTION_VARIABLE: self.dispatcher.function.function_name},
            description=f"Timekeeper snapshot planner (rate {pipeline.planner_rate_minutes} min)", **common)
        # The nudge: the dispatcher's unqualified ARN only (grant_invoke would add every version).
        self.planner.role.add_to_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"],
                                                            resources=[self.dispatcher.function.function_arn]))
        self.planner_rule = events.Rule(
            self, "PlannerSchedule", description="Timekeeper snapshots: plan completed workspace-local months",
            schedule=events.Schedule.rate(Duration.minutes(pipeline.planner_rate_minutes)),
            targets=[targets.LambdaFunction(self.planner.function, retry_attempts=0,
                                            max_event_age=Duration.seconds(60 * pipeline.planner_rate_minutes))])

        self.job = self.jobs.build_consumer(
            self, "RunJob", layer=layer, database=database, log_retention=log_retention,
            environment={**env, SNAPSHOT_JOB_QUEUE_URL_VARIABLE: self.queue.queue_url},
            description="Timekeeper snapshot run job",
            grants=lambda job: self.queue.grant_send_messages(job.role))
        self.event_source = self.jobs.event_source

    @property
    def rules(self) -> list[events.Rule]:
        """The planner's and the dispatcher's rules."""
        return [self.planner_rule, self.dispatcher_rule]
