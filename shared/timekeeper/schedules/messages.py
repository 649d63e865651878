"""The run message the dispatcher publishes and the consumer parses (one per offered run)."""

from __future__ import annotations

from typing import Protocol
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from timekeeper.db.outbox import Publisher


class RunMessage(BaseModel):
    """SQS body of a run offer: ``{"run_id", "schedule_id", "workspace_id", "owner", "work_kind"}``.

    The run row is the source of truth; the message only names it. Unknown keys are
    refused so that a message from another producer is treated as malformed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: UUID
    schedule_id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str


#: Publishes run messages; returns the ids of the runs whose message was refused (the one
#: outbox's publisher, :class:`timekeeper.db.outbox.Publisher`). Implementations never raise
#: for a refused or failed send: they report it, and the caller releases the run for a
#: later pass.
RunPublisher = Publisher[RunMessage]


class Notifier(Protocol):
    """Publishes an owner notification (e.g. a pause notice); raises on failure."""

    def notify(self, *, subject: str, payload: dict) -> None: ...
