"""Staff-only routes refuse a caller without the staff role before they look at the
request: authentication, the membership rule, then the role (403), whatever the body,
query parameters or path say (docs/api.md "Identity and roles")."""

from __future__ import annotations

import re
from typing import get_type_hints

from aws_lambda_powertools.event_handler.depends import Depends

from tests.api.conftest import Caller
from timekeeper.api.app import ROUTERS
from timekeeper.api.scope import StaffScope

STAFF = Caller(user_id="staff-1", roles="platform:staff")
#: A body no staff route takes: unknown fields, a weight out of bounds, a member id that is no id.
BAD_BODY = {"claim_weight": 99, "member_id": "not-a-uuid", "reason": "", "unknown_field": True}


def _takes_staff_scope(func) -> bool:
    """Whether a route function has a parameter whose dependency builds a :class:`StaffScope`."""
    for hint in get_type_hints(func, include_extras=True).values():
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, Depends) and get_type_hints(meta.dependency).get("return") is StaffScope:
                return True
    return False


def staff_routes() -> list[tuple[str, str]]:
    """(method, path) of every staff-only route, its path parameters filled with text that is no id."""
    found = []
    for router in ROUTERS:
        for key, func in router._routes.items():
            rule, methods = key[0], key[1]
            if _takes_staff_scope(func):
                path = re.sub(r"<[^>]+>", "not-an-id", rule)
                found.extend((method, path) for method in methods)
    return sorted(found)


def test_every_staff_route_refuses_a_member_without_the_staff_role_before_its_body(call, caller):
    routes = staff_routes()
    assert len(routes) >= 20, routes  # the snapshot, range, operations, dead-letter and claim weight routes
    answers = {}
    for method, path in routes:
        body = None if method == "GET" else BAD_BODY
        reply = call(method, f"{path}?limit=0&unknown_parameter=1", body, as_=caller)
        answers[(method, path)] = (reply.status, reply.body.get("code"))
    assert answers == {route: (403, "forbidden") for route in routes}


def test_the_claim_weight_route_says_platform_staff_before_it_reads_the_weight(call, caller):
    reply = call("PATCH", f"/operations/workspaces/{caller.workspace_id}", {"claim_weight": 99}, as_=caller)
    assert (reply.status, reply.body["code"], reply.body["message"]) == (
        403, "forbidden", "this action needs platform staff (platform:staff)")
    refused = call("POST", "/operations/member-erasures", {"workspace_id": str(caller.workspace_id),
                                                           "member_id": "x", "reason": "asked"}, as_=caller)
    assert (refused.status, refused.body["code"]) == (403, "forbidden")


def test_staff_still_get_the_field_their_body_gets_wrong(call):
    reply = call("PATCH", f"/operations/workspaces/{STAFF.workspace_id}", {"claim_weight": 99, "reason": "tier"},
                 as_=STAFF)
    assert (reply.status, reply.body["field"]) == (422, "claim_weight")
