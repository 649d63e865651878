"""Staff's claim weights: every workspace's tier in the dispatcher's fair claim, each with
a form to change it (a weight 1-10 and a reason)."""

from __future__ import annotations

import re
import uuid
from urllib.parse import urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.paths import PREFIX

router = Router()

#: The page's address.
PAGE = f"{PREFIX}/operations/claim-weights"


def weights_page(ctx: Request, *, search: str = "", problem: dict[str, str] | None = None,
                 typed: dict[str, str] | None = None, done: dict[str, str] | None = None,
                 status_code: int = 200) -> Response:
    """The workspaces by name (``GET /operations/workspaces``; ``search``: a part of the
    name) with their weights; ``problem`` (``workspace_id``, ``field``, ``message``) is the
    API's refusal shown on that workspace's field, ``typed`` what was typed there; ``done``
    (``workspace_id``, ``already``: the weight it had, or empty when changed) the message
    after a change, naming the workspace. A caller the API refuses (not staff) gets its
    refusal page."""
    reply = ctx.api().call("GET", "/operations/workspaces", query={"search": search, "limit": "200"})
    if reply.status != 200:
        return ctx.api_error(reply)
    if done is not None:
        named = [w["name"] for w in reply.body["items"] if w["id"] == done["workspace_id"]]
        done = {**done, "name": named[0] if named else ""}
    return ctx.page("claim_weights.html", status_code, items=reply.body["items"], search=search,
                    problem=problem or {}, typed=typed or {}, done=done)


@router.get(PAGE)
@signed_in
def claim_weights(ctx: Request) -> Response:
    """``GET /console/operations/claim-weights``: the workspaces' weights (``search`` narrows)."""
    params = ctx.params
    search = (params.get("search") or "").strip()[:200]
    already = params.get("already") or ""
    changed = params.get("done") or ""
    done = ({"workspace_id": params.get("workspace") or "", "already": already if not changed else ""}
            if changed or re.fullmatch(r"[0-9]{1,2}", already) else None)
    return weights_page(ctx, search=search, done=done)


@router.post(PAGE)
@checked_post
def set_claim_weight(ctx: Request) -> Response:
    """``POST /console/operations/claim-weights``: set a workspace's weight with a reason
    (``PATCH /operations/workspaces/{id}``), then the list; a refusal is shown on its field
    with what was typed kept."""
    fields = ctx.fields
    workspace_id = fields.get("workspace_id", "").strip()
    typed = {"claim_weight": fields.get("claim_weight", "").strip(), "reason": fields.get("reason", "")}
    search = fields.get("search", "").strip()[:200]
    # ASCII digits only ("²", "٣" or 5,000 digits are sent as typed: the API's 422 names the field)
    try:
        workspace_id = str(uuid.UUID(workspace_id))
    except ValueError:
        return weights_page(ctx, search=search, problem={"workspace_id": "", "field": "workspace_id",
                                                         "message": "no such workspace"}, typed=typed, status_code=404)
    weight: object = int(typed["claim_weight"]) if re.fullmatch(r"[0-9]{1,3}", typed["claim_weight"]) \
        else typed["claim_weight"]
    reply = ctx.api().call("PATCH", f"/operations/workspaces/{workspace_id}",
                           body={"claim_weight": weight, "reason": typed["reason"].strip()})
    if reply.status == 200:
        said = {"done": "1"} if reply.body.get("changed", True) else {"already": str(reply.body["claim_weight"])}
        return ctx.redirect(f"{PAGE}?" + urlencode({**said, "workspace": workspace_id,
                                                    **({"search": search} if search else {})}))
    if reply.status in (404, 422) and isinstance(reply.body, dict):
        problem = {"workspace_id": workspace_id, "field": reply.body.get("field") or "claim_weight",
                   "message": reply.body.get("message") or "refused"}
        return weights_page(ctx, search=search, problem=problem, typed=typed, status_code=reply.status)
    return ctx.api_error(reply)
