"""The dead-letter queues' routes: staff read each queue's messages before acting, and
move one back or delete one, with a reason.

=======  ================================================================  ======  ================================
method   path                                                              role    what
=======  ================================================================  ======  ================================
GET      ``/operations/dead-letter-queues``                                staff   every dead-letter queue and its
                                                                                   depth
GET      ``/operations/dead-letter-queues/{queue}/messages``               staff   up to ``limit`` of its messages,
                                                                                   decoded, each left in the queue
POST     ``/operations/dead-letter-queues/{queue}/messages/{message_id}/   staff   move one message back to its
         redrive``                                                                 queue, with a reason
POST     ``/operations/dead-letter-queues/{queue}/messages/{message_id}/   staff   delete one message, with a reason
         delete``
=======  ================================================================  ======  ================================

Moving every message back is ``POST /operations/dead-letter-queues/{queue}/redrive``
(:mod:`timekeeper.api.operations_routes`). Staff are the operations routes' (a snapshot
type's staff role); anyone else is 403 ``forbidden``. Reading a message receives it with a
short visibility timeout and makes it visible again at once
(:class:`timekeeper.aws.dead_letters.DeadLetterQueues`): reading loses nothing. A
message's ``names`` say what it is for (a run, an export, a snapshot job) so the console
links the run's page; ``why`` says why it died where the body tells (``malformed_body``: its
consumer cannot parse it; ``receives_exhausted``: its consumer never acknowledged it,
dying or timing out on every receive).

A message naming a run carries the run (``run``: its schedule's name and the occurrence)
for the page to name it by, every message's run looked up with one statement
(:func:`timekeeper.schedules.run_ops.run_labels`); staff read it as they read the run's
page (another workspace's run read is in that workspace's staff reads). ``being_read`` counts the
messages a read did not get because another reader holds them hidden for a moment.

Each action on one message is recorded in the operations actions
(``redrive_message`` / ``delete_message``, target ``<queue>/<message id>``, the body's
``names`` in the detail) with a log line ``operations action``, and on the run it names
(:func:`timekeeper.schedules.run_ops.record_operator_action`, ``redriven`` /
``dead_letter_deleted``: the run's page and its workspace's audit log show it). An unknown queue, or a
message the queue no longer holds, is 404 ``not_found``; a blank reason 422 naming
``reason``.

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from functools import partial
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, Field

from timekeeper import observability as obs
from timekeeper.api import errors
from timekeeper.api.errors import ApiError
from timekeeper.api.models import RunState, UtcDatetime
from timekeeper.api.operations_routes import (
    QUEUE_PATTERN,
    ActionReason,
    DeadLetterQueueOut,
    Staff,
    dead_letters_of,
    depth_out,
)
from timekeeper.api.routing import SECURITY, Api, ApiRouter
from timekeeper.observability import logger, metrics
from timekeeper.platform import audit
from timekeeper.schedules import run_ops

_TAGS = ["operations"]
#: An SQS message id (a UUID; letters, digits and dashes).
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9-]{1,100}$"
MAX_MESSAGES = 50

_ERRORS = {
    401: "No or invalid authorizer claims",
    403: "The caller holds no staff role (forbidden), or is not an active member of the token's workspace "
         "(not_a_member, left_workspace, user_deactivated)",
    404: "No such dead-letter queue, or the queue does not hold that message (any more)",
    415: "The body is not application/json",
    422: "Invalid input (the field is named)",
}
_responses = partial(errors.responses, texts=_ERRORS)
QueueName = Annotated[str, Path(pattern=QUEUE_PATTERN, max_length=64, description="the queue's name")]
MessageId = Annotated[str, Path(pattern=MESSAGE_ID_PATTERN, max_length=100, description="SQS's message id")]


class DeadLetterQueueList(BaseModel):
    """Every dead-letter queue the deployment gives the API, in the topology's order."""

    items: list[DeadLetterQueueOut]
    as_of: UtcDatetime


class MessageNames(BaseModel):
    """What a dead-letter message is for, read from its body."""

    kind: Literal["run", "export", "snapshot_job"]
    id: str = Field(description="the run's, export's or snapshot job's id")
    workspace_id: str
    run_id: str | None = Field(None, description="a snapshot job's snapshot run")


class MessageRunOut(BaseModel):
    """The run a message names, for people: its schedule and occurrence."""

    id: UUID
    workspace_id: UUID
    schedule_id: UUID
    schedule_name: str
    state: RunState = Field(description="the run's state now")
    occurrence_at: UtcDatetime = Field(description="the occurrence's instant")
    occurrence_local: str = Field(description="the intended wall time in the schedule's zone",
                                  examples=["2027-03-14T02:30:00"])
    timezone: str = Field(description="the schedule's IANA zone (occurrence_local's)")


class DeadLetterMessageOut(BaseModel):
    """One dead-letter message as read (it stays in the queue)."""

    message_id: str
    body: str = Field(description="the body as sent")
    decoded: dict[str, Any] | None = Field(description="the body as a JSON object; null when it is not one")
    names: MessageNames | None = Field(description="what it is for; null when the body does not say")
    receive_count: int = Field(ge=0, description="SQS's approximate receive count (reads included)")
    first_received_at: UtcDatetime | None
    sent_at: UtcDatetime | None = Field(description="when it was first sent (to its own queue)")
    why: Literal["malformed_body", "receives_exhausted"] = Field(
        description="malformed_body: its consumer cannot parse it; receives_exhausted: its consumer never "
                    "acknowledged it on any receive allowed (it died or timed out each time)")
    run: MessageRunOut | None = Field(None, description="the run it names (null: it names none, or no run has "
                                                        "that id any more)")


class DeadLetterMessages(BaseModel):
    """``GET .../messages``: the queue's depth and up to ``limit`` of its messages."""

    queue: DeadLetterQueueOut
    items: list[DeadLetterMessageOut]
    being_read: int = Field(0, ge=0, description="messages of the queue this read did not get although it asked for "
                                                 "more: another reader holds them hidden for up to 30 s (they "
                                                 "come back; read again then)")
    timezone: str = Field("UTC", description="the staff member's own workspace's IANA zone, to show the UTC "
                                             "instants in")


class MessageActionOut(BaseModel):
    """An action on one message, as recorded."""

    queue: str
    action: Literal["redrive_message", "delete_message"]
    message: DeadLetterMessageOut = Field(description="the message as it was")
    reason: str


#: The dead-letter routes (included by :data:`timekeeper.api.app.ROUTERS`).
router = ApiRouter()


def _queues(api: Any, queue: str | None = None) -> Any:
    queues = dead_letters_of(api)
    if queue is not None and (queues is None or queue not in queues.names()):
        raise ApiError(404, errors.NOT_FOUND, f"no dead-letter queue named {queue}")
    return queues


@router.get("/operations/dead-letter-queues", tags=_TAGS, operation_id="listDeadLetterQueues", security=SECURITY,
            summary="Staff: every dead-letter queue and its depth", responses=_responses(200, "The queues"))
def list_queues(scope: Staff, api: Api) -> DeadLetterQueueList:
    queues = _queues(api)
    depths = [depth_out(d, scope.now) for d in queues.depths()] if queues is not None else []
    return DeadLetterQueueList(items=depths, as_of=scope.now)


@router.get("/operations/dead-letter-queues/<queue>/messages", tags=_TAGS, operation_id="readDeadLetters",
            security=SECURITY, summary="Staff: read a dead-letter queue's messages (they stay in the queue)",
            responses=_responses(200, "The queue and its messages", 404))
def read_messages(scope: Staff, api: Api, queue: QueueName,
                  limit: Annotated[int, Query(ge=1, le=MAX_MESSAGES, description="messages to read")] = 10,
                  ) -> DeadLetterMessages:
    queues = _queues(api, queue)
    depth = depth_out(queues.depth(queue), scope.now)
    items = _messages_out(scope, queues.messages(queue, limit=limit))
    # Fewer than asked while the queue holds more: the rest is hidden by another reader's receive.
    being_read = max(0, depth.messages - len(items)) if len(items) < limit else 0
    return DeadLetterMessages(queue=depth, items=items, being_read=being_read, timezone=scope.own_zone())


def _named_runs(scope: Any, messages: list[Any]) -> dict[UUID, dict[str, Any]]:
    """The runs ``messages`` name (run id -> :func:`timekeeper.schedules.run_ops.run_labels`'
    row), of any workspace, looked up with one statement for all of them. A read of
    another workspace's run is recorded in that workspace's staff reads (one a run, one
    statement a workspace), as the run's page records it."""
    run_ids = list(dict.fromkeys(UUID(m.names["id"]) for m in messages
                                 if m.names and m.names.get("kind") == "run"))
    with scope.conn.transaction():
        runs = run_ops.run_labels(scope.conn, run_ids)
    elsewhere: dict[UUID, list[UUID]] = {}
    for run in runs.values():
        if run["workspace_id"] != scope.identity.workspace_id and run["in_directory"]:
            elsewhere.setdefault(run["workspace_id"], []).append(run["id"])
    for workspace_id, read in elsewhere.items():
        with scope.conn.entered(workspace_id), scope.conn.transaction():
            audit.record_staff_reads(scope.conn, workspace_id=workspace_id, actor=scope.identity.user_id, what="run",
                                     details=[{"run_id": str(r), "via": "dead_letter"} for r in read], now=scope.now)
    return runs


def _messages_out(scope: Any, messages: list[Any]) -> list[DeadLetterMessageOut]:
    """``messages`` as read, each with the run it names (:func:`_named_runs`)."""
    runs = _named_runs(scope, messages)
    out = []
    for message in messages:
        run = runs.get(UUID(message.names["id"])) if message.names and message.names.get("kind") == "run" else None
        named = None
        if run is not None:
            named = MessageRunOut(**{k: run[k] for k in ("id", "workspace_id", "schedule_id", "schedule_name",
                                                         "state", "occurrence_at")},
                                  occurrence_local=run["occurrence_local"].isoformat(),
                                  timezone=run["timezone"] or "UTC")
        out.append(DeadLetterMessageOut(**vars(message), run=named))
    return out


def _record_on_run(scope: Any, run: dict[str, Any] | None, action: str, reason: str, queue: str,
                   message_id: str) -> None:
    """Record a message's redrive or deletion beside the run it names (hence in the run's
    workspace's audit log): ``redriven`` / ``dead_letter_deleted`` with the queue, the
    message id and the run's state then."""
    if run is None:
        return
    with scope.conn.entered(run["workspace_id"]), scope.conn.transaction():
        run_ops.record_operator_action(
            scope.conn, run=run, action="redriven" if action == "redrive_message" else "dead_letter_deleted",
            actor=scope.identity.user_id, reason=reason, now=scope.now,
            detail={"queue": queue, "message_id": message_id, "state_before": run["state"]})


def _act(scope: Any, api: Any, queue: str, message_id: str, action: str, reason: str) -> MessageActionOut:
    """Act on one message. What can fail (reading its names, looking up its run) runs
    before the queue changes, so a changed queue is always recorded."""
    queues = _queues(api, queue)
    prepared: dict[str, DeadLetterMessageOut] = {}

    def prepare(message: Any) -> None:
        [prepared["out"]] = _messages_out(scope, [message])

    done = (queues.redrive_message if action == "redrive_message" else queues.delete_message)(
        queue, message_id, prepare=prepare)
    if done is None:
        raise ApiError(404, errors.NOT_FOUND, f"the {queue} dead-letter queue does not hold message {message_id}")
    scope.record_action(action=action, target=f"{queue}/{message_id}", reason=reason,
                        detail={"names": done.names, "why": done.why, "receive_count": done.receive_count})
    message = prepared["out"]
    _record_on_run(scope, message.run and message.run.model_dump(), action, reason, queue, message_id)
    logger.info("operations action", extra={"action": action, "actor": scope.identity.user_id, "queue": queue,
                                            "message_id": message_id, "reason": reason})
    metrics.add_metric(name=obs.OPERATIONS_ACTIONS, unit="Count", value=1)
    return MessageActionOut(queue=queue, action=action, message=message, reason=reason)


@router.post("/operations/dead-letter-queues/<queue>/messages/<message_id>/redrive", tags=_TAGS,
             operation_id="redriveDeadLetter", security=SECURITY,
             summary="Staff: move one dead-letter message back to its queue, with a reason",
             responses=_responses(200, "Moved", 404, 415))
def redrive_message(scope: Staff, api: Api, queue: QueueName, message_id: MessageId,
                    body: Annotated[ActionReason, Body()]) -> MessageActionOut:
    return _act(scope, api, queue, message_id, "redrive_message", body.reason.strip())


@router.post("/operations/dead-letter-queues/<queue>/messages/<message_id>/delete", tags=_TAGS,
             operation_id="deleteDeadLetter", security=SECURITY,
             summary="Staff: delete one dead-letter message, with a reason",
             responses=_responses(200, "Deleted", 404, 415))
def delete_message(scope: Staff, api: Api, queue: QueueName, message_id: MessageId,
                   body: Annotated[ActionReason, Body()]) -> MessageActionOut:
    return _act(scope, api, queue, message_id, "delete_message", body.reason.strip())
