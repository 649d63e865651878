"""A detector of concurrent executions of one run, shared by the fault tests.

Every handler execution is recorded as an interval (run id, thread, start and end in
``time.monotonic_ns``, one clock for every thread of the process) appended to a list, which
needs no lock (``list.append`` is atomic). Two intervals of the same run that intersect
mean the run executed concurrently; the detector reports such runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from uuid import UUID


@dataclass(frozen=True)
class Execution:
    """One handler execution: ``run_id``, the consumer ``thread`` name and its
    ``started_ns`` / ``ended_ns`` (monotonic nanoseconds)."""

    run_id: UUID
    thread: str
    started_ns: int
    ended_ns: int


@dataclass
class ExecutionLog:
    """The executions of every run, recorded from any thread."""

    executions: list[Execution] = field(default_factory=list)

    @contextmanager
    def executing(self, run_id: UUID) -> Iterator[None]:
        """Record the enclosed block as one execution of ``run_id`` (also when it raises)."""
        started = time.monotonic_ns()
        try:
            yield
        finally:
            self.executions.append(Execution(run_id, threading.current_thread().name, started, time.monotonic_ns()))

    def overlapping(self) -> dict[UUID, list[Execution]]:
        """The runs that executed concurrently, with their executions in start order."""
        by_run: dict[UUID, list[Execution]] = {}
        for execution in sorted(self.executions, key=lambda e: e.started_ns):
            by_run.setdefault(execution.run_id, []).append(execution)
        found = {}
        for run_id, runs in by_run.items():
            latest_end = 0
            for execution in runs:
                if execution.started_ns < latest_end:
                    found[run_id] = runs
                    break
                latest_end = max(latest_end, execution.ended_ns)
        return found
