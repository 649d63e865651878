"""The shapes of the topology: a queue consumer, a dispatcher pipeline, a queue-only work
queue, the snapshot pipeline, the renderer, a function outside the pipelines, the history
retention and the connection budget. Each checks its own numbers at construction
(``ValueError``); the deployment's instances are in :mod:`timekeeper.topology`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from timekeeper.settings import work_queue_url_variable
from timekeeper.topology.limits import (
    CONNECT_TIMEOUT_S,
    CONSUMERS_PER_CAPPED_RUN,
    DISPATCHER_PUBLISH_ALLOWANCE_S,
    LAMBDA,
    MAX_DISPATCH_PARTITIONS,
    S3,
    SECRETS_MANAGER,
    SES,
    SNS,
    SQS,
    WORKER_STATEMENT_TIMEOUT_S,
    calls,
    check_services,
)


@dataclass(frozen=True, kw_only=True)
class ServiceFunction:
    """A function outside the pipelines (the HTTP API, the migration trigger): its
    ``functions/<folder>``, the AWS services it calls, and its reserved concurrency (None:
    none reserved)."""

    function: str
    services: frozenset[str]
    reserved_concurrency: int | None = None
    #: What the function calls on the internet beyond the AWS service APIs (empty:
    #: nothing). No VPC endpoint reaches it: a function in the created VPC needs the NAT
    #: route (``timekeeper:egress`` ``nat`` or ``nat-instance``) when it makes those calls.
    internet: str = ""

    def __post_init__(self) -> None:
        check_services(self.function, self.services)


@dataclass(frozen=True, kw_only=True)
class QueueConsumer:
    """A queue, its dead-letter queue and the function its SQS event source drives: the one
    description of a queue consumer. Every pipeline composes one (:attr:`Pipeline.consumer`,
    :attr:`WorkQueue.consumer`, :attr:`SnapshotPipeline.consumer`) and holds no copy of its
    numbers; infra and the local stack build the queue, its redrive, the consumer function
    and its event source from it alone.

    Units: seconds unless the name says otherwise. ``queue_name`` is the topology's name
    (``timekeeper-...``; a stage's deployment swaps the prefix), the dead-letter queue is
    ``<queue_name>-dlq``. ``max_receive_count`` is the queue's redrive limit and also the
    consumer's idea of its final receive. ``memory_mb`` / ``ephemeral_storage_mb``: the
    function's memory and /tmp (None: infra's consumer default and Lambda's 512 MB).
    ``connections``: database connections one execution holds (1, or 2 for a consumer that
    journals beside its run's transaction); ``services``: the AWS services the function
    calls (:func:`calls`). Checked at construction (``ValueError``): at
    least 2 receives (1 loses messages to the DLQ on throttles), an event-source maximum
    concurrency of 2..1000, a batch size of 1..10000 (above 10 only with a batching window),
    a Lambda timeout of 1..900 s, /tmp of 512..10240 MB, one or two connections.
    """

    queue_name: str
    #: The ``functions/<folder>`` reading the queue.
    function: str
    timeout_s: int
    max_receive_count: int
    batch_size: int = 1
    max_batching_window_s: int = 0
    max_concurrency: int = 2
    dlq_retention_days: int = 14
    queue_age_alarm_s: int = 900
    memory_mb: int | None = None
    ephemeral_storage_mb: int | None = None
    connections: int = 1
    #: The AWS services the consumer function calls (:func:`calls`).
    services: frozenset[str] = frozenset({SECRETS_MANAGER})

    @property
    def dlq_name(self) -> str:
        """The dead-letter queue's name: ``<queue_name>-dlq``."""
        return f"{self.queue_name}-dlq"

    @property
    def visibility_timeout_s(self) -> int:
        """Queue visibility timeout: 6 x the consumer timeout (AWS guidance)."""
        return 6 * self.timeout_s

    @property
    def lease(self) -> timedelta:
        """How long a started unit of work is protected from a concurrent execution: the
        consumer's timeout (the function holding it cannot outlive it)."""
        return timedelta(seconds=self.timeout_s)

    def __post_init__(self) -> None:
        if not self.queue_name.startswith("timekeeper-"):
            raise ValueError(f"{self.queue_name}: a queue name of the topology starts with 'timekeeper-'")
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
        if self.ephemeral_storage_mb is not None and not 512 <= self.ephemeral_storage_mb <= 10240:
            raise ValueError("a Lambda function's /tmp is 512..10240 MB")
        if self.connections not in (1, 2):
            raise ValueError("a consumer holds one or two database connections")
        check_services(self.function, self.services)


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    """A dispatcher -> queue -> consumer pipeline of one owner module.

    Units: seconds unless the name says otherwise. ``consumer`` is the run queue and its
    consumer (named ``timekeeper-<name>-runs``); its timeout is the lease a started run
    takes and its ``max_receive_count`` the attempt limit. ``rule_rate_minutes`` is the
    EventBridge rate; ``claim_batch`` bounds one claim transaction (not the pass);
    ``dispatcher_time_budget_s`` bounds the repeat loop of one pass: a claim may start
    until then, so connect + budget + one worker statement timeout + the publish allowance
    must end before ``dispatcher_timeout_s`` (checked at construction, ``ValueError``).
    ``dispatch_partitions`` (K, 1..16): the dispatcher runs as K partitions, each its own
    function (``dispatcher_function``'s code) with reserved concurrency 1 and its own rule,
    claiming the schedules whose stable hash falls in its share (partition 0 also does the
    owner-wide work); each partition holds one database connection.
    """

    name: str
    owner: str
    dispatcher_function: str
    consumer: QueueConsumer
    rule_rate_minutes: int = 1
    dispatcher_timeout_s: int = 60
    dispatcher_time_budget_s: int = 30
    claim_batch: int = 200
    reoffer_after_s: int = 900
    #: An offer the queue never accepted (the dispatcher died between its commit and the
    #: send) is offered again by a pass at least this much later (seconds).
    unpublished_reoffer_after_s: int = 30
    #: A run whose message the queue accepted this many times without the run finishing is
    #: settled failed ``offers_exhausted``.
    max_publishes: int = 3
    failure_pause_threshold: int = 5
    dispatcher_silence_alarm_minutes: int = 5
    #: The AWS services the dispatcher calls: its run queue, the notification topic.
    dispatcher_services: frozenset[str] = calls(SQS, SNS)
    #: Each dispatcher partition runs one pass at a time.
    dispatcher_reserved_concurrency: int = 1
    #: Dispatcher partitions (K): functions of the dispatcher's code, each with its own rule.
    dispatch_partitions: int = 1
    #: Claim workers of one dispatcher pass (1 or 2), each on its own database connection:
    #: with 2, the batches after a full first one are claimed two at a time, so the
    #: database's work on one batch overlaps the computing of the other's dues (measured
    #: 10.4k -> 15k occurrences a second with every rule distinct). Each is a connection of
    #: the budget.
    claim_workers: int = 2
    #: How long a run whose handler raised waits before its next receive (seconds), by the
    #: receive that failed (the first entry after receive 1, ...; the last entry repeats):
    #: the consumer sets the message's visibility timeout to it, so an infrastructure fault
    #: is retried within the queue's receives in seconds rather than after the whole
    #: visibility timeout or the dispatcher's re-offer.
    retry_backoff_s: tuple[int, ...] = (30, 120)
    #: The run failure-rate alarm: it fires when, in ``failure_rate_alarm_periods`` alarm
    #: periods in a row, more than ``failure_rate_alarm_percent`` % of the pipeline's
    #: settled runs failed, counting only periods that settled at least
    #: ``failure_rate_alarm_min_runs`` runs (one failure never fires it: the owner is told).
    failure_rate_alarm_percent: int = 20
    failure_rate_alarm_min_runs: int = 5
    failure_rate_alarm_periods: int = 3
    #: Whether partition 0's passes are followed by the people pass: owner notices made
    #: from the notification outbox of every owner, and their e-mails (its dispatcher calls
    #: SES). Exactly one pipeline of the deployment runs it.
    people_pass: bool = False
    #: Whether the owner keeps delivery history: its history retention also prunes the
    #: finished exports and erases the recipients' addresses of old delivery rows.
    prunes_delivery_history: bool = False
    #: Heavy work kinds (``"<owner>.<kind>"`` names, e.g. report deliveries that hold a
    #: consumer while a render runs) capped per workspace at start: when a workspace already
    #: has ``max_in_flight_per_workspace`` runs of these kinds running under a live lease,
    #: the consumer releases the next one for a later receive (a new copy of its message,
    #: delayed by ``cap_release_delay_s`` with jitter), never counting it as an attempt.
    capped_work_kinds: tuple[str, ...] = ()
    #: With capped work kinds, the consumer's maximum concurrency n must be at least
    #: :data:`~timekeeper.topology.limits.CONSUMERS_PER_CAPPED_RUN` (3) times this cap c
    #: (checked at construction, ``ValueError``): one workspace at its cap leaves n - c of
    #: the n consumers to the others, so their capped work drains at most n / (n - c) = 1.5
    #: times slower than alone.
    max_in_flight_per_workspace: int = 2
    #: The delay of a released message: a random whole number of seconds in this range
    #: (inclusive; at most 900, SQS's DelaySeconds limit).
    cap_release_delay_s: tuple[int, int] = (10, 30)

    @property
    def run_queue_name(self) -> str:
        """The run queue's name in the topology: ``timekeeper-<name>-runs``."""
        return f"timekeeper-{self.name}-runs"

    @property
    def lease(self) -> timedelta:
        """How long a started run is protected from concurrent execution: the consumer timeout."""
        return self.consumer.lease

    @property
    def reoffer_after(self) -> timedelta:
        """A queued run offered this long ago and never started is offered again."""
        return timedelta(seconds=self.reoffer_after_s)

    @property
    def partitions(self) -> range:
        """The dispatcher partitions' indexes, ``0..dispatch_partitions - 1``."""
        return range(self.dispatch_partitions)

    def __post_init__(self) -> None:
        check_services(self.dispatcher_function, self.dispatcher_services)
        if not 1 <= self.dispatch_partitions <= MAX_DISPATCH_PARTITIONS:
            raise ValueError(f"pipeline {self.name}: dispatch_partitions must be 1..{MAX_DISPATCH_PARTITIONS}")
        if self.claim_workers not in (1, 2):
            raise ValueError(f"pipeline {self.name}: claim_workers must be 1 or 2")
        if self.consumer.queue_name != self.run_queue_name:
            raise ValueError(f"pipeline {self.name}: its run queue is named {self.run_queue_name!r}")
        if self.max_in_flight_per_workspace < 1:
            raise ValueError(f"pipeline {self.name}: max_in_flight_per_workspace must be at least 1")
        needed = CONSUMERS_PER_CAPPED_RUN * self.max_in_flight_per_workspace
        if self.capped_work_kinds and self.consumer.max_concurrency < needed:
            raise ValueError(
                f"pipeline {self.name}: a per-workspace cap of {self.max_in_flight_per_workspace} on "
                f"{', '.join(self.capped_work_kinds)} needs at least {needed} consumers "
                f"({CONSUMERS_PER_CAPPED_RUN} x the cap: one workspace at its cap leaves two thirds of them to "
                f"the others), not max_concurrency {self.consumer.max_concurrency}")
        low, high = self.cap_release_delay_s
        if not 0 <= low <= high <= 900:
            raise ValueError(f"pipeline {self.name}: cap_release_delay_s must be 0 <= low <= high <= 900")
        if self.reoffer_after_s <= self.consumer.timeout_s:
            raise ValueError("reoffer_after must exceed the consumer timeout")
        if self.unpublished_reoffer_after_s < 1 or self.max_publishes < 1 or self.failure_pause_threshold < 1:
            raise ValueError(f"pipeline {self.name}: unpublished_reoffer_after_s, max_publishes and "
                             "failure_pause_threshold must be at least 1")
        if not self.retry_backoff_s or not all(0 <= d < self.reoffer_after_s for d in self.retry_backoff_s):
            raise ValueError("each retry backoff must be 0 s or more and shorter than the re-offer of a stranded run")
        if self.people_pass and SES not in self.dispatcher_services:
            raise ValueError(f"pipeline {self.name}: the people pass mails notices, so its dispatcher calls SES")
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


@dataclass(frozen=True, kw_only=True)
class WorkQueue:
    """A queue-only worker: requests are committed and published by a service (no
    dispatcher), and one consumer drains the queue (``consumer``, named
    ``timekeeper-<name>``; batches of 1..10).

    Units: seconds unless the name says otherwise. The consumer's ``max_receive_count`` is
    also its idea of its final receive (it settles the request failed then), its timeout the
    lease of an attempt; ``reoffer_after_s``: a queued request never published (a refused
    publish, a crash after commit) is offered again once it is this old: by the next read of
    it, the next consumer batch, and the owner-wide pass of the ``swept_by`` pipeline's
    dispatcher (every minute, up to ``reoffer_per_pass`` requests; None: no dispatcher
    sweeps the queue, and a request nobody reads waits for the next batch);
    ``reoffer_per_batch``: how many such requests one consumer invocation offers again
    after its batch.
    """

    name: str
    consumer: QueueConsumer
    reoffer_after_s: int = 30
    swept_by: str | None = None
    reoffer_per_pass: int = 100
    reoffer_per_batch: int = 10

    @property
    def queue_name(self) -> str:
        """The queue's name in the topology: ``timekeeper-<name>``."""
        return f"timekeeper-{self.name}"

    @property
    def reoffer_after(self) -> timedelta:
        """An unpublished queued request this old is offered again."""
        return timedelta(seconds=self.reoffer_after_s)

    @property
    def queue_url_variable(self) -> str:
        """The environment variable naming the queue's URL (:func:`timekeeper.settings.work_queue_url_variable`)."""
        return work_queue_url_variable(self.name)

    def __post_init__(self) -> None:
        if self.consumer.queue_name != self.queue_name:
            raise ValueError(f"work queue {self.name}: its queue is named {self.queue_name!r}")
        if not 1 <= self.consumer.batch_size <= 10:
            raise ValueError("a work queue's batch size must be 1..10")
        if self.reoffer_per_pass < 1 or self.reoffer_per_batch < 1:
            raise ValueError(f"work queue {self.name}: reoffer_per_pass and reoffer_per_batch must be at least 1")


@dataclass(frozen=True, kw_only=True)
class SnapshotPipeline:
    """The monthly-snapshot pipeline: a planner every ``planner_rate_minutes`` (it plans
    completed workspace-local months, then nudges the dispatcher), a reserved-concurrency-one
    dispatcher every minute (admission under ``admission_cap`` with ``backfill_lane``
    reserved for backfills, reoffers, lost-job reconciliation), and ``consumer``: the job
    queue (``timekeeper-<name>-jobs``) with its DLQ and the run job reading it, one job per
    invocation (a job may hold its invocation for its whole timeout).

    Units: seconds unless the name says otherwise. A job hands over to a new invocation when
    fewer than ``handover_margin_s`` remain of the consumer's timeout; the consumer's
    ``max_receive_count`` receives of one job, then the attempt is a retryable failure.
    Checked at construction (``ValueError``).
    """

    name: str = "snapshots"
    planner_function: str = "snapshot_planner"
    dispatcher_function: str = "snapshot_dispatcher"
    consumer: QueueConsumer
    planner_rate_minutes: int = 15
    dispatcher_rate_minutes: int = 1
    planner_timeout_s: int = 120
    dispatcher_timeout_s: int = 60
    handover_margin_s: int = 60
    admission_cap: int = 4
    backfill_lane: int = 1
    reoffer_after_s: int = 300
    #: The wait before the attempt after a run's n-th retryable failure (seconds: the n-th
    #: entry, the last repeating): five minutes, doubling (the fourth failure is final).
    retry_backoff_s: tuple[int, ...] = (300, 600, 1200)
    horizon_months: int = 3
    overdue_grace_hours: int = 24
    dispatcher_silence_alarm_minutes: int = 5
    #: The planner nudges the dispatcher (Lambda); the dispatcher sends jobs (SQS).
    planner_services: frozenset[str] = calls(LAMBDA)
    dispatcher_services: frozenset[str] = calls(SQS)
    #: The planner and the dispatcher each run one pass at a time.
    planner_reserved_concurrency: int = 1
    dispatcher_reserved_concurrency: int = 1

    @property
    def job_queue_name(self) -> str:
        """The job queue's name in the topology: ``timekeeper-<name>-jobs``."""
        return f"timekeeper-{self.name}-jobs"

    def __post_init__(self) -> None:
        check_services(self.planner_function, self.planner_services)
        check_services(self.dispatcher_function, self.dispatcher_services)
        if self.consumer.queue_name != self.job_queue_name:
            raise ValueError(f"snapshot pipeline {self.name}: its job queue is named {self.job_queue_name!r}")
        if self.consumer.batch_size != 1:
            raise ValueError("the run job takes one job per invocation (batch size 1)")
        if not 0 <= self.backfill_lane < self.admission_cap:
            raise ValueError("the backfill lane must be smaller than the admission cap")
        if self.consumer.max_concurrency < self.admission_cap:
            raise ValueError("the run job's maximum concurrency must hold every admitted run")
        if self.handover_margin_s * 2 > self.consumer.timeout_s:
            raise ValueError("the hand-over margin must leave most of the job's timeout for chunks")
        if self.reoffer_after_s < 60 * self.dispatcher_rate_minutes:
            raise ValueError("reoffer_after must be at least one dispatcher tick")

    @property
    def reoffer_after(self) -> timedelta:
        """A queued run whose job has not started this long after its offer gets a new job."""
        return timedelta(seconds=self.reoffer_after_s)

    @property
    def job_lost_after(self) -> timedelta:
        """A running run whose job has not beaten this long has lost its job (every receive
        was used up or the messages vanished): a retryable failure."""
        return timedelta(seconds=self.consumer.max_receive_count * self.consumer.visibility_timeout_s
                         + self.consumer.timeout_s)


@dataclass(frozen=True, kw_only=True)
class HistoryRetention:
    """How long finished history is kept, per kind, and how much one pass may prune.

    Units: days for the retentions (counted back from the pass's UTC ``now``), rows and
    seconds for the bounds. ``runs_days``: finished runs of a pipeline's owner (with their
    delivery rows); ``events_days``: schedule history; ``exports_days``: finished exports
    (at least the files' expiry, infra's ``timekeeper:exportRetentionDays``, so a row
    outlives its downloadable file); ``failed_snapshot_rows_days``: the generated rows of a
    failed snapshot run (the ledger row stays); ``personal_data_days``: recipients' addresses
    in delivery rows (the address is erased, the row kept; by default the delivered files'
    expiry, infra's ``timekeeper:deliveryRetentionDays``, 35). Each kind is pruned in batches of
    ``batch_rows`` (one committed statement each), at most ``max_batches_per_pass`` per
    kind per pass, and no new batch starts once the pass has spent ``time_budget_s``.
    What is always kept is the rule of :mod:`timekeeper.db.retention`.
    """

    runs_days: int = 90
    events_days: int = 90
    exports_days: int = 35
    failed_snapshot_rows_days: int = 14
    personal_data_days: int = 35
    batch_rows: int = 5000
    max_batches_per_pass: int = 20
    time_budget_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("runs_days", "events_days", "exports_days", "failed_snapshot_rows_days", "personal_data_days"):
            if getattr(self, name) < 1:
                raise ValueError(f"history retention: {name} must be at least 1 day")
        if self.events_days < self.runs_days:
            raise ValueError("history retention: events_days must be at least runs_days (a kept run keeps its events)")
        if not 1 <= self.batch_rows <= 50_000 or self.max_batches_per_pass < 1 or self.time_budget_s <= 0:
            raise ValueError("history retention: batch_rows 1..50,000, at least one batch, a positive time budget")


@dataclass(frozen=True, kw_only=True)
class Renderer:
    """The report renderer: a function invoked asynchronously (Lambda ``Event``
    invocations) with ``{"workspace_id", "render_id"}``, outside any pipeline.

    Units: seconds unless the name says otherwise. ``reserved_concurrency`` caps the
    renders at once (and the renderer's database connections); ``retry_attempts`` and
    ``max_event_age_s`` are its asynchronous-invocation settings: a failed invocation is
    retried that many times, an event older than the age is dropped, and either way the
    event then goes to the on-failure queue ``failure_queue_name`` (kept
    ``failure_retention_days``). ``swept_by``: the pipeline whose dispatcher's owner-wide
    pass sweeps the unfinished renders each minute (up to ``sweep_per_pass``; None: no
    sweep): a render whose last attempt's :attr:`lease` ran out with no attempt left is
    settled failed, one that nothing ran for :attr:`reoffer_after` is asked for again
    (at most :attr:`max_attempts` times, then settled failed).
    """

    name: str
    function: str
    timeout_s: int = 300
    memory_mb: int = 1024
    reserved_concurrency: int = 2
    retry_attempts: int = 2
    max_event_age_s: int = 900
    failure_retention_days: int = 14
    #: The AWS services the renderer calls: the rendered PDF (S3).
    services: frozenset[str] = calls(S3)
    swept_by: str | None = None
    sweep_per_pass: int = 100

    @property
    def max_attempts(self) -> int:
        """Attempts Lambda makes for one invocation: the first and its retries."""
        return 1 + self.retry_attempts

    @property
    def lease(self) -> timedelta:
        """How long an attempt may run: the function's timeout (Lambda stops it then)."""
        return timedelta(seconds=self.timeout_s)

    @property
    def reoffer_after(self) -> timedelta:
        """How long after a render's last request, attempt start or re-offer nothing of
        Lambda's can still run it: the event's maximum age (queued, retried) plus one
        timeout. An unfinished render idle this long is asked for again (or settled)."""
        return timedelta(seconds=self.max_event_age_s + self.timeout_s)

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
        check_services(self.function, self.services)


@dataclass(frozen=True, kw_only=True)
class ConnectionBudget:
    """The most database connections the deployment opens at once (through RDS Proxy).

    ``consumers``: the sum of the event-source maximum concurrency of the pipelines' and the
    work queues' consumers, each times its ``connections``;
    ``dispatchers``: one per claim worker of each dispatcher partition of each pipeline
    (each partition has reserved concurrency 1); ``api``: the API function's
    reserved concurrency; ``migration``: the migration trigger's; ``renderers``: the report
    renderer's reserved concurrency; ``downloads``: the download route's function's.
    """

    consumers: int
    dispatchers: int
    api: int
    migration: int
    #: The snapshot pipeline: its planner, its dispatcher and its run jobs.
    snapshots: int = 0
    #: The report renderer's reserved concurrency.
    renderers: int = 0
    #: The download route's function's reserved concurrency (the API's login).
    downloads: int = 0
    #: The message-events consumer's maximum concurrency (one connection each).
    message_events: int = 0

    @property
    def total(self) -> int:
        """Every connection of the budget."""
        return (self.consumers + self.dispatchers + self.api + self.migration + self.snapshots
                + self.renderers + self.downloads + self.message_events)
