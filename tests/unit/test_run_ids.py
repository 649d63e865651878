"""Run ids: UUID version 7, time-ordered by the millisecond they were made in."""

from __future__ import annotations

import uuid

from timekeeper.schedules.dispatcher import run_ids


def test_run_ids_are_version_7_with_the_given_millisecond_in_their_first_48_bits():
    ids = run_ids(500, unix_ms=1_796_000_000_123)
    assert len(set(ids)) == 500
    for run_id in ids:
        assert run_id.version == 7
        assert run_id.variant == uuid.RFC_4122
        assert run_id.int >> 80 == 1_796_000_000_123


def test_ids_made_a_millisecond_later_sort_after_every_earlier_id():
    earlier = run_ids(200, unix_ms=1_796_000_000_123)
    later = run_ids(200, unix_ms=1_796_000_000_124)
    assert max(earlier) < min(later)
    assert max(str(i) for i in earlier) < min(str(i) for i in later)  # the text form sorts the same way


def test_the_random_bits_vary_across_all_74_of_them():
    ids = run_ids(2000, unix_ms=0)
    varying = 0
    for position in range(128):
        values = {run_id.int >> position & 1 for run_id in ids}
        varying += len(values) == 2
    assert varying == 74  # 128 - 48 time bits - 4 version bits - 2 variant bits
