"""Consumers start runs while the dispatcher is still recording their publication (SQS
delivers a message within milliseconds of the send): the two never deadlock, and no run
is skipped for a visibility timeout."""

from __future__ import annotations

import queue
import random
import threading
import uuid
from datetime import timedelta

from tests.support import dispatch_settings
from timekeeper.db.connection import connect
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, ProcessResult, process_batch
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5, failure_threshold=5)


class HandOffPublisher:
    """A queue that hands every accepted message to the consumers at once (before the
    dispatcher records the publication), in a random order, in batches of 50."""

    def __init__(self, inbox: queue.Queue, seed: int) -> None:
        self.inbox = inbox
        self.random = random.Random(seed)

    def publish(self, messages):
        shuffled = list(messages)
        self.random.shuffle(shuffled)
        for start in range(0, len(shuffled), 50):
            self.inbox.put(shuffled[start:start + 50])
        return set()


def test_consumers_starting_runs_during_the_publication_record_never_deadlock(db_url, conn, utc):
    # Given 600 schedules due every hour and two consumers fed the instant a message is sent
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    now = utc(2027, 1, 4, 10, 0)
    for _ in range(600):
        service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind="race.work",
                                recurrence={"cron": "0 * * * *", "timezone": "UTC"}, actor="t",
                                now=now - timedelta(minutes=30))
    kinds = WorkKindRegistry()
    kinds.register(OWNER, "race.work", lambda ctx: Succeeded())
    inbox: queue.Queue = queue.Queue()
    outcomes: list = []
    errors: list[BaseException] = []

    def consumer() -> None:
        c = connect(db_url)
        try:
            while (batch := inbox.get()) is not None:
                try:
                    deliveries = [Delivery(str(m.run_id), m, 1) for m in batch]
                    outcomes.extend(process_batch(c, deliveries, now=now + timedelta(hours=2), registry=kinds,
                                                  settings=SETTINGS))
                except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                    errors.append(error)
                finally:
                    inbox.task_done()
        finally:
            c.close()

    threads = [threading.Thread(target=consumer) for _ in range(2)]
    for thread in threads:
        thread.start()
    # When, for two hours, the dispatcher claims, publishes and records the publication of every run
    published = 0
    try:
        for hour in range(2):
            published += dispatch(conn, dispatch_settings(OWNER), now=now + timedelta(hours=hour),
                                  publisher=HandOffPublisher(inbox, seed=hour)).published
            inbox.join()  # the hour's runs are done before the next hour's pass
    finally:
        for _ in threads:
            inbox.put(None)
        for thread in threads:
            thread.join(60)
    # Then nobody deadlocked, every run settled on its first delivery, none was skipped
    assert errors == [] and published == 1200
    assert len(outcomes) == 1200 and all(isinstance(o, ProcessResult) and o.action == "settled" for o in outcomes)
    assert conn.execute("SELECT count(*) AS n FROM schedule_runs WHERE state = 'succeeded'").fetchone()["n"] == 1200
