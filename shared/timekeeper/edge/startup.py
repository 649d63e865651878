"""Cold start: each handler builds, when Lambda imports it, the AWS clients its code calls.

``functions/<folder>/handler.py`` calls :func:`cold_start` with its own folder name. In
AWS (``TIMEKEEPER_FUNCTION`` set by infra) that builds the adapters the function's entry
points use, through :func:`timekeeper.edge.adapters.aws_client`, so a function whose code
calls a service its topology entry does not declare fails at its cold start with
:class:`~timekeeper.edge.adapters.UndeclaredService` naming the service, instead of
stalling on a connect timeout in the middle of its work. In the local stack (the variable
unset: one process hosts every function) it does nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from timekeeper.edge import adapters
from timekeeper.topology import (
    API,
    AUTHORIZER,
    DOWNLOADS,
    EXPORTS,
    MESSAGE_EVENTS,
    MIGRATION,
    PIPELINES,
    REPORT_RENDERER,
    SECRETS_MANAGER,
    SNAPSHOTS,
)


def _dispatcher(pipeline: str) -> Callable[[], None]:
    def build() -> None:
        adapters.publisher(pipeline)
        adapters.notifier()
        if PIPELINES[pipeline].people_pass:
            adapters.mailer()  # the people pass mails owner notices
        if pipeline == REPORT_RENDERER.swept_by:
            adapters.renderer_client()  # the renders' sweep asks for unfinished renders again
    return build


def _run_consumer(pipeline: str) -> Callable[[], None]:
    def build() -> None:
        from timekeeper.edge.runs import pipeline_services

        pipeline_services(pipeline)
        if PIPELINES[pipeline].capped_work_kinds:  # a run the per-workspace cap releases is sent again
            adapters.publisher(pipeline)
    return build


def _export_consumer() -> None:
    adapters.s3_client()
    adapters.export_publisher()


def _snapshot_planner() -> None:
    adapters.lambda_client()


def _snapshot_publisher() -> None:
    adapters.snapshot_job_publisher()


def _renderer() -> None:
    adapters.s3_client()


def _api() -> None:
    for name in PIPELINES:
        adapters.publisher(name)
    adapters.export_publisher()
    adapters.renderer_client()
    adapters.s3_client()
    from timekeeper.edge import api

    api.console_app()  # the console's session keys, from Secrets Manager


def _downloads() -> None:
    adapters.s3_client()
    adapters.link_signer()


def _authorizer() -> None:
    from timekeeper.edge import authorizer

    authorizer.jwt_authorizer()


def builders() -> dict[str, Callable[[], None]]:
    """Every function's ``functions/<folder>`` -> what its cold start builds (besides the
    Secrets Manager client of its database login, which every function that declares
    Secrets Manager builds)."""
    found: dict[str, Callable[[], None]] = {}
    for pipeline in PIPELINES.values():
        found[pipeline.dispatcher_function] = _dispatcher(pipeline.name)
        found[pipeline.consumer.function] = _run_consumer(pipeline.name)
    found[EXPORTS.consumer.function] = _export_consumer
    found[SNAPSHOTS.planner_function] = _snapshot_planner
    found[SNAPSHOTS.dispatcher_function] = _snapshot_publisher
    found[SNAPSHOTS.consumer.function] = _snapshot_publisher
    found[REPORT_RENDERER.function] = _renderer
    found[API.function] = _api
    found[MIGRATION.function] = lambda: None
    found[AUTHORIZER.function] = _authorizer
    found[DOWNLOADS.function] = _downloads
    found[MESSAGE_EVENTS.function] = adapters.sqs_client
    return found


def cold_start(function: str) -> None:
    """Build the AWS clients ``function`` (its ``functions/<folder>``) calls, when this
    process runs it (``TIMEKEEPER_FUNCTION``); nothing when the variable is unset.

    Raises :class:`~timekeeper.edge.adapters.UndeclaredService` when the function's code
    asks for a service its topology entry does not declare, or when the variable names
    another function than the handler's (infra wired the wrong handler); ``KeyError``
    for a function the edge does not know; ``RuntimeError`` when a variable the adapters
    need is unset."""
    running = adapters.running_function()
    if running is None:
        return
    if running != function:
        raise adapters.UndeclaredService(f"TIMEKEEPER_FUNCTION={running!r} but this is the {function} handler")
    if SECRETS_MANAGER in adapters.declared_services(function):  # every database login's secret
        adapters.secrets_provider()
    builders()[function]()
