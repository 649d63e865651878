"""The report renderer's invocation: a caller (the API, a delivery run) asks the renderer
function to run a render it committed, then polls ``report_renders`` for the outcome.

The event is :class:`RenderRequest` (``{"workspace_id", "render_id"}``); the renderer
reads everything else from the row. Asking twice is harmless: a succeeded render does
nothing the second time.
"""

from __future__ import annotations

from typing import Any, Protocol
from uuid import UUID

from pydantic import BaseModel, ConfigDict


class RenderRequest(BaseModel):
    """The renderer's event. Unknown keys are refused (a malformed event is dropped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workspace_id: UUID
    render_id: UUID


class RendererClient(Protocol):
    """Asks the renderer to run a committed render, without waiting for it."""

    def request(self, *, workspace_id: UUID, render_id: UUID) -> None:
        """Hand the render to the renderer; raises when the request was not accepted."""
        ...


class LambdaRendererClient:
    """A :class:`RendererClient` invoking the renderer function asynchronously (Lambda
    ``Invoke`` with ``InvocationType="Event"``): Lambda queues the event, retries a failed
    invocation as the function's asynchronous settings say, and sends what it gives up on
    to the on-failure destination."""

    def __init__(self, client: Any, function_name: str) -> None:
        self.client = client
        self.function_name = function_name

    def request(self, *, workspace_id: UUID, render_id: UUID) -> None:
        """Queue the render's event; raises botocore errors (the caller may ask again)."""
        payload = RenderRequest(workspace_id=workspace_id, render_id=render_id).model_dump_json()
        response = self.client.invoke(FunctionName=self.function_name, InvocationType="Event",
                                      Payload=payload.encode("utf-8"))
        status = response.get("StatusCode")
        if status != 202:
            raise RuntimeError(f"the renderer's asynchronous invoke answered {status}")
