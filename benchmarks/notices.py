"""Owner notices after an outage: how long the people pass takes to tell and mail a burst
of events, and how many messages the digest rule lets through.

    python benchmarks/notices.py                      # 2,000 schedules, 200 owners, 3 admins
    python benchmarks/notices.py --schedules 10000 --owners 1000

What runs: the database ``bench_notices`` (dropped and re-created) on the server
``timekeeper.local.embedded.server_url(Path(".timekeeper/bench-pg"))`` returns
(``DATABASE_URL`` wins): one workspace that asks for admin copies, N owners each owning
schedules/N query schedules, 3 admins. Burst 1: one ``delivery_skipped_stale`` event per
schedule (what the dispatcher enqueues after an outage), then people passes
(``tell_people``, 500 events each) until none is untold, then one mail pass
(``send_notice_mail`` through a counting sink). Burst 2, ten minutes later: the same again
(the schedules skipped once more). Printed: events told per second, notices made, the mail
pass's time and messages, and the messages each person got over both bursts (the digest
rule allows one now and none within the hour). The exit code is 1 when a person got more
than one message or an event is told twice.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

from benchmarks._bench import DATA_DIR, git_revision  # noqa: E402
from timekeeper.db.connection import connect  # noqa: E402
from timekeeper.db.migrate import apply_migrations  # noqa: E402
from timekeeper.local import embedded  # noqa: E402
from timekeeper.platform import notices  # noqa: E402
from timekeeper.platform.directory import add_member, create_workspace, set_notify_admins, upsert_user  # noqa: E402
from timekeeper.reporting.notice_mail import send_notice_mail  # noqa: E402
from timekeeper.schedules import service  # noqa: E402
from timekeeper.schedules.notifications import Notice, enqueue_notifications  # noqa: E402

NOW = datetime(2027, 3, 20, 13, 0, tzinfo=UTC)
RULE = {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}


class CountingSink:
    """The communications adapter of the benchmark: counts messages per address."""

    def __init__(self) -> None:
        self.by_address: dict[str, int] = {}

    def send(self, *, to: str, subject: str, html: str, text: str) -> str:
        self.by_address[to] = self.by_address.get(to, 0) + 1
        return f"sink-{sum(self.by_address.values())}"


def _database() -> str:
    server = os.environ.get("DATABASE_URL") or embedded.server_url(DATA_DIR)
    url = embedded.create_database(server, "bench_notices")
    with connect(url) as conn:
        apply_migrations(conn)
    return url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=2000)
    parser.add_argument("--owners", type=int, default=200)
    args = parser.parse_args()
    url = _database()
    with connect(url) as conn:
        with conn.transaction():
            ws = create_workspace(conn, name="Bench", timezone="Europe/Berlin", now=NOW).id
            set_notify_admins(conn, ws, True)
            people = [(f"owner-{i:05d}", ["queries:write"]) for i in range(args.owners)]
            people += [(f"admin-{i}", ["workspace:admin"]) for i in range(3)]
            for user_id, roles in people:
                upsert_user(conn, user_id=user_id, display_name=user_id, email=f"{user_id}@bench.test", now=NOW)
                add_member(conn, workspace_id=ws, user_id=user_id, roles=roles, now=NOW)
            schedule_ids = []
            for i in range(args.schedules):
                schedule = service.create_schedule(conn, workspace_id=ws, owner="queries", work_kind="queries.deliver",
                                                   recurrence=RULE, actor=f"owner-{i % args.owners:05d}", now=NOW)
                schedule_ids.append(schedule.id)
        sink = CountingSink()
        told_total = 0
        for burst, at in enumerate((NOW, NOW + timedelta(minutes=10))):
            with conn.transaction():
                enqueue_notifications(conn, [Notice(s, ws, "queries", "delivery_skipped_stale", f"stale:{uuid4()}",
                                                    {"reason": "skipped_stale"}) for s in schedule_ids], now=at)
            started = time.perf_counter()
            passes = 0
            while notices.has_untold(conn):
                told_total += notices.tell_people(conn, now=at)["notices"]
                passes += 1
            tell_s = time.perf_counter() - started
            started = time.perf_counter()
            counts = send_notice_mail(conn, mailer=sink, now=at, limit=10_000)
            mail_s = time.perf_counter() - started
            print(f"burst {burst + 1}: {args.schedules} events told in {passes} passes, {tell_s:.2f} s "
                  f"({args.schedules / tell_s:,.0f} events/s); mail pass {mail_s:.2f} s: {counts}")
        expected = 2 * args.schedules * (1 + 3)
        worst = max(sink.by_address.values())
        print(f"notices made: {told_total} (expected {expected}); messages: {sum(sink.by_address.values())} to "
              f"{len(sink.by_address)} people, at most {worst} each over both bursts; revision {git_revision()}")
        return 0 if told_total == expected and worst == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
