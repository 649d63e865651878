"""The SQS adapter's concurrent publish: bounded calls in flight, the whole outcome
reported, SQS errors reported as refusals and other errors raised after the started calls
answered. The queue is a sink standing in for the boto3 client (thread-safe, counting)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from botocore.exceptions import EndpointConnectionError

from timekeeper.aws.sqs import SqsRunPublisher
from timekeeper.schedules.messages import RunMessage


class Sink:
    """Sleeps ``call_s`` a call; ``answer(call_number, entries)`` may raise or return the
    entry ids to report Failed. Counts calls, entries accepted and the peak in flight."""

    def __init__(self, call_s=0.01, answer=None):
        self.call_s, self.answer = call_s, answer or (lambda n, entries: [])
        self.calls = self.in_flight = self.peak = 0
        self.accepted: list[str] = []
        self.lock = threading.Lock()

    def send_message_batch(self, *, QueueUrl, Entries):  # noqa: N803 - boto3's names
        with self.lock:
            self.calls += 1
            number = self.calls
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(self.call_s)
            failed = set(self.answer(number, Entries))
            with self.lock:
                self.accepted.extend(e["MessageBody"] for e in Entries if e["Id"] not in failed)
            return {"Successful": [], "Failed": [{"Id": i, "Code": "InternalError"} for i in failed]}
        finally:
            with self.lock:
                self.in_flight -= 1


def messages(n):
    return [RunMessage(run_id=uuid.uuid4(), schedule_id=uuid.uuid4(), workspace_id=uuid.uuid4(),
                       owner="accounting", work_kind="batch.roll") for _ in range(n)]


def test_calls_in_flight_never_exceed_the_bound_and_reach_it():
    sink = Sink()
    batch = messages(400)  # 40 calls
    assert SqsRunPublisher(sink, "q", in_flight=4).publish(batch) == set()
    assert sink.calls == 40 and sink.peak == 4
    assert sorted(sink.accepted) == sorted(m.model_dump_json() for m in batch)


def test_refused_entries_and_failed_calls_are_reported_by_run_id():
    batch = messages(100)

    def answer(number, entries):
        if number in (2, 5):
            raise EndpointConnectionError(endpoint_url="https://sqs")
        return [entries[0]["Id"]] if number % 3 == 0 else []

    sink = Sink(answer=answer)
    refused = SqsRunPublisher(sink, "q", in_flight=8).publish(batch)
    # two whole calls (20) and the first entry of calls 3, 6, 9 (3): 23 refused; the rest accepted
    assert len(refused) == 23 and len(sink.accepted) == 77
    accepted_ids = {RunMessage.model_validate_json(body).run_id for body in sink.accepted}
    assert refused == {m.run_id for m in batch} - accepted_ids


def test_an_unexpected_error_is_raised_after_the_started_calls_answered_and_stops_the_rest():
    def answer(number, entries):
        if number == 1:
            raise RuntimeError("broken client")
        return []

    sink = Sink(call_s=0.02, answer=answer)
    with pytest.raises(RuntimeError, match="broken client"):
        SqsRunPublisher(sink, "q", in_flight=2).publish(messages(200))
    assert sink.in_flight == 0 and sink.calls < 20


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError):
        SqsRunPublisher(Sink(), "q", in_flight=0)
