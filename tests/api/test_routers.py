"""The resource routers are module-level and shared by every app of a process: each app's
requests still reach its own adapters (its connection, its clock)."""

import json
from datetime import datetime, timedelta

from tests.api.conftest import NOW, Caller, enrol, proxy_event
from timekeeper.api import ApiAdapters, create_app
from timekeeper.edge import registries
from timekeeper.local.lambdas import LambdaContext


def _revoke(app, caller: Caller, session_id: str) -> dict:
    event = proxy_event("POST", f"/sessions/{session_id}/revocation", claims=caller.claims())
    return app.resolve(event, LambdaContext(function_name="timekeeper-api"))


def _instant(reply: dict) -> datetime:
    return datetime.fromisoformat(json.loads(reply["body"])["revoked_at"].replace("Z", "+00:00"))


def test_two_apps_built_in_one_process_each_answer_with_their_own_clock(app, api_conn, publisher, db_url):
    # Given the fixture's app (its clock at NOW) and a second app built after it, whose clock
    # is a day later, over the same database
    later = NOW + timedelta(days=1)
    second = create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: publisher,
                                    registry=registries.work_kinds, now=lambda: later,
                                    snapshot_registry=registries.snapshot_types))
    caller = Caller()
    enrol(db_url, caller.user_id, caller.workspace_id)

    # When each signs a console session out
    first_reply = _revoke(app, caller, "first")
    second_reply = _revoke(second, caller, "second")

    # Then each records its own clock's instant
    assert first_reply["statusCode"] == 200, first_reply
    assert second_reply["statusCode"] == 200, second_reply
    assert _instant(first_reply) == NOW
    assert _instant(second_reply) == later
