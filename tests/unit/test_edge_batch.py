"""The one SQS batch entry point: each record parsed once into its model, the partial batch
response built from the outcomes, a malformed record failing only itself."""

from __future__ import annotations

import json
import uuid

import pytest
from pydantic import BaseModel

from timekeeper.edge import batch


class Job(BaseModel):
    job_id: uuid.UUID


def _event(*records: tuple[str, str, object]) -> dict:
    return {"Records": [{"messageId": mid, "body": body, "attributes": {"ApproximateReceiveCount": count}}
                        for mid, body, count in records]}


def test_each_record_is_parsed_once_and_the_outcomes_make_the_response():
    # Given a batch of two good records (one with a receive count that is no number) and a malformed one
    first, second = uuid.uuid4(), uuid.uuid4()
    event = _event(("m1", json.dumps({"job_id": str(first)}), "3"), ("bad", "{not json", "1"),
                   ("m2", json.dumps({"job_id": str(second)}), "x"))
    seen: list[list[batch.Received[Job]]] = []

    def handle(received: list[batch.Received[Job]]) -> list[bool]:
        seen.append(received)
        return [True, False]

    # When it is consumed
    response = batch.consume(event, Job, handle, what="job message")

    # Then the handler got the two parsed messages in one call, and only the malformed one and
    # the one whose outcome was False fail
    assert [[(r.message_id, r.message.job_id, r.receive_count) for r in call] for call in seen] == [
        [("m1", first, 3), ("m2", second, 1)]]
    assert response == {"batchItemFailures": [{"itemIdentifier": "bad"}, {"itemIdentifier": "m2"}]}


def test_a_batch_of_malformed_records_does_not_call_the_handler():
    def handle(received):  # pragma: no cover - must not be called
        raise AssertionError("called")

    assert batch.consume(_event(("a", "", "1")), Job, handle, what="job message") == {
        "batchItemFailures": [{"itemIdentifier": "a"}]}
    assert batch.consume({}, Job, handle, what="job message") == {"batchItemFailures": []}


def test_one_outcome_per_record_is_required():
    event = _event(("m1", json.dumps({"job_id": str(uuid.uuid4())}), "1"))
    with pytest.raises(ValueError, match="1 records but 0 outcomes"):
        batch.consume(event, Job, lambda received: [], what="job message")


def test_each_handles_records_one_at_a_time():
    ids = [uuid.uuid4() for _ in range(3)]
    event = _event(*((f"m{i}", json.dumps({"job_id": str(job)}), "1") for i, job in enumerate(ids)))
    response = batch.consume(event, Job, batch.each(lambda item: item.message.job_id != ids[1]), what="job")
    assert response == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
