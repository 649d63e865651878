"""``python -m timekeeper serve`` in-process: the README's flow over HTTP, the local
authorizer stand-in, and schemathesis against the running server finding no 5xx and no
response that breaks the OpenAPI document.

The schemathesis run is bounded: 12 derandomized examples per operation plus its coverage
cases, a 10 s timeout per request (about 5 s in all). A deeper, randomized run:
``TK_SCHEMATHESIS_EXAMPLES=200 TK_SCHEMATHESIS_RANDOM=1 python -m pytest tests/api/test_local_server.py``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import positive_data_acceptance

from tests.api.conftest import OPEN_INVOICES, enrol, seed_member, serving
from timekeeper import clock
from timekeeper import settings as settings_names
from timekeeper.api import create_app, openapi_document
from timekeeper.edge import runs
from timekeeper.edge.api import unconfigured_adapters
from timekeeper.local.apigw import dev_claims
from timekeeper.local.serve import link_base_url

WORKSPACE = uuid.uuid4()
TOKEN = f"dev:alice:{WORKSPACE}:schedules:read,schedules:write,schedules:run,queries:admin"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def local_server(db_url):
    """The serve stack on a free port over this module's database; the environment and the
    edge's caches are restored afterwards."""
    # alice is a member of the workspace in the directory (the saved-query routes ask it)
    seed_member(db_url, workspace_id=WORKSPACE, user_id="alice", roles=("queries:admin",))
    enrol(db_url, "staff-1", WORKSPACE)  # the snapshot staff member's token names it too
    with serving(db_url, poll_interval_s=0.2) as server:
        yield server


@pytest.fixture(scope="module")
def snapshot_periods(local_server, db_url) -> None:
    """:data:`WORKSPACE` (seeded by ``local_server``) four months old by the server's real
    clock, with its completed months planned, so the snapshot listings answer with real
    periods."""
    from datetime import timedelta

    from timekeeper.db.connection import connect
    from timekeeper.edge.registries import assemble_snapshot_types
    from timekeeper.snapshots.ledger import plan

    now = clock.now()
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE workspaces SET created_at = %s WHERE id = %s", (now - timedelta(days=120), WORKSPACE))
        plan(conn, assemble_snapshot_types("development"), now=now)


def test_the_snapshot_listing_answers_over_http(local_server, snapshot_periods):
    reply = requests.get(f"{local_server.base_url}/snapshots/periods", params={"snapshot_type": "ar_aging"},
                         headers=SNAPSHOT_AUTH, timeout=10)
    assert reply.status_code == 200, reply.text
    # (serve's own snapshot dispatcher may be generating them meanwhile)
    # (every expected month since the sample workspace's creation is listed: older ones, outside
    # the planner's horizon, as missing)
    items = reply.json()["items"]
    planned = [i for i in items if i["status"] != "missing"]
    assert len(planned) >= 3 and {i["snapshot_type"] for i in items} == {"ar_aging"}
    assert {i["status"] for i in planned} <= {"planned", "queued", "running", "published"}


def test_delivery_links_point_at_the_servers_own_address(local_server):
    assert settings_names.settings().download_base_url == f"{local_server.base_url}/"
    assert runs.delivery_services().download_base_url == f"{local_server.base_url}/"
    assert link_base_url("0.0.0.0", 8080) == "http://127.0.0.1:8080"
    assert link_base_url("::", 8080) == "http://[::1]:8080"


def test_dev_token_becomes_the_authorizer_claims():
    # Given development tokens, well-formed and not
    # Then the stand-in passes the claims through, or none at all
    assert dev_claims(f"Bearer {TOKEN}") == {"principalId": "alice", "workspace_id": str(WORKSPACE),
                                             "roles": "schedules:read,schedules:write,schedules:run,queries:admin"}
    assert dev_claims("Bearer dev:bob:ws") == {"principalId": "bob", "workspace_id": "ws", "roles": ""}
    assert dev_claims("Bearer eyJhbGciOi.jwt") is None
    assert dev_claims("Basic dev:alice:ws:roles") is None
    assert dev_claims(None) is None


def test_readme_flow_creates_lists_runs_now_and_shows_the_run_in_history(local_server):
    base = local_server.base_url
    # Given a new schedule
    created = requests.post(f"{base}/schedules", headers=AUTH, timeout=10, json={
        "owner": "accounting", "work_kind": "reconciliation.sweep", "name": "nightly sweep",
        "recurrence": {"cron": "30 2 * * *", "timezone": "America/New_York"}})
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    # When it is listed
    listed = requests.get(f"{base}/schedules", params={"owner": "accounting", "status": "active"}, headers=AUTH,
                          timeout=10)
    # Then it is there
    assert listed.status_code == 200
    assert schedule_id in [s["id"] for s in listed.json()["items"]]
    # When it is run now
    accepted = requests.post(f"{base}/schedules/{schedule_id}/run", headers={**AUTH, "Idempotency-Key": "readme-1"},
                             timeout=10)
    assert accepted.status_code == 202
    run_id = accepted.json()["run_id"]
    # Then the local consumer runs it within seconds (a minute and a half on a busy machine) and
    # the run shows in the history
    deadline = time.monotonic() + 90
    while True:
        detail = requests.get(f"{base}/schedules/{schedule_id}", headers=AUTH, timeout=10).json()
        runs = {r["id"]: r for r in detail["history"]["runs"]}
        if runs.get(run_id, {}).get("state") in ("succeeded", "skipped", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    run = runs[run_id]
    assert run["trigger"] == "manual" and run["requested_by"] == "alice"
    assert run["state"] == "skipped" and run["outcome_code"] == "nothing_to_reconcile"
    assert detail["latest_run"]["id"] == run_id
    assert detail["schedule"]["last_outcome"] == "nothing_to_reconcile"
    assert {"created", "run_requested"} <= {e["kind"] for e in detail["history"]["events"]}
    assert len(detail["next_occurrences"]) == 5


def test_readme_flow_creates_and_lists_a_saved_query(local_server):
    base = local_server.base_url
    # Given a member's dev token, when a query is saved
    created = requests.post(f"{base}/queries", headers=AUTH, timeout=10, json={
        "name": "Open invoices", "definition": OPEN_INVOICES})
    # Then it is version 1, and the list and the catalogue show it
    assert created.status_code == 201, created.text
    assert created.json()["version"]["version"] == 1
    listed = requests.get(f"{base}/queries", headers=AUTH, timeout=10)
    assert listed.status_code == 200
    assert created.json()["query"]["id"] in [q["id"] for q in listed.json()["items"]]
    assert requests.get(f"{base}/catalogue", headers=AUTH, timeout=10).status_code == 200
    # And a user who is not a member of the workspace is refused with the rule's reason
    stranger = {"Authorization": f"Bearer dev:mallory:{WORKSPACE}:queries:admin"}
    refused = requests.get(f"{base}/queries", headers=stranger, timeout=10)
    assert (refused.status_code, refused.json()["code"]) == (403, "not_a_member")


def test_without_a_dev_token_the_request_is_unauthenticated(local_server):
    reply = requests.get(f"{local_server.base_url}/schedules", timeout=10)
    assert reply.status_code == 401
    assert reply.json()["code"] == "unauthenticated"


def test_the_document_is_served_without_a_token(local_server):
    # (serve builds the document from the models on its first request: seconds on a busy machine)
    reply = requests.get(f"{local_server.base_url}/openapi.json", timeout=60)
    assert reply.status_code == 200
    assert reply.json() == openapi_document(create_app(unconfigured_adapters()))


# The document generated from the models; the server serves the same (asserted above).
# (Loaded here rather than from the server: schemathesis' lazy fixture loader does not
# support pytest 9.)
RULE_TAKING = {"POST /schedules", "PATCH /schedules/{schedule_id}", "POST /rules/preview",
               "POST /query-schedules/rule-preview"}
#: A closure's date is a real calendar date (2027-02-30 matches the pattern and is a 422
#: naming the field).
DATE_TAKING = {"POST /closures", "DELETE /closures/{closed_on}"}
#: A saved query's definition is checked against the catalogue beyond its JSON schema (an
#: entity or column that exists, an operator its type allows, a value of that type).
DEFINITION_TAKING = {"POST /queries", "POST /queries/{query_id}/versions", "POST /queries/preview"}
#: A query schedule's settings are checked against the directory and the workspace's saved
#: queries and reports (a recipient who is a member, a source that exists, a format that fits
#: it, named placeholders only) and its rule as above: each a documented 422 naming the field.
SETTINGS_TAKING = {"POST /query-schedules", "PATCH /query-schedules/{schedule_id}",
                   "POST /query-schedules/recipient-check", "POST /query-schedules/message-preview"}
#: The members' cursor is opaque (the previous page's last display name and id): one no
#: page gave is a documented 422 naming ``cursor``, which no pattern can tell in advance.
CURSOR_JUDGED = {"GET /members"}
#: The snapshot routes are called by Platform staff who also read their own workspace's
#: periods. A staff request the document allows may still be a documented 422 (a type the
#: registry does not know, a workspace not in the directory) or 409 (the ledger's refusal).
SNAPSHOT_AUTH = {"Authorization": f"Bearer dev:staff-1:{WORKSPACE}:snapshots:read,platform:staff"}
LEDGER_JUDGED = {"POST /snapshots/runs",
                 # a range is planned through the same ledger (a month range that is real, workspaces
                 # the directory holds); the staff periods' cursor is opaque, and a month range may be
                 # reversed: each a documented 422 naming its field
                 "POST /snapshots/ranges/preview", "POST /snapshots/ranges", "GET /snapshots/staff/periods"}
#: The operations routes are staff's too; a valid redrive or resume may still be a documented
#: 404 (a queue or schedule that does not exist) or 409 (an empty queue, a rule that no
#: longer validates).
STATE_JUDGED = {"POST /operations/dead-letter-queues/{queue}/redrive",
                "POST /operations/workspaces/{workspace_id}/schedules/{schedule_id}/resume"}
def holds_nul(value: object) -> bool:
    """Whether a JSON value has U+0000 in any string (key or value): a documented 422 at
    the API edge for every body (PostgreSQL text cannot hold it), beyond JSON Schema."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_nul(v) for v in value)
    return False


schema = schemathesis.openapi.from_dict(openapi_document(create_app(unconfigured_adapters())))


#: One test per operation, each with its own id: schemathesis' own ``@schema.parametrize()``
#: gives every operation the same test id, and pytest-xdist then runs only one of them.
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("operation", OPERATIONS, ids=[operation.label for operation in OPERATIONS])
@settings(max_examples=int(os.environ.get("TK_SCHEMATHESIS_EXAMPLES", "12")), deadline=None,
          derandomize=os.environ.get("TK_SCHEMATHESIS_RANDOM") is None, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_schemathesis_finds_no_server_error_and_no_schema_violation(operation, local_server, snapshot_periods, data):
    # Given any request the document allows (and some it does not), with a valid dev token
    case = data.draw(operation.as_strategy())
    # When it is sent to the local server
    # Then no response is a 5xx and every response matches the document.
    # A recurrence rule's validity (a known IANA zone, a cron that ever fires, the fields a
    # frequency needs) is beyond JSON Schema: a schema-valid rule may be a documented 422
    # naming the field, so "positive data acceptance" is not asserted where a rule is sent.
    # Likewise a definition the catalogue refuses is a documented 422 (definition_invalid).
    # And a staff snapshot request is judged by the registry, the directory and the ledger.
    judged = (RULE_TAKING | DEFINITION_TAKING | LEDGER_JUDGED | SETTINGS_TAKING | STATE_JUDGED | DATE_TAKING
              | CURSOR_JUDGED)
    # And a body with a NUL character in any string is refused at the edge (422 naming it).
    nul = holds_nul(case.body) if isinstance(case.body, (dict, list, str)) else False
    excluded = [positive_data_acceptance] if case.operation.label in judged or nul else []
    headers = SNAPSHOT_AUTH if case.operation.path.startswith(("/snapshots", "/operations")) else AUTH
    case.call_and_validate(base_url=local_server.base_url, headers=headers, timeout=10, excluded_checks=excluded)


def test_an_idle_connection_does_not_hold_up_other_requests(local_server):
    # Given a client that opens a connection and sends nothing
    address = urlsplit(local_server.base_url)
    idle = socket.create_connection((address.hostname, address.port), timeout=30)
    try:
        # When other clients call the API meanwhile, several at once
        with ThreadPoolExecutor(max_workers=4) as pool:
            replies = list(pool.map(lambda _: requests.get(f"{local_server.base_url}/schedules", headers=AUTH,
                                                           timeout=60), range(8)))
        # Then each is answered from its own API environment while the idle connection still
        # waits for its request: a server that waited on it would answer the others only
        # after its header deadline closed it (however long a busy machine takes for eight)
        assert [r.status_code for r in replies] == [200] * 8
        idle.setblocking(False)
        with pytest.raises(BlockingIOError):
            idle.recv(1)  # still open, nothing sent to it
    finally:
        idle.close()


def test_an_oversized_header_gets_the_json_error_body(local_server):
    # Given a request with a header line longer than the HTTP layer reads (64 KiB)
    reply = requests.get(f"{local_server.base_url}/schedules", headers={**AUTH, "X-Padding": "a" * 70_000},
                         timeout=10)
    # Then it is refused with the API's error body, not an HTML page
    assert reply.status_code == 431
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json() == {"code": "bad_request", "message": "line too long"}


def test_a_port_already_in_use_is_the_bind_error_not_a_traceback_of_the_pool():
    import socket

    from timekeeper.local.serve import PooledWSGIServer

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # serve reports an OSError as one line ("cannot listen on ..."); the server must raise it
        with pytest.raises(OSError) as raised:
            PooledWSGIServer(("127.0.0.1", port), None)
    assert raised.type is not AttributeError and raised.value.errno is not None


def _sample_names(server: Any, workspace: str) -> list[str]:
    """The names of ``workspace``'s accounting and query schedules, as its admin lists them."""
    admin = server.stack.platform.users["admin"] if workspace == str(server.stack.platform.first_workspace) else (
        server.stack.platform.users["sydney_admin"])
    auth = {"Authorization": f"Bearer dev:{admin}:{workspace}:schedules:read,queries:read,reports:read"}
    names = []
    for path in ("/schedules", "/query-schedules"):
        reply = requests.get(f"{server.base_url}{path}", headers=auth, params={"limit": "200"}, timeout=10)
        assert reply.status_code == 200, reply.text
        names += [item["name"] for item in reply.json()["items"]]
    return sorted(names)


def test_serve_starts_with_sample_schedules_and_deliveries_once(local_server, db_url):
    # The sample person signing in first finds work to look at: accounting schedules of the
    # four kinds (one paused), two deliveries, and another workspace's own schedule
    berlin = str(local_server.stack.platform.first_workspace)
    sydney = str(local_server.stack.platform.workspaces["sydney"])
    names = _sample_names(local_server, berlin)
    expected = ["Close the month-end accruals", "General journal roll", "Invoice preparation",
                "Monthly receivables aging", "Morning unpaid invoices", "Nightly reconciliation",
                "Quarter-hour reconciliation", "Weekly bank sweep (paused)"]
    assert [n for n in names if n in expected] == expected
    assert "Harbour reconciliation" in _sample_names(local_server, sydney)
    assert "Harbour reconciliation" not in names
    # A flexible window and a DST choice are among them, shown on their pages
    auth = {"Authorization": f"Bearer dev:{local_server.stack.platform.users['admin']}:{berlin}:schedules:read"}
    listed = requests.get(f"{local_server.base_url}/schedules", headers=auth, params={"limit": "200"}, timeout=10)
    ids = {item["name"]: item["id"] for item in listed.json()["items"]}
    invoices = requests.get(f"{local_server.base_url}/schedules/{ids['Invoice preparation']}", headers=auth,
                            timeout=10).json()
    assert invoices["schedule"]["recurrence"]["window_minutes"] == 30
    assert invoices["next_occurrences"] and all(o["at"] <= o["due_at"] < o["window_end"]
                                                for o in invoices["next_occurrences"])
    nightly = requests.get(f"{local_server.base_url}/schedules/{ids['Nightly reconciliation']}", headers=auth,
                           timeout=10).json()
    assert nightly["schedule"]["recurrence"]["dst"] == {"gap": "skip", "overlap": "both"}
    assert "does not run (recorded as skipped)" in nightly["description"]
    # A second start on the same database adds nothing (the marker schedule is there)
    from timekeeper.db.connection import connect
    from timekeeper.local.serve_sample import seed_serve_sample

    with connect(db_url) as conn:
        before = conn.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"]
        assert seed_serve_sample(conn, local_server.stack.platform, now=clock.now()) == {}
        assert conn.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == before


def test_the_development_sign_in_s_analyst_is_neither_admin_nor_staff(local_server):
    import json

    listed = json.loads(os.environ[settings_names.CONSOLE_SAMPLES_VARIABLE])
    samples = {s["label"]: s["roles"].split(",") for s in listed}
    assert "workspace:admin" in samples["Berlin admin"]
    assert {"queries:write", "reports:write", "schedules:run"} <= set(samples["Berlin analyst"])
    assert not {"workspace:admin", "platform:staff", "schedules:admin"} & set(samples["Berlin analyst"])


def test_the_development_sign_in_s_people_hold_the_roles_the_console_docs_name(local_server):
    import json

    from timekeeper.console.sessions import DEV_ROLES

    listed = json.loads(os.environ[settings_names.CONSOLE_SAMPLES_VARIABLE])
    samples = {s["label"]: set(s["roles"].split(",")) for s in listed}
    # The Berlin admin holds every role, staff included; the sign-in keeps every sample role
    assert {"reports:write", "queries:admin", "platform:staff", "workspace:admin"} <= samples["Berlin admin"]
    assert set().union(*samples.values()) <= set(DEV_ROLES)
    # The Sydney admin administers another workspace and is no staff member (sees none of Berlin's work)
    assert "workspace:admin" in samples["Sydney admin"] and "platform:staff" not in samples["Sydney admin"]


def test_favicon_is_served_without_a_token(local_server):
    reply = requests.get(f"{local_server.base_url}/favicon.ico", timeout=10)
    assert reply.status_code == 200 and reply.url.endswith("/console/static/favicon.svg")
    assert reply.headers["Content-Type"].startswith("image/svg+xml")


def test_serve_keeps_a_copy_of_every_message_it_sends(local_server):
    # Given serve's sample delivery of unpaid invoices to three Berlin people
    platform = local_server.stack.platform
    berlin, admin = str(platform.first_workspace), platform.users["admin"]
    auth = {"Authorization": f"Bearer dev:{admin}:{berlin}:queries:read,queries:write"}
    listed = requests.get(f"{local_server.base_url}/query-schedules", headers=auth, params={"limit": "200"},
                          timeout=10).json()["items"]
    [delivery] = [item for item in listed if item["name"] == "Morning unpaid invoices"]
    # When its admin runs it now
    accepted = requests.post(f"{local_server.base_url}/query-schedules/{delivery['id']}/run",
                             headers={**auth, "Idempotency-Key": "mail-folder-1"}, timeout=10)
    assert accepted.status_code == 202, accepted.text
    # Then each message sent is kept in serve's mail folder: its HTML part after a header
    # line naming the recipient and subject, and its text part
    deadline = time.monotonic() + 90
    while len(list(local_server.mail_dir.glob("*.html"))) < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    kept = sorted(local_server.mail_dir.glob("*.html"))
    assert kept, f"nothing in {local_server.mail_dir}"
    header = json.loads(kept[0].read_text(encoding="utf-8").splitlines()[0])
    assert "@" in header["to"] and "Morning unpaid invoices" in header["subject"] + kept[0].read_text()
    assert kept[0].with_suffix(".txt").is_file()


def test_serve_starts_with_a_bounced_and_a_complained_address_an_admin_can_remove(local_server):
    # Given serve's sample, when Berlin's admin lists the workspace's suppressed addresses
    platform = local_server.stack.platform
    berlin, admin = str(platform.first_workspace), platform.users["admin"]
    auth = {"Authorization": f"Bearer dev:{admin}:{berlin}:workspace:admin,queries:read"}
    listed = requests.get(f"{local_server.base_url}/mail-suppressions", headers=auth, timeout=10)
    assert listed.status_code == 200, listed.text
    # Then one address bounced and one complained, each from a message recorded before the start
    items = {i["reason"]: i for i in listed.json()["items"]}
    assert sorted(items) == ["bounced", "complained"]
    assert items["bounced"]["address"].startswith("lee.") and items["complained"]["address"].startswith("max.")
    assert all(datetime.fromisoformat(i["suppressed_at"].replace("Z", "+00:00")) < clock.now()
               for i in items.values())
    # And the admin can take one off the list (the step the admin's pages offer)
    removed = requests.post(f"{local_server.base_url}/mail-suppressions/removals", headers=auth, timeout=10,
                            json={"address": items["bounced"]["address"], "reason": "Lee's new mailbox works"})
    assert removed.status_code == 200, removed.text


def test_serve_starts_with_failing_stranded_and_dead_lettered_work(local_server):
    # The operator signing in first finds something in every operations list
    staff = {"Authorization": f"Bearer dev:staff-1:{WORKSPACE}:platform:staff"}
    overview = requests.get(f"{local_server.base_url}/operations/overview", headers=staff, timeout=10).json()
    failing = [s for s in overview["schedules"] if s["name"] == "Bank feed sweep (failing)"]
    assert [(s["status"], s["consecutive_failures"]) for s in failing] == [("active", 2)]
    assert any(s["status"] == "paused" for s in overview["schedules"])
    assert "lease_expired" in {r["why"] for r in overview["stranded_runs"]}
    depths = {q["name"]: q["messages"] for q in overview["dead_letter_queues"]}
    assert depths["accounting"] >= 1 and depths["queries"] >= 1
    # And the accounting dead letter names a failed run that died the documented way: its
    # consumer was killed on each of the pipeline's five receives (no attempt had an outcome),
    # the dispatcher settled it when its last lease ran out, and the message, never
    # acknowledged, reached the dead-letter queue after that
    read = requests.get(f"{local_server.base_url}/operations/dead-letter-queues/accounting/messages",
                        headers=staff, timeout=10).json()
    [named] = [m for m in read["items"] if m["names"] and m["names"]["kind"] == "run"
               and m["run"] and m["run"]["schedule_name"] == "Bank feed sweep (failing)"]
    assert named["why"] == "receives_exhausted" and named["receive_count"] >= 5
    run = requests.get(f"{local_server.base_url}/runs/{named['names']['id']}", headers=staff, timeout=10).json()
    assert (run["schedule_name"], run["state"], run["outcome_code"]) == (
        "Bank feed sweep (failing)", "failed", "attempts_exhausted")
    assert run["error"] == "5 attempts ended without an outcome (the consumer was killed or timed out)"
    history = run["attempt_history"]
    assert [(a["number"], a["receive_count"], a["ended"]) for a in history] == [
        (1, 1, "taken_over"), (2, 2, "taken_over"), (3, 3, "taken_over"), (4, 4, "taken_over"), (5, 5, "settled")]
    # Each taken-over attempt ran until its lease (the consumer's timeout) ran out; the next receive
    # came a visibility timeout (6 x the timeout) after the one before
    assert all(a["duration_s"] == 120.0 and a["error"] is None for a in history[:4])
    starts = [datetime.fromisoformat(a["started_at"].replace("Z", "+00:00")) for a in history]
    assert {b - a for a, b in zip(starts, starts[1:], strict=False)} == {timedelta(minutes=12)}
    # A Run now of the sample's author (the monthly rule's days are far), settled before its
    # message reached the dead-letter queue
    assert (run["trigger"], run["requested_by"]) == ("manual", "serve-sample")
    # whose request is in its history, as a Run now records it
    assert [(e["kind"], e["actor"]) for e in run["events"]] == [("run_requested", "serve-sample")]
    sent, finished = (datetime.fromisoformat(v.replace("Z", "+00:00"))
                      for v in (named["sent_at"], history[-1]["finished_at"]))
    assert finished < sent
    # The other failed run failed on its final receive: settled and acknowledged, five attempts,
    # the first four retried after the pipeline's backoff (not dead-lettered)
    schedule_id = failing[0]["id"]
    admin = {"Authorization": f"Bearer dev:{local_server.stack.platform.users['admin']}:"
                              f"{local_server.stack.platform.first_workspace}:schedules:read"}
    detail = requests.get(f"{local_server.base_url}/schedules/{schedule_id}", headers=admin, timeout=10).json()
    [earlier] = [r for r in detail["history"]["runs"] if r["outcome_code"] == "reconciliation_failed"]
    earlier = requests.get(f"{local_server.base_url}/runs/{earlier['id']}", headers=staff, timeout=10).json()
    assert [(a["receive_count"], a["ended"]) for a in earlier["attempt_history"]] == [
        (1, "retried"), (2, "retried"), (3, "retried"), (4, "retried"), (5, "settled")]
    assert all(a["error"].startswith("the bank feed did not answer") and a["duration_s"] == 30.0
               for a in earlier["attempt_history"])
    assert not [m for m in read["items"] if m["names"] and m["names"]["id"] == earlier["id"]]


def test_serve_starts_with_a_failed_snapshot_period_and_no_overdue_alarm(local_server):
    # The start-up's planner pass published the sample's months, but for one failed on purpose
    assert local_server.snapshots is not None and local_server.snapshots["failed"] == 1
    assert local_server.snapshots["published"] >= 1
    staff = {"Authorization": f"Bearer dev:staff-1:{WORKSPACE}:platform:staff"}
    listing = requests.get(f"{local_server.base_url}/snapshots/staff/periods", params={"status": "failed"},
                           headers=staff, timeout=10).json()
    [failed] = [p for p in listing["items"] if p["snapshot_type"] == "selftest"]
    assert (failed["workspace_name"], failed["version"], failed["failure_code"]) == (
        "Ruderverein Spree", 1, "selftest_mismatch")
    # And nothing else of the sample waits for a pass: no planned version is left behind
    waiting = requests.get(f"{local_server.base_url}/snapshots/staff/periods", params={"status": "planned"},
                           headers=staff, timeout=10).json()
    assert [p for p in waiting["items"] if p["workspace_name"] == "Ruderverein Spree"] == []
