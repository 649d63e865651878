"""Taking an address off the workspace's suppression list through the API: a permanent
bounce (recorded the way the message-events consumer records it) suppresses the address
and the next run skips it; a workspace admin (by the token and by the membership) removes
it with a reason, which is recorded with the suppression as it stood; the next run sends
to the address again. Bad input is a 422 naming the field; an address not on the list is
a 404, so a second removal changes nothing. Real PostgreSQL through the API's own login,
moto S3 and SES, the real consumer for the deliveries."""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import NOW, Caller
from tests.api.test_delivery_routes import SENDER, app, aws, body, olga, tenants  # noqa: F401
from tests.api.test_hostile_input import HOSTILE, _assert_client_error
from tests.api.test_opt_outs import _outcomes, _run
from timekeeper.db.connection import connect
from timekeeper.local.delivery import ses_event
from timekeeper.platform.directory import add_member, upsert_user
from timekeeper.reporting.message_states import SesEvent, record_message_event

REMOVALS = "/mail-suppressions/removals"


def _admin(tenants, db_url) -> Caller:  # noqa: F811
    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id="ada", display_name="Ada", email="ada@x.test", now=NOW)
        add_member(conn, workspace_id=tenants["a"], user_id="ada", roles=["workspace:admin"],
                   now=NOW - timedelta(days=1))
    return Caller(user_id="ada", workspace_id=tenants["a"], roles="workspace:admin")


def test_an_admin_removes_a_suppressed_address_with_a_reason_and_the_next_run_sends_to_it(
        call, tenants, publisher, aws, db_url, clock_now):  # noqa: F811
    ada = _admin(tenants, db_url)
    rita = Caller(user_id="rita", workspace_id=tenants["a"], roles="queries:read")
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    # Given a delivered message that bounced permanently (SES names the address in its own case)
    first, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "s1")
    assert [m["to"] for m in sent] == ["rita@x.test"]
    [delivery] = call("GET", f"/query-schedules/{schedule_id}/runs", as_=olga(tenants)).body["items"][0]["deliveries"]
    event = ses_event("Bounce", message_id=delivery["provider_message_id"], to="Rita@X.test", sender=SENDER,
                      sent_at=NOW, at=NOW + timedelta(seconds=30))
    with connect(db_url) as conn, conn.transaction():
        record_message_event(conn, SesEvent.model_validate(event), now=NOW + timedelta(minutes=1))
    [suppressed] = call("GET", "/mail-suppressions", as_=rita).body["items"]
    assert (suppressed["address"], suppressed["reason"]) == ("rita@x.test", "bounced")
    # And the next run skips her as suppressed
    clock_now["now"] = NOW + timedelta(minutes=5)
    second, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "s2")
    assert sent == [] and _outcomes(call, tenants, schedule_id, second.run_id) == {"rita": ("skipped",
                                                                                            "suppressed")}

    # Bad input is a 422 naming the field, and changes nothing
    for bad, field in (({"address": "rita@x.test"}, "reason"), ({"address": "rita@x.test", "reason": " \t\n"},
                                                                "reason"),
                       ({"address": "rita@x.test", "reason": "x" * 501}, "reason"),
                       ({"address": "rita@x.test", "reason": "fixed\u0000"}, "reason"),
                       ({"reason": "fixed"}, "address"), ({"address": "a b@x.test", "reason": "fixed"}, "address"),
                       ({"address": "x" * 321, "reason": "fixed"}, "address")):
        refused = call("POST", REMOVALS, bad, as_=ada)
        assert (refused.status, refused.body.get("field")) == (422, field), (bad, refused.body)
    # Only a workspace admin removes: by the token ...
    removal = {"address": "RITA@x.test", "reason": "Mailbox was full; she confirmed it is fixed"}
    assert call("POST", REMOVALS, removal, as_=rita).status == 403
    # ... and by the membership (Olga's token claims the role, her membership does not grant it)
    claimed = Caller(user_id="olga", workspace_id=tenants["a"], roles="workspace:admin")
    refused = call("POST", REMOVALS, removal, as_=claimed)
    assert (refused.status, refused.body["code"]) == (403, "missing_role")
    # ... of this workspace (another workspace's admin finds no such address on theirs)
    bob = Caller(user_id="bob", workspace_id=tenants["b"], roles="workspace:admin")
    assert call("POST", REMOVALS, removal, as_=bob).status == 404
    assert [s["address"] for s in call("GET", "/mail-suppressions", as_=rita).body["items"]] == ["rita@x.test"]
    assert call("GET", REMOVALS, as_=ada).body == {"items": [], "next_before": None, "timezone": "Europe/Berlin"}

    # When the admin removes it (compared lower-cased): the removal record names who, when, why
    # and the suppression as it stood
    clock_now["now"] = NOW + timedelta(minutes=10)
    removed = call("POST", REMOVALS, removal, as_=ada)
    assert removed.status == 200, removed.body
    record = removed.body
    assert {k: record[k] for k in ("address", "suppression_reason", "provider_message_id", "removed_by",
                                   "reason")} == {
        "address": "rita@x.test", "suppression_reason": "bounced",
        "provider_message_id": delivery["provider_message_id"], "removed_by": "ada",
        "reason": "Mailbox was full; she confirmed it is fixed"}
    assert record["removed_at"].startswith((NOW + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M"))
    assert record["suppressed_at"] == suppressed["suppressed_at"]
    assert call("GET", "/mail-suppressions", as_=rita).body["items"] == []
    # A second removal is a 404 and records nothing
    again = call("POST", REMOVALS, removal, as_=ada)
    assert (again.status, again.body.get("field")) == (404, "address")
    assert call("GET", REMOVALS, as_=ada).body == {"items": [record], "next_before": None, "timezone": "Europe/Berlin"}
    # The records are the admins' to read
    assert call("GET", REMOVALS, as_=rita).status == 403
    assert call("GET", REMOVALS, as_=bob).body["items"] == []

    # Then the next run sends to her again
    clock_now["now"] = NOW + timedelta(minutes=15)
    third, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "s3")
    assert [m["to"] for m in sent] == ["rita@x.test"]
    assert _outcomes(call, tenants, schedule_id, third.run_id) == {"rita": ("sent", None)}


@settings(max_examples=int(os.environ.get("TK_HOSTILE_EXAMPLES", "120")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(place=st.sampled_from(["body", "address", "reason"]), fragment=HOSTILE)
def test_hostile_removal_bodies_are_never_a_server_error(call, place, fragment):
    fields = {"address": '"rita@x.test"', "reason": '"fixed"'}
    if place == "body":
        text = fragment
    else:
        fields[place] = fragment
        text = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
    _assert_client_error(call("POST", REMOVALS, text))
