"""``python -m timekeeper ops`` against ``serve`` over HTTP, the way an operator scripts a
deployed stage: the overview shows a dead letter, a redrive moves it back to its queue,
a token without the staff role is refused with the API's code, and an API that cannot be
reached is exit code 2."""

from __future__ import annotations

import io
import json
import os
import socket
import uuid
from datetime import UTC, date, datetime

import boto3
import pytest
from rich.console import Console

from tests.api.conftest import FAILED_NAME, MISSING_NAME, PUBLISHED_NAME, enrol, seed_overdue_workspaces, serving
from timekeeper.local.cli import main
from timekeeper.local.ops import OpsOptions, run_ops
from timekeeper.settings import dead_letter_queue_arn_variable, work_queue_url_variable

STAFF_WORKSPACE, BOB_WORKSPACE = uuid.uuid4(), uuid.uuid4()
STAFF_TOKEN = f"dev:staff-1:{STAFF_WORKSPACE}:platform:staff"


@pytest.fixture(scope="module")
def server(db_url):
    # Every caller is a member of the workspace their token names (the API asks the directory)
    enrol(db_url, "staff-1", STAFF_WORKSPACE)
    enrol(db_url, "bob", BOB_WORKSPACE)
    with serving(db_url) as running:
        yield running


def ops(server, *args: str, token: str = STAFF_TOKEN) -> tuple[int, str]:
    out = io.StringIO()
    code = run_ops(_options(server.base_url, token, *args), Console(file=out, width=200))
    return code, out.getvalue()


def _options(api: str, token: str, action: str, *rest: str) -> OpsOptions:
    if action == "overview":
        return OpsOptions(action="overview", api=api, token=token, as_json=True)
    if action == "redrive":
        return OpsOptions(action="redrive", api=api, token=token, queue=rest[0], reason=rest[1], as_json=True)
    if action == "erase":
        return OpsOptions(action="erase", api=api, token=token, user=rest[0], reason=rest[1])
    return OpsOptions(action="resume", api=api, token=token, workspace=rest[0], schedule=rest[1], reason=rest[2])


def test_the_overview_shows_a_dead_letter_and_a_redrive_moves_it_back(server):
    # Given a dead letter in the exports queue's dead-letter queue (serve's moto)
    sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    dlq_name = os.environ[dead_letter_queue_arn_variable("exports")].split(":")[-1]
    dlq_url = sqs.get_queue_url(QueueName=dlq_name)["QueueUrl"]

    def held(url: str) -> int:
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    # (other tests' servers in this process share serve's moto: count from what the queues hold)
    left, exports_before = held(dlq_url), held(os.environ[work_queue_url_variable("exports")])
    sqs.send_message(QueueUrl=dlq_url, MessageBody='{"export_id": "lost"}')

    # When the operator reads the overview over HTTP
    code, text = ops(server, "overview")
    assert code == 0, text
    queues = {q["name"]: q for q in json.loads(text)["dead_letter_queues"]}
    assert queues["exports"]["messages"] == left + 1

    # And redrives it with a reason
    code, text = ops(server, "redrive", "exports", "the bucket policy was fixed")
    assert code == 0, text
    assert json.loads(text)["moved"] == left + 1
    # Then the message is back on the exports queue (its consumer, serve's poller, takes it)
    # and the dead-letter queue is empty
    assert held(dlq_url) == 0
    assert held(os.environ[work_queue_url_variable("exports")]) == exports_before + left + 1


def test_a_token_without_the_staff_role_is_refused_with_the_apis_code(server):
    code, text = ops(server, "overview", token=f"dev:bob:{BOB_WORKSPACE}:schedules:read")
    assert code == 1
    assert "403 forbidden" in text


def test_an_unknown_schedule_is_the_apis_404(server):
    code, text = ops(server, "resume", str(uuid.uuid4()), str(uuid.uuid4()), "try")
    assert code == 1
    assert "404 not_found" in text


def test_an_erasure_prints_what_it_removed_and_is_recorded_by_the_digest(server):
    person = f"person-{uuid.uuid4()}"
    code, text = ops(server, "erase", person, "request 2027-7")
    assert code == 0, text
    printed = " ".join(text.split())  # rich wraps at the console's width
    assert "off 0 recipient lists" in printed and "0 delivery addresses erased" in printed
    # And the operations action names the digest (sha256:...), never the id
    code, text = ops(server, "overview")
    assert code == 0, text
    [action] = [a for a in json.loads(text)["recent_actions"] if a["reason"] == "request 2027-7"]
    assert action["action"] == "erase" and action["target"].startswith("sha256:") and person not in text


def test_an_api_that_cannot_be_reached_is_exit_code_2():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    api = f"http://127.0.0.1:{port}"
    # The command line says so with exit code 2
    assert main(["ops", "--api", api, "--token", STAFF_TOKEN, "overview"]) == 2
    # And names the API it could not reach
    out = io.StringIO()
    assert run_ops(OpsOptions(action="overview", api=api, token=STAFF_TOKEN), Console(file=out, width=200)) == 2
    assert f"cannot reach the API: {api}" in out.getvalue()


def test_a_redrive_needs_a_reason(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["ops", "redrive", "exports"])
    assert exited.value.code == 2
    assert "--reason" in capsys.readouterr().err


def test_the_overview_prints_every_workspaces_overdue_periods(server, conn):
    # Given (at serve's real clock) a workspace never planned, one whose months failed and one
    # whose months are published, created on the 10th two months ago: every month since is
    # complete, the first one overdue for weeks
    today = datetime.now(UTC)
    first = date(today.year - (today.month <= 2), (today.month - 3) % 12 + 1, 1)
    second = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    made = seed_overdue_workspaces(conn, created=datetime(first.year, first.month, 10, tzinfo=UTC),
                                   periods=[first, second])
    conn.commit()

    # When the operator prints the overview (tables, not JSON)
    out = io.StringIO()
    code = run_ops(OpsOptions(action="overview", api=server.base_url, token=STAFF_TOKEN), Console(file=out, width=400))

    # Then the first two workspaces' first month is listed with its status, the name as it is
    # (markup escaped), and the published workspace is not
    assert code == 0, out.getvalue()
    text = out.getvalue()
    assert "Overdue snapshot periods" in text
    rows = [line for line in text.splitlines() if f"{first:%Y-%m}" in line]
    # (serve's planner runs every 15 wall-clock minutes: should one start in between, the
    # never-planned month is planned, and overdue all the same)
    assert any(str(made[MISSING_NAME]) in r and MISSING_NAME in r
               and any(s in r for s in ("missing", "planned", "queued", "running")) for r in rows), text
    assert any(str(made[FAILED_NAME]) in r and "failed (generator_failed)" in r for r in rows), text
    assert str(made[PUBLISHED_NAME]) not in text


def test_erase_member_calls_the_member_erasure_route(server, capsys):
    workspace, member = BOB_WORKSPACE, uuid.uuid4()  # a workspace of the directory
    capsys.readouterr()
    code = main(["ops", "--api", server.base_url, "--token", STAFF_TOKEN, "erase-member", str(workspace), str(member),
                 "--reason", "request 2027-115"])
    out = " ".join(capsys.readouterr().out.split())  # rich wraps the line at the terminal's width
    assert code == 0, out
    assert f"of workspace {workspace}: 0 snapshot rows pseudonymised" in out
    assert str(member) not in out  # the member is named by the digest of their id
    # And without a staff role it is the API's refusal, exit code 1
    code = main(["ops", "--api", server.base_url, "--token", f"dev:bob:{BOB_WORKSPACE}:schedules:read",
                 "erase-member", str(workspace), str(member), "--reason", "x"])
    assert code == 1 and "403" in capsys.readouterr().out
    # And a workspace the directory does not have is the API's 404 naming it, exit code 1
    code = main(["ops", "--api", server.base_url, "--token", STAFF_TOKEN, "erase-member", str(uuid.uuid4()),
                 str(member), "--reason", "typo"])
    assert code == 1 and "404" in capsys.readouterr().out
