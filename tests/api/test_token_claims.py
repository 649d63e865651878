"""Claims the authorizer passes that the database cannot hold are refused as a 401 on
every route that needs a caller, never a 500."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.api.conftest import Caller

DOCUMENT = json.loads((Path(__file__).resolve().parents[2] / "shared/timekeeper/api/openapi.json")
                      .read_text(encoding="utf-8"))
ALL = ("schedules:admin,queries:admin,reports:write,snapshots:read,platform:staff")
GUARDED = [(method.upper(), path) for path, operations in DOCUMENT["paths"].items()
           for method, operation in operations.items() if operation.get("security")]


@pytest.mark.parametrize("user_id", ["al\x00ice", "\x00", "alice\x00"])
def test_a_nul_in_the_user_id_is_unauthenticated_on_every_route(call, user_id):
    # Given a caller whose user id holds a NUL character (PostgreSQL text cannot hold one)
    who = Caller(user_id=user_id, roles=ALL)
    failures = []
    for method, path in GUARDED:
        target = path
        for name in ("schedule_id", "query_id", "report_id", "render_id", "export_id", "workspace_id"):
            target = target.replace("{" + name + "}", str(uuid.uuid4()))
        target = target.replace("{version}", "1")
        if path == "/snapshots/periods":
            target += "?snapshot_type=ar_aging"
        # When it calls the route
        reply = call(method, target, {} if method in ("POST", "PUT", "PATCH") else None, as_=who)
        # Then it is refused as unauthenticated, before anything reaches the database (a body
        # the route's model refuses is a 422 first, as for any caller)
        refused = reply.status == 401 and reply.body.get("code") == "unauthenticated"
        if not refused and not (reply.status == 422 and method in ("POST", "PUT", "PATCH")):
            failures.append((method, path, reply.status, reply.body))
    assert failures == []
