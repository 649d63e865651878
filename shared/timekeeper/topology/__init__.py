"""The one description of every pipeline.

The CDK stacks and the local stack both read these numbers, so what runs locally is what
deploys: the queue's maxReceiveCount here is also the consumer's idea of its final
receive, the visibility timeout is derived from the consumer's timeout, and the lease a
consumer takes on a run never outlives the function that holds it.

The shapes are in :mod:`timekeeper.topology.shapes`, the fixed numbers and the AWS services
in :mod:`timekeeper.topology.limits`; this module holds the deployment's instances and what
is derived from them, and names every one of them (``from timekeeper.topology import X``).
"""

from __future__ import annotations

from timekeeper.topology.limits import (
    API_LOGIN,
    API_RESERVED_CONCURRENCY,
    API_STATEMENT_TIMEOUT_S,
    AWS_SERVICES,
    CONNECT_TIMEOUT_S,
    CONSUMERS_PER_CAPPED_RUN,
    DISPATCHER_PUBLISH_ALLOWANCE_S,
    DOWNLOADS_RESERVED_CONCURRENCY,
    LAMBDA,
    LAMBDA_UNRESERVED_MINIMUM,
    MAX_DISPATCH_PARTITIONS,
    MIGRATION_CONNECTIONS,
    PROXY_IDLE_CLIENT_TIMEOUT_S,
    PUBLISH_IN_FLIGHT,
    QUERY_FILE_STORAGE_MB,
    S3,
    SECRETS_MANAGER,
    SES,
    SNS,
    SQS,
    WORKER_LOGIN,
    WORKER_STATEMENT_TIMEOUT_S,
    calls,
)
from timekeeper.topology.shapes import (
    ConnectionBudget,
    HistoryRetention,
    Pipeline,
    QueueConsumer,
    Renderer,
    ServiceFunction,
    SnapshotPipeline,
    WorkQueue,
)

__all__ = [
    "ACCOUNTING",
    "API",
    "API_LOGIN",
    "API_RESERVED_CONCURRENCY",
    "API_STATEMENT_TIMEOUT_S",
    "AUTHORIZER",
    "AWS_SERVICES",
    "CONNECT_TIMEOUT_S",
    "CONSUMERS_PER_CAPPED_RUN",
    "ConnectionBudget",
    "DISPATCHER_PUBLISH_ALLOWANCE_S",
    "DOWNLOADS",
    "DOWNLOADS_RESERVED_CONCURRENCY",
    "EXPORTS",
    "HISTORY",
    "HistoryRetention",
    "LAMBDA",
    "LAMBDA_UNRESERVED_MINIMUM",
    "MAX_DISPATCH_PARTITIONS",
    "MESSAGE_EVENTS",
    "MESSAGE_EVENTS_NAME",
    "MIGRATION",
    "MIGRATION_CONNECTIONS",
    "NOTICES_PIPELINE",
    "OPTIONAL_FUNCTIONS",
    "PIPELINES",
    "PROXY_IDLE_CLIENT_TIMEOUT_S",
    "PUBLISH_IN_FLIGHT",
    "Pipeline",
    "QUERIES",
    "QUERY_FILE_STORAGE_MB",
    "QueueConsumer",
    "REPORT_RENDERER",
    "Renderer",
    "S3",
    "SECRETS_MANAGER",
    "SES",
    "SNAPSHOTS",
    "SNS",
    "SQS",
    "ServiceFunction",
    "SnapshotPipeline",
    "WORKER_LOGIN",
    "WORKER_STATEMENT_TIMEOUT_S",
    "WORK_QUEUES",
    "WorkQueue",
    "calls",
    "connection_budget",
    "dead_letter_queues",
    "function_copies",
    "function_services",
    "pipeline_for_owner",
    "queue_consumers",
    "required_account_concurrency",
    "reserved_concurrency",
    "reserved_per_function",
]


ACCOUNTING = Pipeline(
    name="accounting",
    owner="accounting",
    dispatcher_function="accounting_dispatcher",
    # Runs are short database work: 50 to a batch (one commit for all; at most 1 s of added
    # latency while the event source fills a batch), two consumers, five receives.
    consumer=QueueConsumer(queue_name="timekeeper-accounting-runs", function="accounting_consumer",
                           timeout_s=120, max_receive_count=5, batch_size=50, max_batching_window_s=1,
                           max_concurrency=2, services=calls()),
    # Two dispatcher partitions: each claims half the schedules, so a pass's claim work is
    # shared by two functions (and the deployed shape is the partitioned one from the start).
    dispatch_partitions=2,
)

#: Scheduled delivery of saved queries and reports (owner ``queries``, work kind
#: ``queries.deliver``). A report run holds its consumer while it polls the renderer for up
#: to 12 minutes, so: one run per invocation (batch 1), a 900 s consumer (the Lambda
#: maximum), three at a time (the specification's "three delivery consumers at most"),
#: three receives; a started run's lease is the consumer's timeout, and an offered run is
#: offered again only after twice that. Each consumer holds a second connection: the
#: delivery journal (files, outbox, recipient outcomes) commits beside the run's
#: transaction.
QUERIES = Pipeline(
    name="queries",
    owner="queries",
    dispatcher_function="queries_dispatcher",
    consumer=QueueConsumer(queue_name="timekeeper-queries-runs", function="queries_consumer",
                           timeout_s=900, max_receive_count=3, batch_size=1, max_concurrency=3,
                           queue_age_alarm_s=1800, connections=2,
                           # the query file is written to /tmp before upload, as an export's is
                           ephemeral_storage_mb=QUERY_FILE_STORAGE_MB,
                           # the delivered files (S3), the renderer (Lambda), the e-mail (SES)
                           # and its run queue (SQS): a run released by the per-workspace cap
                           services=calls(S3, LAMBDA, SES, SQS)),
    reoffer_after_s=1800,
    dispatch_partitions=2,
    # its run queue, the notification topic, and the owners' notice e-mails (SES): the
    # pass of partition 0 is followed by the people pass (timekeeper.edge.runs.tell_owners);
    # the renderer (Lambda): partition 0's sweep of unfinished renders asks for them again
    dispatcher_services=calls(SQS, SNS, SES, LAMBDA),
    people_pass=True,
    # delivered files' rows and exports: the owner's history retention prunes them too
    prunes_delivery_history=True,
    # a delivery holds a consumer (and, for a report, a render) for minutes: one workspace
    # runs one at a time, so thirty deliveries of one workspace leave two of the three
    # consumers to everyone else (the topology's rule: at least three consumers per unit of
    # the cap, so the others' deliveries drain at most 1.5 times slower than alone); a
    # capped run's message comes back 10-30 s later
    capped_work_kinds=("queries.deliver",),
    max_in_flight_per_workspace=1,
    cap_release_delay_s=(10, 30),
)

#: Every pipeline, by name. Infra and the local stack iterate over this.
PIPELINES: dict[str, Pipeline] = {p.name: p for p in (ACCOUNTING, QUERIES)}


def _people_pass_pipeline() -> str:
    """The name of the one pipeline whose ``people_pass`` is set; ``ValueError`` unless exactly one."""
    found = [p.name for p in PIPELINES.values() if p.people_pass]
    if len(found) != 1:
        raise ValueError(f"exactly one pipeline runs the people pass, not {found}")
    return found[0]


#: The pipeline whose dispatcher passes are followed by the people pass (its
#: ``people_pass``): owner notices made from the notification outbox of every owner, and
#: their e-mails.
NOTICES_PIPELINE = _people_pass_pipeline()


#: Interactive exports of a saved query version to CSV or XLSX: one export per invocation
#: (a large file takes the whole function), two at a time, three receives; the file is
#: written to the consumer's 2 GB /tmp before upload.
EXPORTS = WorkQueue(name="exports", consumer=QueueConsumer(
    queue_name="timekeeper-exports", function="export_consumer", timeout_s=300, max_receive_count=3,
    batch_size=1, max_concurrency=2, memory_mb=1024, ephemeral_storage_mb=QUERY_FILE_STORAGE_MB,
    services=calls(S3, SQS)),  # the file (S3); re-offers of unpublished exports (SQS)
    # the queries dispatcher's owner-wide pass offers unpublished exports again each minute
    swept_by=QUERIES.name)

#: Every queue-only worker, by name. Infra and the local stack iterate over this too.
WORK_QUEUES: dict[str, WorkQueue] = {q.name: q for q in (EXPORTS,)}


def _check_sweeps() -> None:
    """Each work queue's ``swept_by`` names a pipeline whose dispatcher may call SQS."""
    for queue in WORK_QUEUES.values():
        sweeper = PIPELINES.get(queue.swept_by) if queue.swept_by is not None else None
        if queue.swept_by is not None and (sweeper is None or SQS not in sweeper.dispatcher_services):
            raise ValueError(f"work queue {queue.name}: swept_by {queue.swept_by!r} is not a pipeline whose "
                             "dispatcher calls SQS")


_check_sweeps()


#: Monthly snapshots: a 900 s run job (the Lambda maximum; it hands over a minute before
#: it ends), four at a time (every admitted run), three receives of one job.
SNAPSHOTS = SnapshotPipeline(consumer=QueueConsumer(
    queue_name="timekeeper-snapshots-jobs", function="snapshot_run_job", timeout_s=900, max_receive_count=3,
    batch_size=1, max_concurrency=4, services=calls(SQS)))  # a hand-over re-sends its job (SQS)


#: The message-events queue: SES's configuration set publishes each message's later states
#: (delivery, bounce, complaint, reject, delivery delay) to an encrypted SNS topic, and this
#: queue, subscribed with raw message delivery, feeds them to their consumer. Events are
#: small database writes: ten to a batch (at most 5 s of added latency while a batch
#: fills), two consumers, five receives (an event may arrive before the outbox recorded its
#: message id: the consumer sets its visibility to a minute and tries again).
#: The operators' name of the message-events queue (:func:`dead_letter_queues`).
MESSAGE_EVENTS_NAME = "message_events"
MESSAGE_EVENTS = QueueConsumer(
    queue_name="timekeeper-message-events", function="message_events_consumer", timeout_s=60,
    max_receive_count=5, batch_size=10, max_batching_window_s=5, max_concurrency=2,
    services=calls(SQS))  # the retry of an event that came before its message id (SQS)


#: The deployment's history retention (partition 0 of each pipeline's dispatcher prunes its
#: owner's runs, events and, for queries, exports; the snapshot dispatcher the rows of
#: failed snapshot runs). 5,000 rows a batch and 20 batches retire 100,000 runs a minute.
HISTORY = HistoryRetention()


#: The report renderer (``functions/report_renderer``): a render of 20 sections of up to
#: 1,000 rows each fits well inside 300 s; two at once keep its connections few. (Twenty
#: sections each running into the workers' 15 s statement timeout could pass 300 s: that
#: attempt dies, and the attempt limit ends the render as ``attempts_exhausted``.)
REPORT_RENDERER = Renderer(name="report-renderer", function="report_renderer", swept_by=QUERIES.name)
if REPORT_RENDERER.swept_by is not None and LAMBDA not in PIPELINES[REPORT_RENDERER.swept_by].dispatcher_services:
    raise ValueError("the renderer's swept_by must name a pipeline whose dispatcher calls Lambda")


#: The HTTP API (``functions/api``): "Run now" and export requests (SQS), renders (Lambda),
#: presigned links and delivered files (S3), the console's session keys (Secrets Manager);
#: its reserved concurrency bounds its database connections. Where the console is deployed,
#: its sign-in calls the identity provider over the internet.
API = ServiceFunction(function="api", services=calls(SQS, S3, LAMBDA), reserved_concurrency=API_RESERVED_CONCURRENCY,
                      internet="the console's sign-in: the identity provider's discovery document, token "
                               "endpoint and keys (JWKS), where the console is deployed")
#: The public download route (``functions/downloads``): the API's resolver for
#: ``GET /downloads/{token}`` alone; presigned URLs of delivered files (S3), the link keys
#: (Secrets Manager); the API's walled login.
DOWNLOADS = ServiceFunction(function="downloads", services=calls(S3),
                            reserved_concurrency=DOWNLOADS_RESERVED_CONCURRENCY)
#: The migration trigger (``functions/migrate``): it reads the logins' secrets only.
MIGRATION = ServiceFunction(function="migrate", services=calls())
#: The API's JWT authorizer (``functions/authorizer``): no AWS service, no database; it
#: fetches the identity provider's JWKS over the internet (outside the VPC).
AUTHORIZER = ServiceFunction(function="authorizer", services=frozenset(),
                             internet="the identity provider's keys (JWKS)")
#: Functions deployed only when the deployment asks for them: the JWT authorizer (an
#: OpenID Connect issuer or a Cognito user pool named by context).
OPTIONAL_FUNCTIONS = frozenset({AUTHORIZER.function})


def function_services() -> dict[str, frozenset[str]]:
    """Every function of the deployment (its ``functions/<folder>``) -> the AWS services it
    calls: the pipelines' dispatchers and consumers, the work queues' consumers, the
    snapshot planner, dispatcher and run job, the renderer, the API and the migration."""
    found: dict[str, frozenset[str]] = {}
    for pipeline in PIPELINES.values():
        found[pipeline.dispatcher_function] = pipeline.dispatcher_services
    for consumer in queue_consumers():
        found[consumer.function] = consumer.services
    found[SNAPSHOTS.planner_function] = SNAPSHOTS.planner_services
    found[SNAPSHOTS.dispatcher_function] = SNAPSHOTS.dispatcher_services
    found[REPORT_RENDERER.function] = REPORT_RENDERER.services
    found[API.function] = API.services
    found[MIGRATION.function] = MIGRATION.services
    found[AUTHORIZER.function] = AUTHORIZER.services
    found[DOWNLOADS.function] = DOWNLOADS.services
    return found


def reserved_per_function() -> dict[str, int]:
    """Every function code (its ``functions/<folder>``) that reserves concurrency -> the
    units ONE function of that code reserves: each dispatcher partition of a pipeline, the
    snapshot planner and dispatcher, the renderer, the API, the download route."""
    found = {p.dispatcher_function: p.dispatcher_reserved_concurrency for p in PIPELINES.values()}
    found[SNAPSHOTS.planner_function] = SNAPSHOTS.planner_reserved_concurrency
    found[SNAPSHOTS.dispatcher_function] = SNAPSHOTS.dispatcher_reserved_concurrency
    found[REPORT_RENDERER.function] = REPORT_RENDERER.reserved_concurrency
    for function in (API, DOWNLOADS):
        if function.reserved_concurrency:
            found[function.function] = function.reserved_concurrency
    return found


def function_copies() -> dict[str, int]:
    """Function codes deployed as more than one function -> how many: a pipeline's
    dispatcher code once per partition (``dispatch_partitions``). Every other code is one
    function."""
    return {p.dispatcher_function: p.dispatch_partitions for p in PIPELINES.values()}


def reserved_concurrency() -> dict[str, int]:
    """Every function code (its ``functions/<folder>``) that reserves concurrency -> the
    units its functions reserve together: :func:`reserved_per_function` times
    :func:`function_copies` (a pipeline's dispatcher code reserves one unit per partition)."""
    copies = function_copies()
    return {folder: units * copies.get(folder, 1) for folder, units in reserved_per_function().items()}


def required_account_concurrency() -> int:
    """The Lambda concurrent-executions quota an account needs for this deployment with
    reserved concurrency on: the reserved units of :func:`reserved_concurrency` plus
    :data:`LAMBDA_UNRESERVED_MINIMUM`."""
    return sum(reserved_concurrency().values()) + LAMBDA_UNRESERVED_MINIMUM


def queue_consumers() -> list[QueueConsumer]:
    """Every queue consumer of the deployment: the pipelines' run queues, the work queues,
    the snapshot job queue and the message-events queue, in that order (what infra and the local stack build)."""
    return ([p.consumer for p in PIPELINES.values()] + [q.consumer for q in WORK_QUEUES.values()]
            + [SNAPSHOTS.consumer, MESSAGE_EVENTS])


def dead_letter_queues() -> dict[str, QueueConsumer]:
    """Every queue with a dead-letter queue, by the name operators use for it: each
    pipeline's run queue by the pipeline's name (``accounting``, ``queries``), each work
    queue by its name (``exports``), the snapshot job queue as ``snapshots`` and SES's
    message-events queue as ``message_events``."""
    return {**{name: p.consumer for name, p in PIPELINES.items()},
            **{name: q.consumer for name, q in WORK_QUEUES.items()}, SNAPSHOTS.name: SNAPSHOTS.consumer,
            MESSAGE_EVENTS_NAME: MESSAGE_EVENTS}


def connection_budget(pipelines: dict[str, Pipeline] | None = None,
                      work_queues: dict[str, WorkQueue] | None = None) -> ConnectionBudget:
    """The :class:`ConnectionBudget` of ``pipelines`` (default: :data:`PIPELINES`) and
    ``work_queues`` (default: :data:`WORK_QUEUES`): each Lambda execution environment holds
    one connection, so the concurrency bounds are the connection bounds."""
    chosen = PIPELINES if pipelines is None else pipelines
    queues = WORK_QUEUES if work_queues is None else work_queues
    consumers = sum(c.max_concurrency * c.connections
                    for c in [p.consumer for p in chosen.values()] + [q.consumer for q in queues.values()])
    dispatchers = sum(p.dispatch_partitions * p.claim_workers for p in chosen.values())
    return ConnectionBudget(consumers=consumers, dispatchers=dispatchers,
                            api=API_RESERVED_CONCURRENCY, migration=MIGRATION_CONNECTIONS,
                            snapshots=2 + SNAPSHOTS.consumer.max_concurrency,
                            renderers=REPORT_RENDERER.reserved_concurrency,
                            downloads=DOWNLOADS_RESERVED_CONCURRENCY,
                            message_events=MESSAGE_EVENTS.max_concurrency * MESSAGE_EVENTS.connections)


def pipeline_for_owner(owner: str) -> Pipeline:
    """Return the pipeline of ``owner``; raises ``KeyError`` when there is none."""
    for pipeline in PIPELINES.values():
        if pipeline.owner == owner:
            return pipeline
    raise KeyError(owner)
