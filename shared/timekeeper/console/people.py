"""The workspace's people as pages name them: display name and address by user id."""

from __future__ import annotations

from typing import Any

from timekeeper.console.context import Request

#: Members one page reads to name people (``GET /members``' largest page).
NAMED_MEMBERS = 200


def people_by_id(ctx: Request) -> dict[str, dict[str, Any]]:
    """``{user id: {"name", "email"}}`` of the workspace's current members (the first
    :data:`NAMED_MEMBERS`, ``GET /members``); empty when the API does not list them to the
    person (a reader of queries), whose pages then show user ids."""
    reply = ctx.api().call("GET", "/members", query={"limit": str(NAMED_MEMBERS)})
    if reply.status != 200 or not isinstance(reply.body, dict):
        return {}
    return {m["user_id"]: {"name": m.get("display_name"), "email": m.get("email")} for m in reply.body["items"]}
