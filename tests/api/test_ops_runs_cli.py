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
from rich.console import Console

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


def _failed_run(conn, name: str) -> tuple[uuid.UUID, uuid.UUID]:
    """A failing schedule of a new workspace (Europe/Berlin) whose member staff-1 is (Ada
    Staff), and its failed run, whose instants carry microseconds: (schedule id, run id)."""
    workspace = uuid.uuid4()
    enrol(conn, "staff-1", workspace)
    now = datetime(2026, 12, 6, 19, 53, 51, 155010, tzinfo=UTC)
    sweep = service.create_schedule(conn, workspace_id=workspace, owner="accounting", work_kind="reconciliation.sweep",
                                    actor="owner-1", now=now - timedelta(days=1), name=name,
                                    recurrence={"cron": "0 3 1 1 *", "timezone": "Europe/Berlin"}, active=False)
    run_id = conn.execute(
        """INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                  occurrence_local, trigger, definition_version, queued_at, state, attempts, outcome_code, error,
                  finished_at)
           VALUES (%s, %s, 'accounting', 'reconciliation.sweep', 'cli-failed', %s, %s, 'scheduled', 1, %s, 'failed',
                   3, 'reconciliation_failed', 'the ledger did not answer', %s)
           RETURNING id""", (sweep.id, workspace, now, datetime(2026, 12, 6, 20, 53, 51, 155010), now,
                             now)).fetchone()["id"]
    conn.execute("UPDATE schedules SET consecutive_failures = 3, updated_at = now() WHERE id = %s", (sweep.id,))
    conn.execute("UPDATE users SET display_name = 'Ada Staff' WHERE id = 'staff-1'")
    conn.commit()
    return sweep.id, run_id


def test_a_failed_run_is_shown_in_words_and_its_retry_names_the_new_run(server, conn, printed, monkeypatch):
    import rich.console

    _, run_id = _failed_run(conn, "CLI failing sweep")
    # Requested by the local server's sample data, as serve's sample runs are
    conn.execute("UPDATE schedule_runs SET trigger = 'manual', requested_by = 'serve-sample' WHERE id = %s",
                 (run_id,))
    conn.commit()
    monkeypatch.setattr(rich.console, "Console", lambda *a, **k: Console(file=printed, width=80))

    code, text = ops(server, printed, "runs", "retry", str(run_id), "--reason", "ledger back")
    assert code == 0, text
    new_run = text.split("run ")[-1].split()[0]
    assert uuid.UUID(new_run) != run_id

    code, text = ops(server, printed, "runs", "show", str(run_id))
    assert code == 0, text
    # The occurrence to the minute in the schedule's zone, the instant to the second in UTC
    assert "occurrence 2026-12-06 20:53 Europe/Berlin = 2026-12-06 19:53:51Z" in text
    assert ".155010" not in text
    # The run's id is not offered as a queue message id
    assert "message id" not in text
    # The outcome's code with the run's error; the person by name; the retry names the new run
    assert "outcome reconciliation_failed: the ledger did not answer" in text
    assert f"retry by Ada Staff (staff-1): ledger back (the new run: {new_run})" in text
    # The sample data's author in words, as the console says it, not its user id alone
    assert "requested by sample data (serve-sample)" in text
    # At 80 columns no line breaks inside an id or a sentence: a terminal folds the long ones
    assert any(str(run_id) in line and "CLI failing sweep" in line for line in text.splitlines())


def test_failed_runs_are_listed_with_their_whole_ids(server, conn, db_url, printed, monkeypatch):
    import rich.console

    schedule_id, run_id = _failed_run(conn, "CLI listed sweep")
    monkeypatch.setattr(rich.console, "Console", lambda *a, **k: Console(file=printed, width=80))

    # Across workspaces (the operations overview's failing schedules), at 80 columns
    code, text = ops(server, printed, "runs", "list", "--limit", "200")
    assert code == 0, text
    [line] = [line for line in text.splitlines() if str(run_id) in line]
    assert "CLI listed sweep" in line and "failed (reconciliation_failed)" in line and "attempts 3" in line
    assert "occurrence 2026-12-06 20:53 Europe/Berlin = 2026-12-06 19:53:51Z" in line

    # The failed runs of the token's workspace in one request (GET /runs?state=failed): a
    # retried one too, with the run its retry made; another workspace's token lists none of them
    workspace = conn.execute("SELECT workspace_id FROM schedules WHERE id = %s", (schedule_id,)).fetchone()
    enrol(db_url, "reader-1", workspace["workspace_id"])
    token = f"dev:reader-1:{workspace['workspace_id']}:schedules:read"
    code, text = ops(server, printed, "runs", "retry", str(run_id), "--reason", "ledger back")
    assert code == 0, text
    new_run = text.split("run ")[-1].split()[0]
    printed.seek(0)
    printed.truncate()
    code = main(["ops", "--api", server.base_url, "--token", token, "runs", "list", "--state", "failed"])
    text = printed.getvalue()
    assert code == 0, text
    [line] = [line for line in text.splitlines() if str(run_id) in line]
    assert f"retried as {new_run}" in line and "CLI listed sweep" in line
    code, text = ops(server, printed, "runs", "list", "--state", "failed", "--limit", "200")
    assert code == 0 and str(run_id) not in text

    # And a schedule's own runs, with its workspace's token
    printed.seek(0)
    printed.truncate()
    code = main(["ops", "--api", server.base_url, "--token", token, "runs", "list", "--schedule", str(schedule_id),
                 "--state", "failed", "--json"])
    assert code == 0, printed.getvalue()
    assert [r["id"] for r in json.loads(printed.getvalue())["items"]] == [str(run_id)]

    # A state the overview does not list needs the schedule
    code, text = ops(server, printed, "runs", "list", "--state", "succeeded")
    assert code == 2 and "--schedule" in text


def test_the_overview_prints_whole_ids_at_80_columns(server, conn, printed, monkeypatch):
    import rich.console

    schedule_id, run_id = _failed_run(conn, "CLI overview sweep")
    monkeypatch.setattr(rich.console, "Console", lambda *a, **k: Console(file=printed, width=80))

    code, text = ops(server, printed, "overview", "--limit", "500")
    assert code == 0, text
    [line] = [line for line in text.splitlines() if "CLI overview sweep" in line]
    assert f"schedule {schedule_id}" in line and f"latest failed run {run_id}" in line
    assert "3 failures in a row, last outcome" in line
    # Instants to the second, never with microseconds
    assert text.startswith("Operations overview as of ") and "Z" in text.splitlines()[0]
    assert "." not in text.splitlines()[0].split(" as of ")[1]


def test_one_dev_token_holds_the_staff_and_the_workspace_admin_roles(server, conn, printed):
    # As the docs show it: one person (a workspace admin by their membership, as serve's
    # sample admin is), one token, staff's and the workspace admin's commands
    conn.execute("UPDATE workspace_memberships SET roles = '{workspace:admin}' WHERE workspace_id = %s "
                 "AND user_id = 'staff-1'", (STAFF_WORKSPACE,))
    conn.commit()
    token = f"dev:staff-1:{STAFF_WORKSPACE}:platform:staff,workspace:admin"
    for command in (["overview", "--json"], ["settings", "show", "--json"]):
        printed.seek(0)
        printed.truncate()
        assert main(["ops", "--api", server.base_url, "--token", token, *command]) == 0, printed.getvalue()
