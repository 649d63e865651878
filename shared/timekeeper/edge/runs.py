"""The dispatcher -> run queue -> consumer pipelines (:data:`timekeeper.topology.PIPELINES`:
accounting, queries): one dispatcher pass, and the run queue's consumer.

Each handler names its pipeline from the topology, so one process (the local stack) can
host them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timekeeper import clock
from timekeeper import observability as obs
from timekeeper.edge import adapters, batch
from timekeeper.edge.registries import HISTORY_RETENTION_TASK, work_kinds
from timekeeper.faults import crash_point
from timekeeper.observability import PipelineMetrics, logger, metrics
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, Released, RetryLater, process_batch
from timekeeper.schedules.dispatcher import WHOLE_OWNER, DispatchReport, DispatchSettings, Partition, dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import run_maintenance
from timekeeper.settings import settings
from timekeeper.topology import PIPELINES, Pipeline


def tick_partition(detail: dict[str, Any] | None) -> Partition:
    """The dispatcher partition a scheduled event's ``detail`` names: ``{"partition": i,
    "partitions": k}`` (integers, as each partition's rule sends them), or the whole owner
    for an event without them (a plain scheduled event). Raises ``ValueError`` for
    anything else (the invocation fails; the next tick is the next minute)."""
    detail = detail or {}
    if "partition" not in detail and "partitions" not in detail:
        return WHOLE_OWNER
    index, count = detail.get("partition"), detail.get("partitions")
    if type(index) is not int or type(count) is not int:
        raise ValueError(f"dispatcher tick: partition and partitions must be integers, got {index!r} of {count!r}")
    return Partition(index, count)


def run_dispatcher(pipeline_name: str, partition: Partition = WHOLE_OWNER) -> DispatchReport:
    """One dispatcher pass of ``pipeline_name``'s ``partition`` (default: the whole owner) at
    the clock's ``now``, its batches after a full first one claimed by the pipeline's
    ``claim_workers`` (the second on the execution environment's second connection,
    :func:`timekeeper.edge.adapters.journal_database`); then, in partition 0, the owner's maintenance tasks
    (:func:`timekeeper.schedules.work.run_maintenance`; their summaries are logged, a
    failing task does not fail the pass), history retention among them: the rows it
    pruned are the ``HistoryPruned`` metric (0 on a pass that pruned nothing); each task's
    registered metrics (``register_maintenance(..., metrics=)``) are emitted from its
    summary; and, for the pipeline whose ``people_pass`` is set, :func:`tell_owners`."""
    pipeline: Pipeline = PIPELINES[pipeline_name]
    conn, now = adapters.database().get(), clock.now()
    report = dispatch(conn, DispatchSettings.of(pipeline), now=now, publisher=adapters.publisher(pipeline_name),
                      registry=work_kinds(), notifier=adapters.notifier(),
                      metrics=PipelineMetrics(metrics, pipeline_name), partition=partition,
                      second=adapters.journal_database().get if pipeline.claim_workers == 2 else None)
    if not partition.owner_wide:
        return report
    maintenance = {name: summary for name, summary in run_maintenance(conn, work_kinds(), pipeline.owner, now).items()
                   if summary}
    retention = maintenance.get(HISTORY_RETENTION_TASK) or {}
    PipelineMetrics(metrics, pipeline_name).add_metric(obs.HISTORY_PRUNED, "Count", retention.get("pruned", 0))
    if retention.get("pruned"):
        logger.info("history pruned", extra={"pipeline": pipeline_name, "retention": retention})
    if maintenance:
        logger.info("owner maintenance", extra={"maintenance": maintenance})
    for task, summary in maintenance.items():
        for key, metric in work_kinds().maintenance_metrics(pipeline.owner, task).items():
            if isinstance(summary, dict) and summary.get(key) is not None:
                metrics.add_metric(name=metric, unit="Count", value=summary[key])
    if pipeline.people_pass:
        tell_owners(conn, now)
    return report


def tell_owners(conn: Any, now: Any) -> dict[str, Any]:
    """The people pass after a dispatcher pass: turn untold events into owner notices
    (:func:`timekeeper.platform.notices.tell_people`), then mail the waiting ones under the
    digest rule (:func:`timekeeper.reporting.notice_mail.send_notice_mail`) through the
    configured mailer, each message with its one-click opt-out link (the link signer,
    under ``DOWNLOAD_BASE_URL``), then send the fresh download links recipients asked for
    (:func:`timekeeper.reporting.link_renewals.send_pending`). Never raises: a failure is
    logged and the next pass goes on."""
    from timekeeper.platform.notices import has_untold, tell_people
    from timekeeper.reporting.link_renewals import send_pending
    from timekeeper.reporting.notice_mail import send_notice_mail

    summary: dict[str, Any] = {}
    try:
        if has_untold(conn):
            summary["told"] = tell_people(conn, now=now)
        base = settings().download_base_url or ""
        mailed = send_notice_mail(
            conn, mailer=adapters.mailer(), now=now, links=adapters.link_signer(),
            base_url=base if base.endswith("/") else base + "/",
            on_sent=lambda count: metrics.add_metric(name=obs.NOTICES_MAILED, unit="Count", value=count))
        summary["mailed"] = {k: v for k, v in mailed.items() if v}
        renewed = send_pending(conn, mailer=adapters.mailer(), links=adapters.link_signer(),
                               base_url=base if base.endswith("/") else base + "/", now=now)
        summary["fresh_links"] = {k: v for k, v in renewed.items() if v}
    except Exception:  # noqa: BLE001 - logged; the next pass tells and mails again
        logger.exception("owner notices pass failed")
        summary["error"] = True
    if any(summary.values()):
        logger.info("owner notices", extra={"notices": summary})
    return summary


def delivery_services() -> Any:
    """The adapters of a delivery run (:class:`timekeeper.reporting.delivery.DeliveryServices`):
    the journal connection, the files bucket, the renderer, the mailer, the link signer
    and the download base URL (``DOWNLOAD_BASE_URL``), the sender's pace (``MAIL_SEND_*``),
    and the ``DeliveryFailed`` and ``SesThrottled`` metrics."""
    from timekeeper.reporting.delivery import DeliveryServices
    from timekeeper.reporting.sending import SendPolicy

    def failed(count: int) -> None:
        metrics.add_metric(name=obs.DELIVERY_FAILED, unit="Count", value=count)

    def throttled(count: int) -> None:
        metrics.add_metric(name=obs.SES_THROTTLED, unit="Count", value=count)

    config = settings()
    base = config.download_base_url or ""
    policy = SendPolicy(concurrency=config.mail_send_concurrency, send_rate=config.mail_send_rate,
                        quota_ttl_s=config.mail_quota_ttl_s)
    return DeliveryServices(journal=adapters.journal_database().get, s3=adapters.s3_client(),
                            bucket=adapters.files_bucket(), renderer=adapters.renderer_client(),
                            mailer=adapters.mailer(), links=adapters.link_signer(),
                            download_base_url=base if base.endswith("/") else base + "/", on_failed=failed,
                            send_policy=policy, on_throttled=throttled)


#: The services the edge builds for work kinds, by the name a kind declares
#: (``WorkKindRegistry.register(..., services=)``) -> the function that builds it.
RUN_SERVICES: dict[str, Callable[[], Any]] = {"delivery": delivery_services}


def pipeline_services(pipeline_name: str) -> dict[str, Any]:
    """The ``services`` a pipeline's work kinds get, by name: those its owner's registered
    kinds declare (:meth:`timekeeper.schedules.work.WorkKindRegistry.services`), each
    built by :data:`RUN_SERVICES`. Raises ``KeyError`` for a declared service the edge
    cannot build."""
    return {name: RUN_SERVICES[name]() for name in work_kinds().services(PIPELINES[pipeline_name].owner)}


def consume_runs(pipeline_name: str, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process an SQS batch of ``pipeline_name``'s run queue through :func:`batch.consume`;
    return the partial batch response (``{"batchItemFailures": [{"itemIdentifier": message
    id}, ...]}``).

    The well-formed run messages are processed together
    (:func:`timekeeper.schedules.consumer.process_batch`, one transaction); a malformed
    message, a run held by another consumer or a retryable fault fails only its own item; a
    handler's fault is received again after the pipeline's backoff (``retry_backoff_s``: the
    message's visibility timeout is set to it), a run held elsewhere after the queue's
    visibility timeout. A run the per-workspace cap holds back is released
    (:func:`_released`).
    Raises ``psycopg.Error`` when the database is unreachable (the whole batch comes back).
    """
    consumer_settings = ConsumerSettings.from_pipeline(PIPELINES[pipeline_name])

    def handle(received: list[batch.Received[RunMessage]]) -> list[bool]:
        deliveries = [Delivery(r.message_id, r.message, r.receive_count) for r in received]
        results = process_batch(adapters.database().get(), deliveries, now=clock.now(), registry=work_kinds(),
                                settings=consumer_settings, services=pipeline_services(pipeline_name),
                                metrics=PipelineMetrics(metrics, pipeline_name))
        outcomes: list[batch.Outcome] = []
        for delivery, result in zip(deliveries, results, strict=True):
            if isinstance(result, Released):
                outcomes.append(_released(pipeline_name, delivery, result, consumer_settings))
                continue
            failed = isinstance(result, Exception)
            if failed:
                logger.info("run message fails its batch item", extra={
                    "message_id": delivery.key, "run_id": str(delivery.message.run_id), "reason": str(result)[:500]})
            if isinstance(result, RetryLater) and result.delay_s is not None:
                outcomes.append(batch.Retry(result.delay_s))
            else:
                outcomes.append(not failed)
        return outcomes

    response = batch.consume(event, RunMessage, handle, what="run message",
                             change_visibility=adapters.change_visibility)
    crash_point("consumer.before_acknowledge")
    return response


def _released(pipeline_name: str, delivery: Delivery, result: Released, settings: ConsumerSettings) -> batch.Outcome:
    """The outcome of a run the per-workspace cap released: a new copy of its message,
    delayed by ``result.delay_s``, is sent and the received one acknowledged, so releases
    never raise a receive count (a capped run cannot reach the dead-letter queue however
    often it is released). When the send fails the item fails with that delay as its
    visibility timeout, except on the message's final receive: then it is acknowledged and
    the run, still queued and never started, is offered again by the dispatcher's re-offer."""
    if adapters.release_run(pipeline_name, delivery.message, result.delay_s):
        return True
    if delivery.receive_count >= settings.max_receive_count:
        logger.warning("a released run's copy could not be sent on its final receive; the dispatcher offers it again",
                       extra={"run_id": str(delivery.message.run_id)})
        return True
    return batch.Retry(result.delay_s)
