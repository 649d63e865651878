"""The one description of every pipeline.

The CDK stacks and the local stack both read these numbers, so what runs locally is what
deploys: the queue's maxReceiveCount here is also the consumer's idea of its final
receive, the visibility timeout is derived from the consumer's timeout, and the lease a
consumer takes on a run never outlives the function that holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

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

    @property
    def visibility_timeout_s(self) -> int:
        """Queue visibility timeout: 6 x the consumer timeout (AWS guidance)."""
        return 6 * self.consumer_timeout_s

    @property
    def lease(self) -> timedelta:
        """How long a started run is protected from concurrent execution: the consumer timeout."""
        return timedelta(seconds=self.consumer_timeout_s)

    @property
    def reoffer_after(self) -> timedelta:
        """A queued run offered this long ago and never started is offered again."""
        return timedelta(seconds=self.reoffer_after_s)

    @property
    def queue_name(self) -> str:
        return f"timekeeper-{self.name}-runs"

    @property
    def dlq_name(self) -> str:
        return f"timekeeper-{self.name}-runs-dlq"

    def __post_init__(self) -> None:
        if self.max_receive_count < 2:
            raise ValueError("max_receive_count below 2 loses messages to the DLQ on throttles")
        if not 2 <= self.max_concurrency <= 1000:
            raise ValueError("SQS event source maximum concurrency must be 2..1000")
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError("SQS event source batch size must be 1..10000")
        if self.batch_size > 10 and self.max_batching_window_s < 1:
            raise ValueError("an SQS batch size above 10 needs a batching window of at least 1 second")
        if self.reoffer_after_s <= self.consumer_timeout_s:
            raise ValueError("reoffer_after must exceed the consumer timeout")
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

#: Every pipeline, by name. Infra and the local stack iterate over this.
PIPELINES: dict[str, Pipeline] = {p.name: p for p in (ACCOUNTING,)}


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
    def visibility_timeout_s(self) -> int:
        """Queue visibility timeout: 6 x the consumer timeout (AWS guidance)."""
        return 6 * self.consumer_timeout_s

    @property
    def reoffer_after(self) -> timedelta:
        """An unpublished queued request this old is offered again."""
        return timedelta(seconds=self.reoffer_after_s)

    @property
    def queue_name(self) -> str:
        return f"timekeeper-{self.name}"

    @property
    def dlq_name(self) -> str:
        return f"timekeeper-{self.name}-dlq"

    @property
    def queue_url_variable(self) -> str:
        """The environment variable naming the queue's URL (read by :mod:`timekeeper.runtime`)."""
        return f"WORK_QUEUE_URL_{self.name.upper()}"

    def __post_init__(self) -> None:
        if self.max_receive_count < 2:
            raise ValueError("max_receive_count below 2 gives a failing request no retry")
        if not 2 <= self.max_concurrency <= 1000:
            raise ValueError("SQS event source maximum concurrency must be 2..1000")
        if not 1 <= self.batch_size <= 10:
            raise ValueError("a work queue's batch size must be 1..10")
        if not 1 <= self.consumer_timeout_s <= 900:
            raise ValueError("a Lambda timeout is 1..900 s")


#: Interactive exports of a saved query version to CSV or XLSX: one export per invocation
#: (a large file takes the whole function), two at a time, three receives.
EXPORTS = WorkQueue(name="exports", consumer_function="export_consumer", consumer_timeout_s=300,
                    consumer_memory_mb=1024, max_receive_count=3, batch_size=1, max_concurrency=2)

#: Every queue-only worker, by name. Infra and the local stack iterate over this too.
WORK_QUEUES: dict[str, WorkQueue] = {q.name: q for q in (EXPORTS,)}


@dataclass(frozen=True, kw_only=True)
class ConnectionBudget:
    """The most database connections the deployment opens at once (through RDS Proxy).

    ``consumers``: the sum of the event-source maximum concurrency of the pipelines' and
    the work queues' consumers;
    ``dispatchers``: one per pipeline (reserved concurrency 1); ``api``: the API function's
    reserved concurrency; ``migration``: the migration trigger's.
    """

    consumers: int
    dispatchers: int
    api: int
    migration: int

    @property
    def total(self) -> int:
        """Every connection of the budget."""
        return self.consumers + self.dispatchers + self.api + self.migration


def connection_budget(pipelines: dict[str, Pipeline] | None = None,
                      work_queues: dict[str, WorkQueue] | None = None) -> ConnectionBudget:
    """The :class:`ConnectionBudget` of ``pipelines`` (default: :data:`PIPELINES`) and
    ``work_queues`` (default: :data:`WORK_QUEUES`): each Lambda execution environment holds
    one connection, so the concurrency bounds are the connection bounds."""
    chosen = PIPELINES if pipelines is None else pipelines
    queues = WORK_QUEUES if work_queues is None else work_queues
    consumers = sum(p.max_concurrency for p in chosen.values()) + sum(q.max_concurrency for q in queues.values())
    return ConnectionBudget(consumers=consumers, dispatchers=len(chosen),
                            api=API_RESERVED_CONCURRENCY, migration=MIGRATION_CONNECTIONS)


def pipeline_for_owner(owner: str) -> Pipeline:
    """Return the pipeline of ``owner``; raises ``KeyError`` when there is none."""
    for pipeline in PIPELINES.values():
        if pipeline.owner == owner:
            return pipeline
    raise KeyError(owner)
