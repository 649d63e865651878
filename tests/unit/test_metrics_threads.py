"""The process's metrics are shared by the local stack's concurrent consumer invocations:
one invocation's flush never fails another's, and no metric added meanwhile is lost."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import threading

from timekeeper import observability as obs

_THREADS = 8
_INVOCATIONS = 150
_METRICS_PER_INVOCATION = 6


def test_invocations_flushing_on_many_threads_at_once_neither_fail_nor_lose_a_metric():
    names = [f"ThreadRace{i}" for i in range(_METRICS_PER_INVOCATION)]

    @obs.metrics.log_metrics
    def handler(event, context):
        for name in names:  # several names: a flush iterates the set while another thread adds
            obs.metrics.add_metric(name=name, unit="Count", value=1)
        return {}

    failures: list[BaseException] = []
    start = threading.Barrier(_THREADS)

    def environment() -> None:
        start.wait()
        for _ in range(_INVOCATIONS):
            try:
                handler({}, None)
            except Exception as error:  # noqa: BLE001 - what a consumer invocation would raise
                failures.append(error)

    written = io.StringIO()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows at once
    try:
        with contextlib.redirect_stdout(written):
            threads = [threading.Thread(target=environment) for _ in range(_THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(interval)
    emitted = 0
    for line in written.getvalue().splitlines():
        record = json.loads(line)
        for name in names:
            values = record.get(name, [])
            emitted += len(values) if isinstance(values, list) else 1
    assert failures == []
    assert emitted == _THREADS * _INVOCATIONS * _METRICS_PER_INVOCATION
