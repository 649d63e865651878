"""The local stack's report renderer: moto does not run Lambda functions, so the local
stack runs the REAL ``functions/report_renderer/handler.py`` itself, as Lambda's
asynchronous invocation would: the request returns at once, the handler runs on a
background thread, and a raising handler is retried ``REPORT_RENDERER.retry_attempts``
times (what it still fails is kept in :attr:`LocalRendererClient.failed`, the local
on-failure destination)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from timekeeper.aws.renderer import RenderRequest
from timekeeper.topology import REPORT_RENDERER


class LocalRendererClient:
    """A :class:`~timekeeper.aws.renderer.RendererClient` running ``invoke(function, event)``
    on a background thread per request (``background=False``: in the caller's thread,
    for a deterministic simulation)."""

    def __init__(self, invoke: Callable[..., Any], *, background: bool = True) -> None:
        self._invoke = invoke
        self._background = background
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: Events whose every attempt raised (the on-failure destination's content).
        self.failed: list[dict[str, Any]] = []
        #: What each finished invocation returned, in order.
        self.results: list[Any] = []

    def request(self, *, workspace_id: UUID, render_id: UUID) -> None:
        """Run the renderer on ``{"workspace_id", "render_id"}`` (in the background by default)."""
        event = RenderRequest(workspace_id=workspace_id, render_id=render_id).model_dump(mode="json")
        if not self._background:
            self._run(event)
            return
        thread = threading.Thread(target=self._run, args=(event,), name=f"renderer-{render_id}", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

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
        """Wait for every background render started so far."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout_s)
