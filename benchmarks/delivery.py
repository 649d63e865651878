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
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from benchmarks._bench import DATA_DIR, git_revision  # noqa: E402
from timekeeper.db.connection import connect  # noqa: E402
from timekeeper.db.migrate import apply_migrations  # noqa: E402
from timekeeper.local import embedded  # noqa: E402
from timekeeper.platform.directory import add_member, create_workspace, upsert_user  # noqa: E402
from timekeeper.queries import delivery as dl  # noqa: E402
from timekeeper.queries import store  # noqa: E402
from timekeeper.queries.links import LinkSigner  # noqa: E402
from timekeeper.queries.query_schedules import Source, create_query_schedule  # noqa: E402
from timekeeper.queries.work_kinds import register  # noqa: E402
from timekeeper.schedules import service  # noqa: E402
from timekeeper.schedules.consumer import ConsumerSettings, process_run  # noqa: E402
from timekeeper.schedules.messages import RunMessage  # noqa: E402
from timekeeper.schedules.work import WorkKindRegistry  # noqa: E402
from timekeeper.topology import QUERIES  # noqa: E402

NOW = datetime(2027, 3, 1, 6, tzinfo=UTC)
BUCKET = "bench-files"
TARGET_PER_S = 2000


class CountingSink:
    """The communications adapter of the benchmark: counts, keeps nothing."""

    def __init__(self) -> None:
        self.count = 0

    def send(self, *, to: str, subject: str, html: str, text: str) -> str:
        self.count += 1
        return f"sink-{self.count}"


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
        conn, workspace_id=ws, actor="owner", name="Bench", recurrence={"cron": "0 7 * * *", "timezone": "UTC"},
        source=Source("query", query.id), format="csv", recipients=[f"r{i:06d}" for i in range(recipients)],
        subject_template="{{ schedule_name }} {{ run_date }}",
        body_template="<p>Hi {{ recipient_name }}, {{ row_count }} rows: <a href='{{ link }}'>file</a></p>", now=NOW)
    return ws, schedule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "b", "AWS_SECRET_ACCESS_KEY": "b", "AWS_DEFAULT_REGION": "us-east-1"})
    os.environ.pop("AWS_ENDPOINT_URL", None)
    url = _database()
    kinds = WorkKindRegistry()
    register(kinds)
    with mock_aws(), connect(url) as conn, connect(url) as journal:
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        ws, schedule = _fill(conn, args.recipients)
        print(f"git {git_revision()}; {args.recipients:,} recipients per run; target {TARGET_PER_S:,}/s")
        rates = []
        for round_ in range(args.rounds):
            sink = CountingSink()
            services = dl.DeliveryServices(journal=lambda: journal, s3=s3, bucket=BUCKET, mailer=sink,
                                           links=LinkSigner("b" * 48), download_base_url="https://bench/",
                                           renderer=NoRenderer())
            run_id, _ = service.run_now(conn, workspace_id=ws, schedule_id=schedule.id, actor="owner", now=NOW,
                                        publisher=_Quiet(), idempotency_key=str(uuid4()))
            message = RunMessage(run_id=run_id, schedule_id=schedule.id, workspace_id=ws, owner="queries",
                                 work_kind="queries.deliver")
            started = time.perf_counter()
            result = process_run(conn, message, receive_count=1, now=NOW, registry=kinds,
                                 settings=ConsumerSettings.from_pipeline(QUERIES), services={"delivery": services})
            elapsed = time.perf_counter() - started
            assert result.settlement is not None and result.settlement.state == "succeeded", result
            assert sink.count == args.recipients, sink.count
            rates.append(args.recipients / elapsed)
            print(f"round {round_ + 1}: {elapsed:.3f} s, {rates[-1]:,.0f} recipients/s")
        best = max(rates)
        print(f"best {best:,.0f} recipients/s ({'meets' if best >= TARGET_PER_S else 'BELOW'} the target)")
    return 0


class _Quiet:
    """A run publisher that accepts everything (the benchmark processes the run itself)."""

    def publish(self, messages: list) -> set:
        return set()


if __name__ == "__main__":
    sys.exit(main())
