"""SQS adapter: publish messages (run messages, export messages) with SendMessageBatch
(10 entries a call), up to :data:`timekeeper.topology.PUBLISH_IN_FLIGHT` calls at once.
A message that names its workspace carries it as ``MessageGroupId`` (SQS fair queues on
the standard queues).

An entry the queue refuses, or a whole call that fails, is reported back as refused
so the caller releases those runs (or exports) for a later pass.

A publish of more than one call sends its calls concurrently from a small thread pool
the publisher keeps (boto3 clients are thread-safe once created; the client's connection
pool is sized to the same bound, :func:`timekeeper.edge.adapters.sqs_client`). The
publish returns only when every call it started has answered, so what the caller records
afterwards (accepted, refused) is the whole outcome, exactly as with calls one after
another; a call that raises something other than an SQS error stops the calls not yet
started and is raised once the started ones have answered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any
from uuid import UUID

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from timekeeper.faults import crash_point
from timekeeper.observability import logger
from timekeeper.schedules.messages import RunMessage
from timekeeper.topology import PUBLISH_IN_FLIGHT

BATCH_LIMIT = 10


class SqsMessagePublisher:
    """Publishes pydantic messages (JSON bodies) to one SQS queue; ``key(message)`` is the
    id reported back for a refused message (a run id, an export id).

    ``client`` is a boto3 SQS client created once per execution environment at the edge.
    ``in_flight``: the most SendMessageBatch calls at once (1: one after another);
    ``ValueError`` below 1.
    """

    def __init__(self, client: Any, queue_url: str, key: Callable[[Any], UUID],
                 in_flight: int = PUBLISH_IN_FLIGHT):
        if in_flight < 1:
            raise ValueError("a publisher sends at least one call at a time")
        self.client = client
        self.queue_url = queue_url
        self.key = key
        self.in_flight = in_flight
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def publish(self, messages: Sequence[BaseModel]) -> set[UUID]:
        """Send ``messages`` in calls of :data:`BATCH_LIMIT`, up to ``in_flight`` at once;
        return the keys of those the queue refused (never raises for SQS errors).

        Returns when every started call has answered. Raises what a call raises other
        than an SQS error (``ClientError``, ``BotoCoreError``), after the started calls
        answered and with the calls not yet started never made: the caller records
        nothing for that publish and the pipeline's re-offer sends it again. The crash
        point ``publish.between_batches`` is hit (on the caller's thread) each time one
        call has answered while others of the publish are still to answer.
        """
        chunks = [messages[start:start + BATCH_LIMIT] for start in range(0, len(messages), BATCH_LIMIT)]
        if self.in_flight == 1 or len(chunks) <= 1:
            refused: set[UUID] = set()
            for index, chunk in enumerate(chunks):
                if index:
                    crash_point("publish.between_batches")
                refused |= self._send(chunk)
            return refused
        return self._send_concurrently(chunks)

    def _send_concurrently(self, chunks: list[Sequence[BaseModel]]) -> set[UUID]:
        pool = self._executor()
        pending: set[Future[set[UUID]]] = {pool.submit(self._send, chunk) for chunk in chunks}
        refused: set[UUID] = set()
        error: BaseException | None = None
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    if future.cancelled():
                        continue
                    failure = future.exception()
                    if failure is None:
                        refused |= future.result()
                    elif error is None:
                        error = failure
                        for other in pending:
                            other.cancel()  # the calls not started yet are never made
                if pending and error is None:
                    crash_point("publish.between_batches")
        except BaseException:
            # The caller's thread dies here (a crash point): the calls not started are
            # never made and the started ones answer before the error goes up.
            for other in pending:
                other.cancel()
            wait(pending)
            raise
        if error is not None:
            raise error
        return refused

    def _send(self, chunk: Sequence[BaseModel]) -> set[UUID]:
        """One SendMessageBatch call; the keys of the entries it refused (all of them when
        the call failed with an SQS error)."""
        entries = [_entry(str(i), m) for i, m in enumerate(chunk)]
        try:
            response = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except (ClientError, BotoCoreError) as error:
            logger.warning("SendMessageBatch failed; releasing the chunk", extra={"error": str(error)[:500]})
            return {self.key(m) for m in chunk}
        refused = set()
        for failed in response.get("Failed", []):
            key = self.key(chunk[int(failed["Id"])])
            refused.add(key)
            logger.warning("queue refused a message", extra={"key": str(key), "code": failed.get("Code")})
        return refused

    def _executor(self) -> ThreadPoolExecutor:
        """The publisher's thread pool of ``in_flight`` workers, created on first use."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.in_flight, thread_name_prefix="sqs-publish")
            return self._pool


    def send_delayed(self, message: BaseModel, delay_s: int) -> bool:
        """Send one ``message`` that becomes receivable ``delay_s`` seconds from now (SQS
        ``DelaySeconds``, 0..900; ``ValueError`` outside); True when the queue accepted it,
        False when the call failed with an SQS error (logged)."""
        if not 0 <= delay_s <= 900:
            raise ValueError("a message's delay is 0..900 seconds")
        entry = _entry("0", message)
        del entry["Id"]
        try:
            self.client.send_message(QueueUrl=self.queue_url, DelaySeconds=delay_s, **entry)
        except (ClientError, BotoCoreError) as error:
            logger.warning("SendMessage of a delayed message failed", extra={"error": str(error)[:500]})
            return False
        return True


def _entry(entry_id: str, message: BaseModel) -> dict[str, str]:
    """A SendMessageBatch entry of ``message``: its JSON body and, when the message names a
    workspace (``workspace_id``), that workspace as its ``MessageGroupId``: on a standard
    queue this makes it a fair queue (SQS delivers the messages of a quiet workspace before
    those of a workspace with a backlog in flight; ordering stays unordered)."""
    entry = {"Id": entry_id, "MessageBody": message.model_dump_json()}
    workspace = getattr(message, "workspace_id", None)
    if workspace is not None:
        entry["MessageGroupId"] = str(workspace)
    return entry


class SqsRunPublisher(SqsMessagePublisher):
    """A :class:`~timekeeper.schedules.messages.RunPublisher` over one SQS queue (refusals
    reported by run id)."""

    def __init__(self, client: Any, queue_url: str, in_flight: int = PUBLISH_IN_FLIGHT):
        super().__init__(client, queue_url, key=_run_id, in_flight=in_flight)

    def publish(self, messages: Sequence[RunMessage]) -> set[UUID]:  # type: ignore[override]
        """Send ``messages``; return the run ids the queue refused (never raises for SQS errors)."""
        return super().publish(messages)


def _run_id(message: RunMessage) -> UUID:
    return message.run_id
