"""The console's dead-letter pages (staff) against the real API resolver and moto's SQS: a
queue's messages are shown decoded with the run they name linked, and one is redriven
alone with a reason; a refused action keeps what was typed."""

from __future__ import annotations

import json
import re
import uuid

from tests.api.conftest import Caller
from tests.api.test_console import Browser, _header
from tests.api.test_operations_routes import app, queues, sqs  # noqa: F401 - the fixtures

STAFF = Caller(user_id="staff-1", roles="platform:staff")


def test_staff_read_a_queues_messages_and_redrive_one_alone(console, conn, sqs, queues):  # noqa: F811
    conn.execute("TRUNCATE operations_actions")
    conn.commit()
    run_id = uuid.uuid4()
    body = {"run_id": str(run_id), "schedule_id": str(uuid.uuid4()), "workspace_id": str(uuid.uuid4()),
            "owner": "accounting", "work_kind": "reconciliation.sweep"}
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=json.dumps(body))
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody="<script>x</script>")
    staff = Browser(console)
    staff.sign_in(STAFF, roles=("platform:staff",))

    listing = staff.request("GET", "/console/dead-letters")
    assert listing["statusCode"] == 200 and 'href="/console/dead-letters/accounting"' in listing["body"]
    page = staff.request("GET", "/console/dead-letters/accounting")
    assert page["statusCode"] == 200, page["body"]
    html = page["body"]
    assert f'href="/console/runs/{run_id}"' in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x" not in html
    assert "<p>2 messages." in html and "Reading this page counts as a receive" in html
    # Delete is the danger action, apart from Redrive
    assert '<button type="submit" class="danger">Delete for good</button>' in html
    assert "its consumer cannot parse the body" in html
    assert "its consumer never acknowledged it on any receive allowed (it died or timed out each time)" in html
    message_id = re.search(r'/console/dead-letters/accounting/([0-9a-f-]+)/redrive', html).group(1)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    target = f"/console/dead-letters/accounting/{message_id}/redrive"

    refused = staff.request("POST", target, {"csrf": csrf, "reason": "  "})
    assert refused["statusCode"] == 422 and 'value="  " aria-invalid="true"' in refused["body"]

    done = staff.request("POST", target, {"csrf": csrf, "reason": "consumer fixed"})
    assert done["statusCode"] == 303
    after = staff.request("GET", _header(done, "Location"))["body"]
    assert "The message went back to its queue; the others stay here." in after
    assert after.count("<section class=\"card\"") == 1
    assert "<p>1 message." in after and "Move all 1 message of accounting" in after
    assert len(sqs.receive_message(QueueUrl=queues["accounting"].url, MaxNumberOfMessages=10)["Messages"]) == 1


def test_a_member_without_the_staff_role_gets_the_apis_refusal(console):
    browser = Browser(console)
    browser.sign_in(Caller(user_id="member-1"))
    page = browser.request("GET", "/console/dead-letters")
    assert page["statusCode"] == 403
    assert "The dead-letter queues are for platform staff" in page["body"]
    assert '<a href="/console/schedules">Back to the schedules</a>' in page["body"]


def test_a_message_names_its_run_and_its_redrive_is_followed_on_the_run_page(console, conn, sqs, queues):  # noqa: F811
    from tests.api.conftest import enrol
    from tests.api.test_run_routes import LONG_AGO, seed_run

    conn.execute("TRUNCATE operations_actions, schedule_run_actions, schedule_events, schedule_runs, schedules "
                 "CASCADE")
    other = uuid.uuid4()
    enrol(conn, "someone", other)
    sweep, run_id = seed_run(conn, other, state="failed", attempts=5, finished_at=LONG_AGO)
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=json.dumps({
        "run_id": str(run_id), "schedule_id": str(sweep.id), "workspace_id": str(other)}))
    staff = Browser(console)
    staff.sign_in(STAFF, roles=("platform:staff",))
    conn.execute("UPDATE users SET display_name = 'Stella Staff' WHERE id = 'staff-1'")
    conn.commit()

    html = staff.request("GET", "/console/dead-letters/accounting")["body"]

    # Named by its schedule and occurrence (the schedule's zone, UTC beside), the body behind "Body"
    assert (f'<a href="/console/runs/{run_id}"><bdi>Nightly sweep</bdi>, occurrence <time datetime="'
            in html) and "2027-03-01 12:44 CET</time></a> <small>(2027-03-01 11:44 UTC)</small>" in html
    assert "Message for <bdi>Nightly sweep</bdi>" in html and "<details><summary>Body</summary>" in html
    # Its Redrive and Delete confirmations name the run (a browser's confirmation holds no link)
    named = "the message for Nightly sweep, occurrence 2027-03-01 12:44 CET (2027-03-01 11:44 UTC; the run is " \
            "Failed now)"
    assert f'data-confirm="Move {named} back to its queue?"' in html
    assert f'data-confirm="Delete {named} for good?"' in html
    message_id = re.search(r'/console/dead-letters/accounting/([0-9a-f-]+)/redrive', html).group(1)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)

    done = staff.request("POST", f"/console/dead-letters/accounting/{message_id}/redrive",
                         {"csrf": csrf, "reason": "consumer fixed"})

    after = staff.request("GET", _header(done, "Location"))["body"]
    assert f'<a href="/console/runs/{run_id}">Open its run</a>' in after
    assert "no other message is left here" in after and "the others stay here" not in after
    run_page = staff.request("GET", f"/console/runs/{run_id}")["body"]
    assert "Its dead-letter message moved back to its queue" in run_page
    assert "its consumer finds it settled and does nothing with the message" in run_page
    assert "use Retry now above" in run_page and f'action="/console/runs/{run_id}/retry"' in run_page
    # Once retried, the note links the new run instead of offering Retry now
    token = re.search(r'name="csrf" value="([^"]+)"', run_page).group(1)
    retry = staff.request("POST", f"/console/runs/{run_id}/retry", {"csrf": token, "reason": "feed is back"})
    assert retry["statusCode"] == 303, retry["body"]
    new_run = _header(retry, "Location").rsplit("/", 1)[1].split("?")[0]
    assert new_run != str(run_id)
    retried_page = staff.request("GET", f"/console/runs/{run_id}")["body"]
    assert "use Retry now above" not in retried_page
    assert f'does nothing with the message. It was retried: <a href="/console/runs/{new_run}">the new run</a>.' \
        in retried_page
    overview = staff.request("GET", "/console/operations")["body"]
    recent = overview[overview.index("<h2>Recent actions</h2>"):]
    assert "a message of" not in recent and f'(for <a href="/console/runs/{run_id}">its run</a>)' in recent
    assert '<span title="staff-1"><bdi>Stella Staff</bdi></span>: <bdi>consumer fixed</bdi>' in recent


def test_messages_another_reader_holds_are_said_to_be_read_elsewhere(console, conn, sqs, queues):  # noqa: F811
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody="not json {")
    held = sqs.receive_message(QueueUrl=queues["accounting"].dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=30)
    assert len(held["Messages"]) == 1
    staff = Browser(console)
    staff.sign_in(STAFF, roles=("platform:staff",))

    html = staff.request("GET", "/console/dead-letters/accounting")["body"]

    assert "1 message is being read by someone else; reload in 30 s to see it." in html
    assert "None to show now." in html
