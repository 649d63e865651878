"""The local stack's report renderer: moto does not run Lambda functions, so the local
stack runs the REAL ``functions/report_renderer/handler.py`` itself, as Lambda's
asynchronous invocation would: the request returns at once, the handler runs on one of
the renderer's ``reserved_concurrency`` background threads (its execution environments,
each with its own database connection; further requests wait for a free one, as Lambda
queues asynchronous events beyond the function's concurrency), and a raising handler is
retried ``REPORT_RENDERER.retry_attempts`` times (what it still fails is kept in
:attr:`LocalRendererClient.failed`, the local on-failure destination)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any
from uuid import UUID

from timekeeper.aws.renderer import RenderRequest
from timekeeper.topology import REPORT_RENDERER


class LocalRendererClient:
    """A :class:`~timekeeper.aws.renderer.RendererClient` running ``invoke(function, event)``
    on the renderer's background threads (``background=False``: in the caller's thread,
    for a deterministic simulation)."""

    def __init__(self, invoke: Callable[..., Any], *, background: bool = True) -> None:
        self._invoke = invoke
        self._background = background
        self._pool = (ThreadPoolExecutor(max_workers=REPORT_RENDERER.reserved_concurrency,
                                         thread_name_prefix="renderer") if background else None)
        self._requests: list[Future] = []
        self._lock = threading.Lock()
        #: Events whose every attempt raised (the on-failure destination's content).
        self.failed: list[dict[str, Any]] = []
        #: What each finished invocation returned, in order.
        self.results: list[Any] = []

    def request(self, *, workspace_id: UUID, render_id: UUID) -> None:
        """Run the renderer on ``{"workspace_id", "render_id"}`` (in the background by default)."""
        event = RenderRequest(workspace_id=workspace_id, render_id=render_id).model_dump(mode="json")
        if self._pool is None:
            self._run(event)
            return
        with self._lock:
            self._requests = [f for f in self._requests if not f.done()]
            self._requests.append(self._pool.submit(self._run, event))

    def _run(self, event: dict[str, Any]) -> None:
        for _ in range(REPORT_RENDERER.max_attempts):
            try:
                result = self._invoke(REPORT_RENDERER.function, event, timeout_s=REPORT_RENDERER.timeout_s)
            except Exception:  # noqa: BLE001 - Lambda retries any failed asynchronous invocation
                continue
            with self._lock:
                self.results.append(result)
            return
        with self._lock:
            self.failed.append(event)

    def wait(self, timeout_s: float = 60.0) -> None:
        """Wait for every background render requested so far (at most ``timeout_s`` seconds)."""
        with self._lock:
            requests = list(self._requests)
        wait_for(requests, timeout=timeout_s)

    def close(self) -> None:
        """End the background threads once the renders requested so far are done."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
