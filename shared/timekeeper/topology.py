"""The one description of every pipeline.

The CDK stacks and the local stack both read these numbers, so what runs locally is what
deploys: the queue's maxReceiveCount here is also the consumer's idea of its final
receive, the visibility timeout is derived from the consumer's timeout, and the lease a
consumer takes on a run never outlives the function that holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from timekeeper.settings import work_queue_url_variable

#: The database logins of the deployment (created by migration ``0005_login_roles.sql``):
#: dispatchers and consumers log in as the workers' role, the HTTP API as its own walled
#: role; the migration function alone uses the schema owner's credentials.
WORKER_LOGIN = "timekeeper_worker"
API_LOGIN = "timekeeper_api"

#: Statement timeout of the workers' database login (dispatchers and consumers), seconds.
#: Set per login role by migration ``0005_login_roles.sql`` (no connection startup option:
#: RDS Proxy refuses them); the migration test compares the role's setting with this.
WORKER_STATEMENT_TIMEOUT_S = 15
#: Statement timeout of the API's database login, seconds: well inside API Gateway's 29 s.
API_STATEMENT_TIMEOUT_S = 20
#: How long a client waits to open a connection (libpq ``connect_timeout``), and at most how
#: long RDS Proxy lets it wait to borrow a database connection (``ConnectionBorrowTimeout``).
CONNECT_TIMEOUT_S = 5
#: The time a dispatcher keeps for the publishes after its last claim (SendMessageBatch
#: calls of one full batch, with the SDK's retries).
DISPATCHER_PUBLISH_ALLOWANCE_S = 5
#: The API function's reserved concurrency: the most API connections at once.
API_RESERVED_CONCURRENCY = 10
#: Connections the migration trigger holds while a deploy runs.
MIGRATION_CONNECTIONS = 1
#: RDS Proxy closes a client connection idle this long (seconds); a Lambda execution
#: environment reopens its connection when it was idle for half of it.
PROXY_IDLE_CLIENT_TIMEOUT_S = 900


@dataclass(frozen=True, kw_only=True)
class QueueConsumer:
    """A queue, its dead-letter queue and the function its SQS event source drives: the one
    description of a queue consumer, which every pipeline composes (:attr:`Pipeline.consumer`,
    :attr:`WorkQueue.consumer`, :attr:`SnapshotPipeline.consumer`) and which infra and the
    local stack build from (queue, redrive, event source).

    Units: seconds unless the name says otherwise. ``max_receive_count`` is the queue's
    redrive limit and also the consumer's idea of its final receive. Checked at
    construction (``ValueError``): at least 2 receives (1 loses messages to the DLQ on
    throttles), an event-source maximum concurrency of 2..1000, a batch size of 1..10000
    (above 10 only with a batching window), a Lambda timeout of 1..900 s.
    """

    queue_name: str
    dlq_name: str
    #: The ``functions/<folder>`` reading the queue.
    function: str
    timeout_s: int
    max_receive_count: int
    batch_size: int = 1
    max_batching_window_s: int = 0
    max_concurrency: int = 2
    dlq_retention_days: int = 14
    queue_age_alarm_s: int = 900

    @property
    def visibility_timeout_s(self) -> int:
        """Queue visibility timeout: 6 x the consumer timeout (AWS guidance)."""
        return 6 * self.timeout_s

    def __post_init__(self) -> None:
        if self.max_receive_count < 2:
            raise ValueError(f"{self.queue_name}: max_receive_count below 2 loses messages to the DLQ on throttles")
        if not 2 <= self.max_concurrency <= 1000:
            raise ValueError("SQS event source maximum concurrency must be 2..1000")
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError("SQS event source batch size must be 1..10000")
        if self.batch_size > 10 and self.max_batching_window_s < 1:
            raise ValueError("an SQS batch size above 10 needs a batching window of at least 1 second")
        if not 1 <= self.timeout_s <= 900:
            raise ValueError("a Lambda timeout is 1..900 s")


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    """A dispatcher -> queue -> consumer pipeline of one owner module.

    Units: seconds unless the name says otherwise. ``rule_rate_minutes`` is the
    EventBridge rate; ``claim_batch`` bounds one claim transaction (not the pass);
    ``dispatcher_time_budget_s`` bounds the repeat loop of one pass: a claim may start
    until then, so connect + budget + one worker statement timeout + the publish allowance
    must end before ``dispatcher_timeout_s`` (checked at construction, ``ValueError``).
    """

    name: str
    owner: str
    dispatcher_function: str
    consumer_function: str
    rule_rate_minutes: int = 1
    dispatcher_timeout_s: int = 60
    dispatcher_time_budget_s: int = 30
    claim_batch: int = 200
    reoffer_after_s: int = 900
    consumer_timeout_s: int = 120
    max_receive_count: int = 5
    batch_size: int = 10
    max_batching_window_s: int = 0
    max_concurrency: int = 2
    failure_pause_threshold: int = 5
    queue_age_alarm_s: int = 900
    dispatcher_silence_alarm_minutes: int = 5
    dlq_retention_days: int = 14
    #: Database connections one consumer execution holds: 1, or 2 for a consumer whose
    #: work kinds journal progress on a second connection beside the run's transaction
    #: (scheduled delivery records each submitted message at once).
    consumer_connections: int = 1

    @property
    def consumer(self) -> QueueConsumer:
        """The run queue and its consumer."""
        return QueueConsumer(queue_name=f"timekeeper-{self.name}-runs", dlq_name=f"timekeeper-{self.name}-runs-dlq",
                             function=self.consumer_function, timeout_s=self.consumer_timeout_s,
                             max_receive_count=self.max_receive_count, batch_size=self.batch_size,
                             max_batching_window_s=self.max_batching_window_s, max_concurrency=self.max_concurrency,
                             dlq_retention_days=self.dlq_retention_days, queue_age_alarm_s=self.queue_age_alarm_s)

    @property
    def lease(self) -> timedelta:
        """How long a started run is protected from concurrent execution: the consumer timeout."""
        return timedelta(seconds=self.consumer_timeout_s)

    @property
    def reoffer_after(self) -> timedelta:
        """A queued run offered this long ago and never started is offered again."""
        return timedelta(seconds=self.reoffer_after_s)

    def __post_init__(self) -> None:
        self.consumer  # noqa: B018 - validates the queue consumer (ValueError)
        if self.reoffer_after_s <= self.consumer_timeout_s:
            raise ValueError("reoffer_after must exceed the consumer timeout")
        if self.consumer_connections not in (1, 2):
            raise ValueError("a consumer holds one or two database connections")
        if self.dispatcher_worst_case_s >= self.dispatcher_timeout_s:
            raise ValueError(
                f"dispatcher {self.name}: connect {CONNECT_TIMEOUT_S} s + time budget {self.dispatcher_time_budget_s}"
                f" s + statement timeout {WORKER_STATEMENT_TIMEOUT_S} s + publish allowance "
                f"{DISPATCHER_PUBLISH_ALLOWANCE_S} s must stay under its timeout {self.dispatcher_timeout_s} s")

    @property
    def dispatcher_worst_case_s(self) -> int:
        """The longest a dispatcher pass may run (seconds): borrowing a connection, then the
        time budget, then one more claim cut off by the statement timeout, then its publishes."""
        return (CONNECT_TIMEOUT_S + self.dispatcher_time_budget_s + WORKER_STATEMENT_TIMEOUT_S
                + DISPATCHER_PUBLISH_ALLOWANCE_S)


ACCOUNTING = Pipeline(
    name="accounting",
    owner="accounting",
    dispatcher_function="accounting_dispatcher",
    consumer_function="accounting_consumer",
    max_concurrency=2,
    # Runs are short database work: 50 to a batch (one commit for all; at most 1 s of added
    # latency while the event source fills a batch).
    batch_size=50,
    max_batching_window_s=1,
)

#: Scheduled delivery of saved queries and reports (owner ``queries``, work kind
#: ``queries.deliver``). A report run holds its consumer while it polls the renderer for up
#: to 12 minutes, so: one run per invocation (batch 1), a 900 s consumer (the Lambda
#: maximum), three at a time, three receives; a started run's lease is the consumer's
#: timeout, and an offered run is offered again only after twice that. Each consumer holds
#: a second connection: the delivery journal (files, outbox, recipient outcomes) commits
#: beside the run's transaction.
QUERIES = Pipeline(
    name="queries",
    owner="queries",
    dispatcher_function="queries_dispatcher",
    consumer_function="queries_consumer",
    consumer_timeout_s=900,
    reoffer_after_s=1800,
    max_receive_count=3,
    batch_size=1,
    max_concurrency=3,
    queue_age_alarm_s=1800,
    consumer_connections=2,
)

#: Every pipeline, by name. Infra and the local stack iterate over this.
PIPELINES: dict[str, Pipeline] = {p.name: p for p in (ACCOUNTING, QUERIES)}


@dataclass(frozen=True, kw_only=True)
class WorkQueue:
    """A queue-only worker: requests are committed and published by a service (no
    dispatcher), and one consumer drains the queue.

    Units: seconds unless the name says otherwise. ``max_receive_count`` is also the
    consumer's idea of its final receive (it settles the request failed then);
    ``reoffer_after_s``: a queued request never published (a refused publish, a crash
    after commit) is offered again once it is this old.
    """

    name: str
    consumer_function: str
    consumer_timeout_s: int = 300
    consumer_memory_mb: int = 1024
    #: The consumer's /tmp (MB, 512-10240): an export's file is written there before upload.
    consumer_ephemeral_storage_mb: int = 2048
    max_receive_count: int = 3
    batch_size: int = 1
    max_batching_window_s: int = 0
    max_concurrency: int = 2
    queue_age_alarm_s: int = 900
    dlq_retention_days: int = 14
    reoffer_after_s: int = 30

    @property
    def consumer(self) -> QueueConsumer:
        """The work queue and its consumer."""
        return QueueConsumer(queue_name=f"timekeeper-{self.name}", dlq_name=f"timekeeper-{self.name}-dlq",
                             function=self.consumer_function, timeout_s=self.consumer_timeout_s,
                             max_receive_count=self.max_receive_count, batch_size=self.batch_size,
                             max_batching_window_s=self.max_batching_window_s, max_concurrency=self.max_concurrency,
                             dlq_retention_days=self.dlq_retention_days, queue_age_alarm_s=self.queue_age_alarm_s)

    @property
    def reoffer_after(self) -> timedelta:
        """An unpublished queued request this old is offered again."""
        return timedelta(seconds=self.reoffer_after_s)

    @property
    def queue_url_variable(self) -> str:
        """The environment variable naming the queue's URL (:func:`timekeeper.settings.work_queue_url_variable`)."""
        return work_queue_url_variable(self.name)

    def __post_init__(self) -> None:
        self.consumer  # noqa: B018 - validates the queue consumer (ValueError)
        if not 1 <= self.batch_size <= 10:
            raise ValueError("a work queue's batch size must be 1..10")


#: Interactive exports of a saved query version to CSV or XLSX: one export per invocation
#: (a large file takes the whole function), two at a time, three receives.
EXPORTS = WorkQueue(name="exports", consumer_function="export_consumer", consumer_timeout_s=300,
                    consumer_memory_mb=1024, max_receive_count=3, batch_size=1, max_concurrency=2)

#: Every queue-only worker, by name. Infra and the local stack iterate over this too.
WORK_QUEUES: dict[str, WorkQueue] = {q.name: q for q in (EXPORTS,)}


@dataclass(frozen=True, kw_only=True)
class SnapshotPipeline:
    """The monthly-snapshot pipeline: a planner every ``planner_rate_minutes`` (it plans
    completed workspace-local months, then nudges the dispatcher), a reserved-concurrency-one
    dispatcher every minute (admission under ``admission_cap`` with ``backfill_lane``
    reserved for backfills, reoffers, lost-job reconciliation), a job queue with its DLQ,
    and the run job (``job_function``) reading it.

    Units: seconds unless the name says otherwise. A job hands over to a new invocation when
    fewer than ``handover_margin_s`` remain of ``job_timeout_s``; ``max_receive_count``
    receives of one job, then the attempt is a retryable failure. Checked at construction
    (``ValueError``).
    """

    name: str = "snapshots"
    planner_function: str = "snapshot_planner"
    dispatcher_function: str = "snapshot_dispatcher"
    job_function: str = "snapshot_run_job"
    planner_rate_minutes: int = 15
    dispatcher_rate_minutes: int = 1
    planner_timeout_s: int = 120
    dispatcher_timeout_s: int = 60
    job_timeout_s: int = 900
    handover_margin_s: int = 60
    max_receive_count: int = 3
    admission_cap: int = 4
    backfill_lane: int = 1
    job_max_concurrency: int = 4
    reoffer_after_s: int = 300
    horizon_months: int = 3
    overdue_grace_hours: int = 24
    queue_age_alarm_s: int = 900
    dispatcher_silence_alarm_minutes: int = 5
    dlq_retention_days: int = 14

    def __post_init__(self) -> None:
        if not 0 <= self.backfill_lane < self.admission_cap:
            raise ValueError("the backfill lane must be smaller than the admission cap")
        if self.job_max_concurrency < self.admission_cap or not 2 <= self.job_max_concurrency <= 1000:
            raise ValueError("the run job's maximum concurrency must hold every admitted run (and be 2..1000)")
        if self.handover_margin_s * 2 > self.job_timeout_s:
            raise ValueError("the hand-over margin must leave most of the job's timeout for chunks")
        if self.reoffer_after_s < 60 * self.dispatcher_rate_minutes:
            raise ValueError("reoffer_after must be at least one dispatcher tick")
        self.consumer  # noqa: B018 - validates the queue consumer (ValueError)

    @property
    def consumer(self) -> QueueConsumer:
        """The job queue and the run job reading it, one job per invocation (a job may hold
        its invocation for its whole timeout)."""
        return QueueConsumer(queue_name=f"timekeeper-{self.name}-jobs", dlq_name=f"timekeeper-{self.name}-jobs-dlq",
                             function=self.job_function, timeout_s=self.job_timeout_s,
                             max_receive_count=self.max_receive_count, batch_size=1,
                             max_concurrency=self.job_max_concurrency, dlq_retention_days=self.dlq_retention_days,
                             queue_age_alarm_s=self.queue_age_alarm_s)

    @property
    def reoffer_after(self) -> timedelta:
        """A queued run whose job has not started this long after its offer gets a new job."""
        return timedelta(seconds=self.reoffer_after_s)

    @property
    def job_lost_after(self) -> timedelta:
        """A running run whose job has not beaten this long has lost its job (every receive
        was used up or the messages vanished): a retryable failure."""
        return timedelta(seconds=self.max_receive_count * self.consumer.visibility_timeout_s + self.job_timeout_s)


SNAPSHOTS = SnapshotPipeline()


@dataclass(frozen=True, kw_only=True)
class Renderer:
    """The report renderer: a function invoked asynchronously (Lambda ``Event``
    invocations) with ``{"workspace_id", "render_id"}``, outside any pipeline.

    Units: seconds unless the name says otherwise. ``reserved_concurrency`` caps the
    renders at once (and the renderer's database connections); ``retry_attempts`` and
    ``max_event_age_s`` are its asynchronous-invocation settings: a failed invocation is
    retried that many times, an event older than the age is dropped, and either way the
    event then goes to the on-failure queue ``failure_queue_name`` (kept
    ``failure_retention_days``).
    """

    name: str
    function: str
    timeout_s: int = 300
    memory_mb: int = 1024
    reserved_concurrency: int = 2
    retry_attempts: int = 2
    max_event_age_s: int = 900
    failure_retention_days: int = 14

    @property
    def max_attempts(self) -> int:
        """Attempts Lambda makes for one invocation: the first and its retries."""
        return 1 + self.retry_attempts

    @property
    def failure_queue_name(self) -> str:
        return f"timekeeper-{self.name}-failed"

    def __post_init__(self) -> None:
        if not 0 <= self.retry_attempts <= 2:
            raise ValueError("Lambda asynchronous retry attempts are 0..2")
        if not 60 <= self.max_event_age_s <= 21600:
            raise ValueError("Lambda maximum event age is 60..21600 s")
        if self.timeout_s > 900:
            raise ValueError("a Lambda function runs at most 900 s")
        if self.reserved_concurrency < 1:
            raise ValueError("the renderer needs a reserved concurrency of at least 1")


#: The report renderer (``functions/report_renderer``): a render of 20 sections of up to
#: 1,000 rows each fits well inside 300 s; two at once keep its connections few. (Twenty
#: sections each running into the workers' 15 s statement timeout could pass 300 s: that
#: attempt dies, and the attempt limit ends the render as ``attempts_exhausted``.)
REPORT_RENDERER = Renderer(name="report-renderer", function="report_renderer")


def queue_consumers() -> list[QueueConsumer]:
    """Every queue consumer of the deployment: the pipelines' run queues, the work queues
    and the snapshot job queue, in that order (what infra and the local stack build)."""
    return ([p.consumer for p in PIPELINES.values()] + [q.consumer for q in WORK_QUEUES.values()]
            + [SNAPSHOTS.consumer])


@dataclass(frozen=True, kw_only=True)
class ConnectionBudget:
    """The most database connections the deployment opens at once (through RDS Proxy).

    ``consumers``: the sum of the event-source maximum concurrency of the pipelines' (times
    their ``consumer_connections``) and the work queues' consumers;
    ``dispatchers``: one per pipeline (reserved concurrency 1); ``api``: the API function's
    reserved concurrency; ``migration``: the migration trigger's; ``renderers``: the report
    renderer's reserved concurrency.
    """

    consumers: int
    dispatchers: int
    api: int
    migration: int
    #: The snapshot pipeline: its planner, its dispatcher and its run jobs.
    snapshots: int = 0
    #: The report renderer's reserved concurrency.
    renderers: int = 0

    @property
    def total(self) -> int:
        """Every connection of the budget."""
        return (self.consumers + self.dispatchers + self.api + self.migration + self.snapshots
                + self.renderers)


def connection_budget(pipelines: dict[str, Pipeline] | None = None,
                      work_queues: dict[str, WorkQueue] | None = None) -> ConnectionBudget:
    """The :class:`ConnectionBudget` of ``pipelines`` (default: :data:`PIPELINES`) and
    ``work_queues`` (default: :data:`WORK_QUEUES`): each Lambda execution environment holds
    one connection, so the concurrency bounds are the connection bounds."""
    chosen = PIPELINES if pipelines is None else pipelines
    queues = WORK_QUEUES if work_queues is None else work_queues
    consumers = (sum(p.max_concurrency * p.consumer_connections for p in chosen.values())
                 + sum(q.max_concurrency for q in queues.values()))
    return ConnectionBudget(consumers=consumers, dispatchers=len(chosen),
                            api=API_RESERVED_CONCURRENCY, migration=MIGRATION_CONNECTIONS,
                            snapshots=2 + SNAPSHOTS.job_max_concurrency,
                            renderers=REPORT_RENDERER.reserved_concurrency)


def pipeline_for_owner(owner: str) -> Pipeline:
    """Return the pipeline of ``owner``; raises ``KeyError`` when there is none."""
    for pipeline in PIPELINES.values():
        if pipeline.owner == owner:
            return pipeline
    raise KeyError(owner)


#: SendMessageBatch calls one publish keeps in flight at once (each of 10 messages), and the
#: size of the SQS client's connection pool. 20 sends a full claim batch (200 runs) in one
#: round trip: at 10 ms a call, about 20,000 messages a second instead of 1,000.
PUBLISH_IN_FLIGHT = 20
