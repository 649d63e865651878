"""``python -m timekeeper ops settings|closures|posting-jobs|suppressions`` against
``serve`` over HTTP, as a workspace admin scripts them: the settings with a zone change's
preview before it is made, closures added and reopened, a failed posting job retried, an
address taken off the suppression list; a refusal is exit code 1 with the API's status,
code and field, and another workspace's data is never reached."""

from __future__ import annotations

import io
import json

import pytest
import requests

from tests.api.conftest import NOW, seed_member, serving
from timekeeper.db.connection import connect
from timekeeper.local.cli import main

ADMIN_ROLES = "workspace:admin,schedules:admin,schedules:read,schedules:write,queries:read"


@pytest.fixture(scope="module")
def server(db_url):
    with serving(db_url) as running:
        yield running


@pytest.fixture
def printed(monkeypatch):
    """What the command prints: the command line's rich console writes to a buffer."""
    import rich.console

    made = rich.console.Console
    out = io.StringIO()
    monkeypatch.setattr(rich.console, "Console", lambda *a, **k: made(file=out, width=400))
    return out


@pytest.fixture
def admin(db_url):
    """An admin of a fresh Europe/Berlin workspace (membership and token), and a reader of it."""
    caller = seed_member(db_url, roles=("workspace:admin", "schedules:admin"), token_roles=ADMIN_ROLES)
    reader = seed_member(db_url, workspace_id=caller.workspace_id, roles=("queries:read",))
    return {"token": f"dev:{caller.user_id}:{caller.workspace_id}:{ADMIN_ROLES}", "workspace": caller.workspace_id,
            "user": caller.user_id, "reader": reader.user_id,
            "reader_token": f"dev:{reader.user_id}:{caller.workspace_id}:queries:read,schedules:read"}


def ops(server, out, token, *args: str) -> tuple[int, str]:
    out.seek(0)
    out.truncate()
    code = main(["ops", "--api", server.base_url, "--token", token, *args])
    return code, out.getvalue()


def test_a_zone_change_is_previewed_then_made_and_moves_the_schedules(server, printed, admin):
    token = admin["token"]
    # Given a schedule whose rule is in the workspace's zone
    code, _ = ops(server, printed, token, "settings", "show")
    assert code == 0
    made = requests.post(f"{server.base_url}/schedules", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                         json={"owner": "accounting", "work_kind": "reconciliation.sweep", "name": "Nine <Berlin>",
                               "recurrence": {"cron": "0 9 * * *", "timezone": "Europe/Berlin"}})
    assert made.status_code == 201, made.text
    # The settings, a line each: the zone, the locale, each member's notice e-mails
    code, text = ops(server, printed, token, "settings", "show")
    assert code == 0, text
    assert "time zone Europe/Berlin; locale en_US; the admins get a copy of every notice: no" in text
    assert f"notice e-mails on: Member ({admin['reader']})" in text
    # --preview shows what the change does to the schedule, and changes nothing
    code, text = ops(server, printed, token, "settings", "set", "--timezone", "America/New_York", "--move-schedules",
                     "--preview")
    assert code == 0, text
    assert "zone Europe/Berlin -> America/New_York: 1 schedules have their rule in Europe/Berlin" in text
    assert "Nine <Berlin>" in text and " EST (" in text
    code, text = ops(server, printed, token, "settings", "show", "--json")
    assert json.loads(text)["timezone"] == "Europe/Berlin"
    # The change prints the preview, then the settings and how many schedules moved
    code, text = ops(server, printed, token, "settings", "set", "--timezone", "America/New_York", "--move-schedules",
                     "--locale", "de_DE", "--notify-admins", "yes")
    assert code == 0, text
    assert text.index("zone Europe/Berlin -> America/New_York") < text.index("time zone America/New_York; locale "
                                                                             "de_DE; the admins get a copy of every "
                                                                             "notice: yes")
    assert "1 schedules moved to America/New_York" in text
    rule = requests.get(f"{server.base_url}/schedules/{made.json()['id']}", timeout=30,
                        headers={"Authorization": f"Bearer {token}"}).json()["schedule"]
    assert rule["timezone"] == "America/New_York"


def test_a_refused_setting_is_the_apis_status_code_and_field(server, printed, admin):
    code, text = ops(server, printed, admin["token"], "settings", "set", "--locale", "xx_NOPE")
    assert code == 1 and "422 validation_error (field locale)" in text
    code, text = ops(server, printed, admin["token"], "settings", "set", "--timezone", "Mars/Olympus", "--preview")
    assert code == 1 and "(field timezone)" in text
    # Nothing asked is a usage error
    code, text = ops(server, printed, admin["token"], "settings", "set")
    assert code == 2 and "nothing to change" in text
    # A member without workspace:admin is refused by the API
    code, text = ops(server, printed, admin["reader_token"], "settings", "show")
    assert code == 1 and text.startswith("403 ")


def test_notice_mail_is_turned_off_and_on_for_a_member(server, printed, admin):
    code, text = ops(server, printed, admin["token"], "settings", "notice-mail", admin["reader"], "off")
    assert code == 0, text
    assert f"notice e-mails of {admin['reader']}: off" in text
    code, text = ops(server, printed, admin["token"], "settings", "show")
    assert "notice e-mails off since" in text and f"(by an admin): Member ({admin['reader']})" in text
    code, text = ops(server, printed, admin["token"], "settings", "notice-mail", admin["reader"], "on")
    assert code == 0 and "on" in text
    # Someone not a member of the workspace: the API's 404
    code, text = ops(server, printed, admin["token"], "settings", "notice-mail", "nobody-here", "off")
    assert code == 1 and "404 not_found" in text


def test_a_date_is_closed_listed_and_reopened(server, printed, admin):
    token = admin["token"]
    code, text = ops(server, printed, token, "closures", "list")
    assert code == 0 and "no closed dates" in text
    code, text = ops(server, printed, token, "closures", "add", "2031-12-24", "--reason", "office [closed]")
    assert code == 0, text
    assert "2031-12-24 closed; 0 business-day schedules recomputed" in text
    code, text = ops(server, printed, token, "closures", "add", "2031-12-24", "--reason", "again")
    assert code == 0 and "already closed" in text
    code, text = ops(server, printed, token, "closures", "list")
    assert f"2031-12-24  office [closed]  (closed by {admin['user']}, " in text
    # A date the calendar lacks: the API's 422 naming the field
    code, text = ops(server, printed, token, "closures", "add", "2031-02-30")
    assert code == 1 and "422 validation_error (field date)" in text
    code, text = ops(server, printed, token, "closures", "remove", "2031-12-24")
    assert code == 0 and "2031-12-24 open again" in text
    code, text = ops(server, printed, token, "closures", "remove", "2031-12-24")
    assert code == 1 and "404 not_found" in text


def test_a_failed_posting_job_is_listed_and_retried(server, printed, admin, db_url):
    with connect(db_url) as conn, conn.transaction():
        batch = conn.execute("INSERT INTO batches (workspace_id, name, status, close_at, opened_at, closed_at) "
                             "VALUES (%s, 'Week 7', 'closed', %s, %s, %s) RETURNING id",
                             (admin["workspace"], NOW, NOW, NOW)).fetchone()["id"]
        job = conn.execute("INSERT INTO posting_jobs (workspace_id, batch_id, status, error, attempts, created_at, "
                           "finished_at) VALUES (%s, %s, 'failed', 'does not balance', 1, %s, %s) RETURNING id",
                           (admin["workspace"], batch, NOW, NOW)).fetchone()["id"]
    code, text = ops(server, printed, admin["token"], "posting-jobs", "list")
    assert code == 0, text
    assert f"{job}  batch {batch}  failed  1 attempts  failed 2027-03-01 13:00 CET (2027-03-01 12:00 UTC): " \
           "does not balance" in text
    code, text = ops(server, printed, admin["token"], "posting-jobs", "retry", str(job))
    assert code == 0 and f"posting job {job} of batch {batch}: pending" in text
    code, text = ops(server, printed, admin["token"], "posting-jobs", "list", "--json")
    assert json.loads(text)["items"] == []
    # Another workspace's admin does not reach it
    other = seed_member(db_url, roles=("workspace:admin",), token_roles="workspace:admin")
    code, text = ops(server, printed, f"dev:{other.user_id}:{other.workspace_id}:workspace:admin", "posting-jobs",
                     "retry", str(job))
    assert code == 1 and "404" in text


def test_an_address_is_taken_off_the_suppression_list_with_a_reason(server, printed, admin, db_url):
    with connect(db_url) as conn, conn.transaction():
        conn.execute("INSERT INTO mail_suppressions (workspace_id, address, reason, provider_message_id, "
                     "suppressed_at) VALUES (%s, 'full@x.test', 'bounced', 'ses-1', %s)", (admin["workspace"], NOW))
    code, text = ops(server, printed, admin["token"], "suppressions", "list")
    assert code == 0 and "full@x.test  bounced  since 2027-03-01 13:00 CET (2027-03-01 12:00 UTC)" in text
    # A blank reason is the API's 422 naming it; nothing is removed
    code, text = ops(server, printed, admin["token"], "suppressions", "remove", "full@x.test", "--reason", "  ")
    assert code == 1 and "(field reason)" in text
    # Another workspace's admin cannot remove it
    other = seed_member(db_url, roles=("workspace:admin",), token_roles="workspace:admin")
    code, text = ops(server, printed, f"dev:{other.user_id}:{other.workspace_id}:workspace:admin", "suppressions",
                     "remove", "full@x.test", "--reason", "mine")
    assert code == 1 and "404 not_found (field address)" in text
    # A reader lists it and may not remove it
    code, text = ops(server, printed, admin["reader_token"], "suppressions", "remove", "full@x.test", "--reason", "x")
    assert code == 1 and text.startswith("403 ")
    code, text = ops(server, printed, admin["token"], "suppressions", "remove", "full@x.test", "--reason",
                     "the mailbox was full")
    assert code == 0 and "full@x.test is off the suppression list (it was bounced since" in text
    code, text = ops(server, printed, admin["token"], "suppressions", "list")
    assert "no suppressed addresses" in text
    code, text = ops(server, printed, admin["token"], "suppressions", "removals")
    assert f"full@x.test  removed by {admin['user']} " in text and ": the mailbox was full (was bounced)" in text
    code, text = ops(server, printed, admin["token"], "suppressions", "remove", "full@x.test", "--reason", "again")
    assert code == 1 and "404 not_found" in text


def test_a_workspace_command_needs_its_arguments(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["ops", "suppressions", "remove", "a@x.test"])
    assert exited.value.code == 2 and "--reason" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["ops", "posting-jobs", "retry", "not-a-uuid"])
    assert exited.value.code == 2 and "expected a UUID" in capsys.readouterr().err
