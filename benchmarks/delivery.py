"""Scheduled delivery throughput: one ``queries.deliver`` run to 1,000 recipients through
the real consumer (``process_run``), with a counting sink as the communications adapter.

    python benchmarks/delivery.py                    # 1,000 recipients, 3 rounds
    python benchmarks/delivery.py --recipients 5000 --rounds 1

What runs: the database ``bench_delivery`` (dropped and re-created) on the server
``timekeeper.local.embedded.server_url(Path(".timekeeper/bench-pg"))`` returns
(``DATABASE_URL`` wins): one workspace, an owner, N recipients (current members with
``queries:read`` and an address), a saved query of 10 invoices, a daily query schedule.
Each round makes a Run now and processes it: the access rule for the owner, the file
(streamed and uploaded to moto S3 in-process), then per recipient the access rule and
address, the outbox claim, the signed link, the sandboxed templates, the sink's
submission and the two records (outbox, delivery row), each committed on the journal
connection. Recipients/s = N / the run's wall time (file included). Target: >= 2,000/s.

Then, once each: a reference round with moto SES (the real ``SesMailer``) instead of the
sink, and two checks printed with their counts (the exit code is 1 when one fails): a
duplicate delivery of the last finished run sends 0 messages; a run whose process dies
after half the submissions (a ``BaseException`` from the sink), redelivered after the lease
by a new process (new connections), sends only to the recipients never claimed: the ones
in flight when it died (at most the sender's concurrency) are recorded ``unconfirmed`` and
never sent again, every other recipient ends with exactly one recorded submission.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from benchmarks._bench import DATA_DIR, git_revision  # noqa: E402
from timekeeper.aws.ses import SesMailer  # noqa: E402
from timekeeper.db.connection import connect  # noqa: E402
from timekeeper.db.migrate import apply_migrations  # noqa: E402
from timekeeper.local import embedded  # noqa: E402
from timekeeper.platform.directory import add_member, create_workspace, upsert_user  # noqa: E402
from timekeeper.reporting import delivery as dl  # noqa: E402
from timekeeper.reporting import store  # noqa: E402
from timekeeper.reporting.links import LinkSigner  # noqa: E402
from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule  # noqa: E402
from timekeeper.reporting.work_kinds import register  # noqa: E402
from timekeeper.schedules import service  # noqa: E402
from timekeeper.schedules.consumer import ConsumerSettings, process_run  # noqa: E402
from timekeeper.schedules.messages import RunMessage  # noqa: E402
from timekeeper.schedules.work import WorkKindRegistry  # noqa: E402
from timekeeper.topology import QUERIES  # noqa: E402

NOW = datetime(2027, 3, 1, 6, tzinfo=UTC)
BUCKET = "bench-files"
SENDER = "reports@bench.test"
TARGET_PER_S = 2000
SETTINGS = ConsumerSettings.from_pipeline(QUERIES)


class ProcessKilled(BaseException):
    """Stands for the process dying mid-run (nothing in the consumer catches it)."""


class CountingSink:
    """The communications adapter of the benchmark: counts, keeps nothing; ``die_after``
    submissions it kills the process instead of accepting the next one."""

    def __init__(self, die_after: int | None = None) -> None:
        self.count = 0
        self.die_after = die_after
        self._lock = threading.Lock()  # the sender submits from a small thread pool

    def send(self, *, to: str, subject: str, html: str, text: str, headers=None) -> str:
        with self._lock:
            if self.die_after is not None and self.count >= self.die_after:
                raise ProcessKilled()
            self.count += 1
            return f"sink-{self.count}"


class CountingSes:
    """The real SES adapter (``SesMailer``) on moto's SES, counted: the reference figure."""

    def __init__(self, ses) -> None:
        self.inner = SesMailer(ses, SENDER)
        self.count = 0

    def send(self, *, to: str, subject: str, html: str, text: str, headers=None) -> str:
        message_id = self.inner.send(to=to, subject=subject, html=html, text=text, headers=headers)
        self.count += 1
        return message_id


class NoRenderer:
    def request(self, **_: object) -> None:
        raise RuntimeError("the benchmark delivers a query")


def _database() -> str:
    if os.environ.get("DATABASE_URL"):
        server = os.environ["DATABASE_URL"]
    else:
        server = embedded.server_url(DATA_DIR)
    url = embedded.create_database(server, "bench_delivery")
    with connect(url) as conn:
        apply_migrations(conn)
    return url


def _fill(conn, recipients: int):
    with conn.transaction():
        ws = create_workspace(conn, name="Bench", timezone="UTC", now=NOW).id
        upsert_user(conn, user_id="owner", display_name="Owner", email="owner@bench.test", now=NOW)
        add_member(conn, workspace_id=ws, user_id="owner", roles=["queries:write"], now=NOW)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO users (id, display_name, email, status, created_at) VALUES (%s, %s, %s, "
                            "'active', %s)", [(f"r{i:06d}", f"Recipient {i}", f"r{i}@bench.test", NOW)
                                              for i in range(recipients)])
            cur.executemany("INSERT INTO workspace_memberships (workspace_id, user_id, roles, joined_at) "
                            "VALUES (%s, %s, %s, %s)", [(ws, f"r{i:06d}", ["queries:read"], NOW - timedelta(days=1))
                                                        for i in range(recipients)])
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', 'Member', %s) RETURNING id", (ws, date(2026, 1, 1))).fetchone()["id"]
        for i in range(10):
            conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                         "currency, status) VALUES (%s, %s, %s, %s, %s, 100, 'EUR', 'open')",
                         (ws, member, f"INV-{i}", date(2027, 1, 1), date(2027, 2, 1)))
        query, _ = store.create_query(conn, workspace_id=ws, name="Invoices", actor="owner", now=NOW,
                                      definition={"entity": "invoices", "columns": ["number", "amount_minor"]})
    schedule, _ = create_query_schedule(
        conn, workspace_id=ws, actor="owner",
        new=NewQuerySchedule(name="Bench", recurrence={"cron": "0 7 * * *", "timezone": "UTC"},
                             source=Source("query", query.id), format="csv",
                             recipients=[f"r{i:06d}" for i in range(recipients)],
                             subject_template="{{ schedule_name }} {{ run_date }}",
                             body_template=("<p>Hi {{ recipient_name }}, {{ row_count }} rows: "
                                            "<a href='{{ link }}'>file</a></p>")),
        now=NOW)
    return ws, schedule


def _services(journal, s3, mailer) -> dl.DeliveryServices:
    return dl.DeliveryServices(journal=lambda: journal, s3=s3, bucket=BUCKET, mailer=mailer,
                               links=LinkSigner("b" * 48), download_base_url="https://bench/", renderer=NoRenderer())


def _run_now(conn, ws, schedule) -> RunMessage:
    run_id, _ = service.run_now(conn, workspace_id=ws, schedule_id=schedule.id, actor="owner", now=NOW,
                                publisher=_Quiet(), idempotency_key=str(uuid4()))
    return RunMessage(run_id=run_id, schedule_id=schedule.id, workspace_id=ws, owner="queries",
                      work_kind="queries.deliver")


def _process(conn, journal, s3, mailer, kinds, message, *, receive_count: int = 1, now: datetime = NOW):
    return process_run(conn, message, receive_count=receive_count, now=now, registry=kinds,
                       settings=SETTINGS, services={"delivery": _services(journal, s3, mailer)})


def _timed_round(conn, journal, s3, kinds, ws, schedule, mailer, recipients: int) -> tuple[RunMessage, float]:
    message = _run_now(conn, ws, schedule)
    started = time.perf_counter()
    result = _process(conn, journal, s3, mailer, kinds, message)
    elapsed = time.perf_counter() - started
    assert result.settlement is not None and result.settlement.state == "succeeded", result
    assert mailer.count == recipients, mailer.count
    return message, recipients / elapsed


def _crash_check(url, s3, kinds, ws, schedule, recipients: int) -> tuple[int, int, int]:
    """A run whose process dies after half the submissions, then its redelivery after the
    lease by a new process: returns (sent before the crash, sent by the retry, recipients
    with exactly one recorded submission)."""
    half = recipients // 2
    first = CountingSink(die_after=half)
    with connect(url) as conn, connect(url) as journal:
        message = _run_now(conn, ws, schedule)
        try:
            _process(conn, journal, s3, first, kinds, message)
        except ProcessKilled:
            pass
        else:
            raise AssertionError("the process was meant to die half-way")
    retry = CountingSink()
    with connect(url) as conn, connect(url) as journal:  # a new process: new connections
        result = _process(conn, journal, s3, retry, kinds, message, receive_count=2,
                          now=NOW + SETTINGS.lease + timedelta(seconds=1))
        assert result.settlement is not None and result.settlement.state == "succeeded", result
        once = conn.execute("SELECT count(*) AS n FROM query_delivery_outbox WHERE run_id = %s AND submissions = 1 "
                            "AND provider_message_id IS NOT NULL", (message.run_id,)).fetchone()["n"]
        unconfirmed = conn.execute("SELECT count(*) AS n FROM query_deliveries WHERE run_id = %s "
                                   "AND error_code = 'unconfirmed'", (message.run_id,)).fetchone()["n"]
    return first.count, retry.count, once, unconfirmed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ses-rounds", type=int, default=1, help="rounds with moto SES instead of the sink")
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "b", "AWS_SECRET_ACCESS_KEY": "b", "AWS_DEFAULT_REGION": "us-east-1"})
    os.environ.pop("AWS_ENDPOINT_URL", None)
    url = _database()
    kinds = WorkKindRegistry()
    register(kinds)
    n = args.recipients
    checks_ok = True
    with mock_aws(), connect(url) as conn, connect(url) as journal:
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        ses = boto3.client("ses")
        ses.verify_email_identity(EmailAddress=SENDER)
        ws, schedule = _fill(conn, n)
        print(f"git {git_revision()}; {n:,} recipients per run; target {TARGET_PER_S:,}/s (counting sink)")
        rates = []
        message = None
        for round_ in range(args.rounds):
            message, rate = _timed_round(conn, journal, s3, kinds, ws, schedule, CountingSink(), n)
            rates.append(rate)
            print(f"round {round_ + 1}: {n / rate:.3f} s, {rate:,.0f} recipients/s")
        best = max(rates)
        print(f"best {best:,.0f} recipients/s ({'meets' if best >= TARGET_PER_S else 'BELOW'} the target)")
        for round_ in range(args.ses_rounds):
            mailer = CountingSes(ses)
            _, rate = _timed_round(conn, journal, s3, kinds, ws, schedule, mailer, n)
            print(f"reference, moto SES round {round_ + 1}: {n / rate:.3f} s, {rate:,.0f} recipients/s")
        if message is not None:
            duplicate = CountingSink()
            result = _process(conn, journal, s3, duplicate, kinds, message, receive_count=2)
            ok = duplicate.count == 0 and result.settlement is None
            checks_ok &= ok
            print(f"check: a duplicate delivery of a finished run sent {duplicate.count} messages "
                  f"(expected 0): {'ok' if ok else 'FAILED'}")
        before, after, once, unconfirmed = _crash_check(url, s3, kinds, ws, schedule, n)
        in_flight = dl.DeliveryServices.__dataclass_fields__["send_policy"].default_factory().concurrency
        # The submissions in flight when the process died (accepted or not) are unconfirmed;
        # every other recipient has exactly one recorded submission, and no more messages
        # were made than recipients (none twice).
        ok = (before == n // 2 and 1 <= unconfirmed <= in_flight and once == n - unconfirmed
              and n - unconfirmed <= before + after <= n)
        checks_ok &= ok
        print(f"check: a crash after {before:,} accepted submissions ({unconfirmed} in flight, recorded "
              f"unconfirmed and never sent again), then the retry sent {after:,}; {once:,} of "
              f"{n - unconfirmed:,} others submitted exactly once, {before + after:,} messages for {n:,} "
              f"recipients: {'ok' if ok else 'FAILED'}")
    return 0 if checks_ok else 1


class _Quiet:
    """A run publisher that accepts everything (the benchmark processes the run itself)."""

    def publish(self, messages: list) -> set:
        return set()


if __name__ == "__main__":
    sys.exit(main())
