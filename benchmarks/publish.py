"""Publishing benchmark: messages per second into a queue whose every SendMessageBatch call
takes ``--call-ms`` (10 ms: a call from Lambda to SQS).

The queue is a sink standing in for the boto3 SQS client (it sleeps, then accepts every
entry); everything above it is the product's: the SQS adapter
(:class:`timekeeper.aws.sqs.SqsRunPublisher`, chunks of 10) and, in the second part, the
real dispatcher pass (``dispatch``: claim, commit, publish, record) over D due schedules.

    PYTHONPATH=shared python benchmarks/publish.py                 # about 1 min
    PYTHONPATH=shared python benchmarks/publish.py --quick         # smoke: seconds

Parts: ``publisher`` (publishes of ``--claim-limit`` messages one after another, as a pass
hands them over, and one publish of every message); ``dispatch`` (the whole pass into the
sink; claim_limit 200). The sink counts calls and the most calls it saw at once.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from uuid import uuid4

import _bench as b

from timekeeper.aws.sqs import SqsRunPublisher
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import Succeeded, WorkKindRegistry


class SleepingSqs:
    """A stand-in for a boto3 SQS client: ``send_message_batch`` sleeps ``call_s`` seconds,
    then accepts every entry. Thread-safe; counts calls, entries and the peak in flight."""

    def __init__(self, call_s: float) -> None:
        self.call_s = call_s
        self.calls = self.entries = self.in_flight = self.peak = 0
        self._lock = threading.Lock()

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict]) -> dict:  # noqa: N803 - boto3's names
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        time.sleep(self.call_s)
        with self._lock:
            self.in_flight -= 1
            self.calls += 1
            self.entries += len(Entries)
        return {"Successful": [{"Id": e["Id"], "MessageId": e["Id"]} for e in Entries], "Failed": []}


def messages(count: int) -> list[RunMessage]:
    return [RunMessage(run_id=uuid4(), schedule_id=uuid4(), workspace_id=uuid4(), owner=b.OWNER,
                       work_kind=b.WORK_KIND) for _ in range(count)]


def publisher_part(total: int, claim_limit: int, call_s: float) -> list[list]:
    rows = []
    batch = messages(total)
    for label, size in ((f"publishes of {claim_limit}", claim_limit), (f"one publish of {total:,}", total)):
        sink = SleepingSqs(call_s)
        publisher = SqsRunPublisher(sink, "https://sqs.invalid/bench")
        load = b.load_average()
        started = time.perf_counter()
        refused = 0
        for start in range(0, total, size):
            refused += len(publisher.publish(batch[start:start + size]))
        seconds = time.perf_counter() - started
        if refused or sink.entries != total:
            raise AssertionError(f"expected {total} accepted, {sink.entries} sent, {refused} refused")
        rows.append([label, f"{total:,}", sink.calls, sink.peak, f"{seconds:.3f}", f"{total / seconds:,.0f}",
                     f"{load:.1f}"])
    return rows


def dispatch_part(due: int, claim_limit: int, call_s: float, repeats: int) -> list[list]:
    url = b.open_database("bench_publish")
    conn = b.bench_connect(url)
    kinds = WorkKindRegistry()
    kinds.register(b.OWNER, b.WORK_KIND, lambda ctx: Succeeded(), description="benchmark no-op")
    data = b.load_schedules(conn, n=due, d_max=due, variant="shared")
    rows = []
    for _ in range(repeats):
        b.arm(conn, data, due)
        sink = SleepingSqs(call_s)
        publisher = SqsRunPublisher(sink, "https://sqs.invalid/bench")
        m = b.measure(lambda: dispatch(conn, b.dispatch_settings(claim_limit=claim_limit, time_budget_s=1e9),
                                       now=b.NOW, publisher=publisher, registry=kinds))  # noqa: B023
        report = m.result
        if report.published != due or sink.entries != due:
            raise AssertionError(f"expected {due} published, got {report.published} ({sink.entries} sent)")
        rows.append([f"dispatch pass, claim_limit {claim_limit}", f"{due:,}", sink.calls, sink.peak,
                     f"{m.seconds:.3f}", f"{due / m.seconds:,.0f}", f"{m.load_before:.1f}"])
    conn.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000, help="messages of the publisher part")
    parser.add_argument("--due", type=int, default=20000, help="due schedules of the dispatch part")
    parser.add_argument("--claim-limit", type=int, default=200)
    parser.add_argument("--call-ms", type=float, default=10.0, help="time of one SendMessageBatch call")
    parser.add_argument("--repeats", type=int, default=3, help="dispatch passes (each row is one)")
    parser.add_argument("--parts", default="publisher,dispatch")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.due, args.repeats = 2000, 2000, 1
    parts = args.parts.split(",")
    print(f"revision {b.git_revision()}; SendMessageBatch call {args.call_ms} ms", flush=True)
    rows = []
    if "publisher" in parts:
        rows += publisher_part(args.messages, args.claim_limit, args.call_ms / 1000)
    if "dispatch" in parts:
        rows += dispatch_part(args.due, args.claim_limit, args.call_ms / 1000, args.repeats)
    print(b.table(["what", "messages", "calls", "peak calls in flight", "seconds", "messages/s", "load avg"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
