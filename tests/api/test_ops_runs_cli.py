"""``python -m timekeeper ops runs|dlq`` against ``serve`` over HTTP: a run is shown and
cancelled with a reason; a dead-letter message is read (and stays), redriven alone; a
refusal is exit code 1 with the API's code and field."""

from __future__ import annotations

import io
import json
import os
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from tests.api.conftest import enrol, serving
from timekeeper.local.cli import main
from timekeeper.schedules import service
from timekeeper.settings import dead_letter_queue_arn_variable

STAFF_WORKSPACE = uuid.uuid4()
STAFF_TOKEN = f"dev:staff-1:{STAFF_WORKSPACE}:platform:staff"


@pytest.fixture(scope="module")
def server(db_url):
    enrol(db_url, "staff-1", STAFF_WORKSPACE)
    with serving(db_url) as running:
        yield running


@pytest.fixture
def printed(monkeypatch):
    """What the command prints (serve's own log lines go to stdout too): the command line's
    rich console writes to a buffer."""
    import rich.console

    made = rich.console.Console
    out = io.StringIO()
    monkeypatch.setattr(rich.console, "Console", lambda *a, **k: made(file=out, width=400))
    return out


def ops(server, out, *args: str) -> tuple[int, str]:
    out.seek(0)
    out.truncate()
    code = main(["ops", "--api", server.base_url, "--token", STAFF_TOKEN, *args])
    return code, out.getvalue()


def test_a_run_is_shown_and_cancelled_with_a_reason(server, conn, printed):
    workspace = uuid.uuid4()
    now = datetime.now(UTC)
    sweep = service.create_schedule(conn, workspace_id=workspace, owner="accounting", work_kind="reconciliation.sweep",
                                    actor="owner-1", now=now - timedelta(days=1), name="CLI sweep",
                                    recurrence={"cron": "0 3 1 1 *", "timezone": "UTC"}, active=False)
    # (a queued run whose offer the dispatcher made and will not repeat during the test:
    # an unpublished run offered never or long ago is published again by serve's next pass,
    # and its consumer would settle it before the cancel)
    run_id = conn.execute(
        """INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                  occurrence_local, trigger, definition_version, queued_at, offered_at, state)
           VALUES (%s, %s, 'accounting', 'reconciliation.sweep', 'cli', %s, %s, 'scheduled', 1, %s, %s, 'queued')
           RETURNING id""", (sweep.id, workspace, now, now.replace(tzinfo=None), now,
                             now + timedelta(hours=1))).fetchone()["id"]
    conn.commit()

    code, text = ops(server, printed, "runs", "show", str(run_id), "--json")
    assert code == 0, text
    assert (json.loads(text)["schedule_name"], json.loads(text)["state"]) == ("CLI sweep", "queued")

    code, text = ops(server, printed, "runs", "cancel", str(run_id), "--reason", " ")
    assert code == 1 and "422 validation_error" in text and "field reason" in text

    code, text = ops(server, printed, "runs", "cancel", str(run_id), "--reason", "test run")
    assert code == 0, text
    assert "cancel of run" in text
    assert conn.execute("SELECT state FROM schedule_runs WHERE id = %s", (run_id,)).fetchone()["state"] == "skipped"
    code, text = ops(server, printed, "runs", "cancel", str(run_id), "--reason", "again")
    assert code == 1 and "409 not_queued" in text


def test_a_dead_letter_is_read_then_redriven_alone(server, printed):
    sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    dlq_name = os.environ[dead_letter_queue_arn_variable("snapshots")].split(":")[-1]
    dlq_url = sqs.get_queue_url(QueueName=dlq_name)["QueueUrl"]
    for n in range(2):
        sqs.send_message(QueueUrl=dlq_url, MessageBody=json.dumps({"n": n}))

    code, text = ops(server, printed, "dlq", "show", "snapshots", "--json")
    assert code == 0, text
    items = json.loads(text)["items"]
    assert len(items) == 2 and {m["why"] for m in items} == {"malformed_body"}
    code, text = ops(server, printed, "dlq", "list", "--json")
    assert {q["name"]: q["messages"] for q in json.loads(text)["items"]}["snapshots"] == 2

    chosen = items[0]["message_id"]
    code, text = ops(server, printed, "dlq", "redrive", "snapshots", "--message", chosen, "--reason", "fixed")
    assert code == 0, text
    code, text = ops(server, printed, "dlq", "show", "snapshots", "--json")
    assert [m["message_id"] for m in json.loads(text)["items"]] == [items[1]["message_id"]]

    code, text = ops(server, printed, "dlq", "delete", "snapshots", items[1]["message_id"], "--reason", "junk")
    assert code == 0, text
    code, text = ops(server, printed, "dlq", "delete", "snapshots", items[1]["message_id"], "--reason", "junk")
    assert code == 1 and "404 not_found" in text
