"""Mail at SES's pace: one ``queries.deliver`` run to 5,000 recipients through the real
consumer (``process_run``) and the real sender, into a sink that behaves like SES.

    python benchmarks/ses_pacing.py                       # 5,000 recipients, 180 s receives
    python benchmarks/ses_pacing.py --recipients 500 --receive-s 20

The sink answers each submission after 50-150 ms (uniformly random, half before the
submission reaches it, half after) and refuses, with SES's ``Throttling`` error "Maximum
sending rate exceeded.", any submission arriving when it already accepted 14 in the last
second; its ``max_send_rate()`` tells 14 (SES's ``GetSendQuota``). The database is
``bench_ses_pacing`` on the embedded PostgreSQL (``DATABASE_URL`` wins); the file goes to
moto S3. A saved schedule holds at most 1,000 recipients (``MAX_RECIPIENTS``); the
benchmark lifts that bound for its own schedule.

**The receive's timeout is scaled**: the queries consumer's is 900 s, here ``--receive-s``
(180 s by default) measured from the start of each receive, with the sender's reserve
scaled alike (30 s -> 6 s), so the 5,000 recipients (about 400 s at 90 % of 14/s) need
several receives. Each receive is the real ``process_run``: the sender stops starting
submissions when the remaining time no longer covers its slowest submission, the run is
handed back (``DeliveryContinues``) and the next receive sends only to the rest.

Printed: receives used (of the queue's 3), total seconds, sends, duplicates (recipients
given more than one message: must be 0), throttles, and whether the run succeeded within
its receives. Exit code 1 when a duplicate was sent or the run did not succeed.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

import boto3  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402
from moto import mock_aws  # noqa: E402

from benchmarks._bench import DATA_DIR, git_revision  # noqa: E402
from benchmarks.delivery import BUCKET, NOW, SETTINGS, NoRenderer, _fill, _run_now  # noqa: E402
from timekeeper.db.connection import connect  # noqa: E402
from timekeeper.db.migrate import apply_migrations  # noqa: E402
from timekeeper.local import embedded  # noqa: E402
from timekeeper.reporting import delivery as dl  # noqa: E402
from timekeeper.reporting import query_schedules  # noqa: E402
from timekeeper.reporting.links import LinkSigner  # noqa: E402
from timekeeper.reporting.sending import SendPolicy  # noqa: E402
from timekeeper.reporting.work_kinds import register  # noqa: E402
from timekeeper.schedules.consumer import process_run  # noqa: E402
from timekeeper.schedules.work import WorkKindRegistry  # noqa: E402
from timekeeper.topology import QUERIES  # noqa: E402

RATE = 14.0
LATENCY_S = (0.05, 0.15)
#: The consumer's reserve scaled like its timeout (30 s of 900 s).
RESERVE_SHARE = 30 / QUERIES.consumer.timeout_s


class SesLikeSink:
    """SES as the sender sees it: a latency, a sending rate it enforces, a quota it tells.
    Thread-safe; counts accepted messages per address and throttles."""

    sender = "reports@bench.test"

    def __init__(self, rate: float = RATE, seed: int = 7) -> None:
        self.rate = rate
        self._accepted: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self.per_address: collections.Counter[str] = collections.Counter()
        self.throttles = 0
        self.sent = 0

    def max_send_rate(self) -> float:
        return self.rate

    def send(self, *, to: str, subject: str, html: str, text: str, headers=None) -> str:
        with self._lock:
            latency = self._rng.uniform(*LATENCY_S)
        time.sleep(latency / 2)
        with self._lock:
            now = time.monotonic()
            while self._accepted and now - self._accepted[0] >= 1.0:
                self._accepted.popleft()
            if len(self._accepted) >= self.rate:
                self.throttles += 1
                refused = True
            else:
                self._accepted.append(now)
                self.per_address[to] += 1
                self.sent += 1
                refused = False
                message_id = f"sink-{self.sent}"
        time.sleep(latency / 2)
        if refused:
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Maximum sending rate exceeded."}},
                              "SendRawEmail")
        return message_id


def _database() -> str:
    server = os.environ.get("DATABASE_URL") or embedded.server_url(DATA_DIR)
    url = embedded.create_database(server, "bench_ses_pacing")
    with connect(url) as conn:
        apply_migrations(conn)
    return url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=5000)
    parser.add_argument("--receive-s", type=float, default=180.0, help="the scaled receive timeout (seconds)")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "b", "AWS_SECRET_ACCESS_KEY": "b", "AWS_DEFAULT_REGION": "us-east-1"})
    os.environ.pop("AWS_ENDPOINT_URL", None)
    url = _database()
    kinds = WorkKindRegistry()
    register(kinds)
    n, receives_allowed = args.recipients, QUERIES.consumer.max_receive_count
    sink = SesLikeSink()
    throttled: list[int] = []
    policy = SendPolicy(concurrency=args.concurrency, reserve_s=args.receive_s * RESERVE_SHARE)
    with mock_aws(), connect(url) as conn, connect(url) as journal:
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        # A saved schedule holds at most MAX_RECIPIENTS (1,000); the benchmark lifts that
        # bound for its own schedule to measure the sender on a larger list.
        query_schedules.MAX_RECIPIENTS = max(n, query_schedules.MAX_RECIPIENTS)
        ws, schedule = _fill(conn, n)
        message = _run_now(conn, ws, schedule)
        print(f"git {git_revision()}; {n:,} recipients; SES-like sink {RATE:.0f}/s, {LATENCY_S[0] * 1000:.0f}-"
              f"{LATENCY_S[1] * 1000:.0f} ms; receive timeout scaled to {args.receive_s:.0f} s (of "
              f"{QUERIES.consumer.timeout_s} s), reserve {policy.reserve_s:.1f} s; {args.concurrency} in flight")
        started = time.monotonic()
        state, receives = "running", 0
        while state not in ("succeeded", "failed") and receives < receives_allowed:
            receives += 1
            receive_start = time.monotonic()
            services = dl.DeliveryServices(
                journal=lambda: journal, s3=s3, bucket=BUCKET, mailer=sink, links=LinkSigner("b" * 48),
                download_base_url="https://bench/", renderer=NoRenderer(), send_policy=policy,
                time_left_s=lambda start=receive_start: args.receive_s - (time.monotonic() - start),
                on_throttled=throttled.append)
            before = sink.sent
            try:
                process_run(conn, message, receive_count=receives, now=NOW, registry=kinds, settings=SETTINGS,
                            services={"delivery": services})
            except Exception as error:  # noqa: BLE001 - a hand-back is the consumer's RetryLater
                print(f"receive {receives}: handed back ({type(error).__name__})", end="; ")
            state = conn.execute("SELECT state FROM schedule_runs WHERE id = %s", (message.run_id,)).fetchone()["state"]
            print(f"sent {sink.sent - before:,} in {time.monotonic() - receive_start:.1f} s; run {state}")
        total = time.monotonic() - started
        recorded = conn.execute("SELECT count(*) AS n FROM query_deliveries WHERE run_id = %s AND status = 'sent'",
                                (message.run_id,)).fetchone()["n"]
    duplicates = sum(1 for c in sink.per_address.values() if c > 1)
    print(f"receives used: {receives} of {receives_allowed}; total {total:.1f} s; sends {sink.sent:,} "
          f"({sink.sent / total:.1f}/s); recorded sent {recorded:,}; duplicates {duplicates}; throttles "
          f"{sink.throttles} (counted by the sender: {sum(throttled)})")
    ok = state == "succeeded" and duplicates == 0 and recorded == n == len(sink.per_address)
    print("target (finishes within its receives, none sent twice):", "met" if ok else "NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
