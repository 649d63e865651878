"""The lifecycle's shared parts alone: the one back-off and the files bucket's one key rule
(their uses run on PostgreSQL and moto in tests/integration: consumer, exports, renders,
snapshots)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from uuid import UUID

import pytest

from timekeeper.db.attempts import Backoff
from timekeeper.reporting.exports import object_key as export_key
from timekeeper.reporting.objects import EXPORT_FILES, RENDER_FILES, ObjectKind
from timekeeper.reporting.rendering import object_key as render_key
from timekeeper.snapshots import jobs
from timekeeper.topology import PIPELINES, SNAPSHOTS

WORKSPACE = UUID("00000000-0000-4000-8000-000000000001")
ITEM = UUID("00000000-0000-4000-8000-0000000000aa")


def test_a_backoff_waits_its_step_for_each_failure_and_repeats_the_last():
    backoff = Backoff((30, 120))
    assert [backoff.delay_s(n) for n in (0, 1, 2, 3, 10)] == [30, 30, 120, 120, 120]
    assert backoff.delay(2) == timedelta(seconds=120)
    with pytest.raises(ValueError):
        Backoff(())
    with pytest.raises(ValueError):
        Backoff((30, -1))


def test_the_snapshot_runs_wait_five_ten_then_twenty_minutes_as_the_topology_says():
    assert [jobs.retry_backoff(n) for n in (1, 2, 3)] == [timedelta(minutes=m) for m in (5, 10, 20)]
    assert jobs.RETRY_BACKOFF == Backoff(SNAPSHOTS.retry_backoff_s)


def test_the_runs_back_off_by_their_pipelines_steps():
    from timekeeper.schedules.consumer import ConsumerSettings

    for pipeline in PIPELINES.values():
        settings = ConsumerSettings.from_pipeline(pipeline)
        steps = pipeline.retry_backoff_s
        assert [settings.retry_delay_s(n) for n in range(1, len(steps) + 2)] == [*steps, steps[-1]]


def test_every_attempt_of_a_work_item_writes_the_same_object_key():
    assert export_key(WORKSPACE, ITEM, "csv") == f"exports/{WORKSPACE}/{ITEM}.csv" == EXPORT_FILES.key(WORKSPACE, ITEM,
                                                                                                       "csv")
    digest = hashlib.sha256(b"run 7: any printable text").hexdigest()
    assert render_key(WORKSPACE, "run 7: any printable text") == f"reports/{WORKSPACE}/{digest}.pdf"
    assert RENDER_FILES.key(WORKSPACE, "run 7: any printable text", "pdf") == f"reports/{WORKSPACE}/{digest}.pdf"
    assert ObjectKind("x/").key(WORKSPACE, "a", "txt") != ObjectKind("x/", hashed=True).key(WORKSPACE, "a", "txt")
