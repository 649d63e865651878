"""``python -m timekeeper smoke`` against ``serve`` over HTTP, as an operator runs it after
``cdk deploy``: the real command, through the CLI's dispatch. The server's clock runs 30
times faster than the wall clock, so the schedule's "next minute" comes in about two
seconds; the check itself only waits on the API."""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.api.conftest import seed_member, serving
from timekeeper import clock
from timekeeper.db.connection import connect
from timekeeper.local.cli import main

WORKSPACE = uuid.uuid4()
USER = f"smoker-{uuid.uuid4().hex[:8]}"
ADDRESS = f"{USER}@example.org"
#: The token roles docs/deploy.md names for the check, and no more.
TOKEN = f"dev:{USER}:{WORKSPACE}:schedules:read,schedules:write,queries:read,queries:write"
#: How much faster than the wall clock the server's clock runs.
SPEED = 30


@pytest.fixture(scope="module")
def server(db_url):
    seed_member(db_url, workspace_id=WORKSPACE, user_id=USER, roles=("queries:admin",))
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE users SET email = %s, display_name = 'Sam Smoke' WHERE id = %s", (ADDRESS, USER))
    start, started = datetime.now(UTC), time.monotonic()
    with serving(db_url, poll_interval_s=0.2) as running:
        clock.install(lambda: start + timedelta(seconds=(time.monotonic() - started) * SPEED))
        yield running


def _steps(out: str) -> list[tuple[str, str]]:
    """The check's ``(verdict, step)`` lines, in order (serve runs in this process and its
    log lines share the output)."""
    return re.findall(r"(ok  |FAIL|skip) (schedule|scheduled run|query|recipient|delivery sent|delivery|cleanup) ",
                      out)


def _left(db_url: str) -> dict[str, int]:
    """What of the check's own is still there (not deleted) in the workspace."""
    with connect(db_url) as conn:
        return {
            "schedules": conn.execute("SELECT count(*) AS n FROM schedules WHERE workspace_id = %s "
                                      "AND deleted_at IS NULL", (WORKSPACE,)).fetchone()["n"],
            "queries": conn.execute("SELECT count(*) AS n FROM saved_queries WHERE workspace_id = %s "
                                    "AND deleted_at IS NULL", (WORKSPACE,)).fetchone()["n"]}


def test_the_smoke_check_passes_against_serve_and_leaves_nothing_behind(server, db_url, capsys):
    code = main(["smoke", "--api", server.base_url, "--token", TOKEN, "--mail-to", ADDRESS.upper(),
                 "--timeout", "60"])
    out = capsys.readouterr().out
    assert code == 0, out
    # One line per step, in order, each passed, then the verdict
    assert _steps(out) == [("ok  ", step) for step in ("schedule", "scheduled run", "query", "recipient", "delivery",
                                                       "delivery sent", "cleanup")], out
    assert "skipped (nothing_to_reconcile)" in out  # a workspace without bank lines: nothing changed
    assert f"sent to {ADDRESS.upper()}, provider message " in out
    assert "smoke check passed: 7 steps in " in out
    # The delivery really went out to the member's address, and everything made is deleted
    with connect(db_url) as conn:
        sent = conn.execute("SELECT address, status FROM query_deliveries WHERE workspace_id = %s",
                            (WORKSPACE,)).fetchall()
    assert sent == [{"address": ADDRESS, "status": "sent"}]
    assert _left(db_url) == {"schedules": 0, "queries": 0}


def test_without_an_address_the_delivery_is_skipped_and_said_so(server, db_url, capsys):
    code = main(["smoke", "--api", server.base_url, "--token", TOKEN, "--timeout", "60"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "skip delivery" in out and "no --mail-to" in out
    assert _left(db_url) == {"schedules": 0, "queries": 0}


def test_an_address_of_no_member_fails_and_still_cleans_up(server, db_url, capsys):
    code = main(["smoke", "--api", server.base_url, "--token", TOKEN, "--mail-to", "stranger@example.org",
                 "--timeout", "60"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAIL recipient" in out and "no current, active member" in out and "stranger@example.org" in out
    assert "ok   cleanup" in out and "smoke check FAILED at recipient" in out
    assert _left(db_url) == {"schedules": 0, "queries": 0}


def test_a_bad_token_is_exit_code_1_with_the_reason(server, capsys):
    code = main(["smoke", "--api", server.base_url, "--token", "not-a-token", "--timeout", "30"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAIL schedule" in out and "401 unauthenticated" in out and "is the token valid" in out
    assert "nothing to delete" in out


def test_bad_arguments_are_exit_code_2(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["smoke", "--token", "t"])
    assert stopped.value.code == 2
    with pytest.raises(SystemExit) as stopped:
        main(["smoke", "--api", "http://127.0.0.1:9", "--token", "t", "--timeout", "soon"])
    assert stopped.value.code == 2
    assert "--timeout" in capsys.readouterr().err
    # A malformed URL or a token with a line break is refused before anything is sent
    for argv in (["smoke", "--api", "http://[::1", "--token", "t"], ["smoke", "--api", "ftp://x", "--token", "t"],
                 ["smoke", "--api", "http://127.0.0.1:9", "--token", "t\nX-Evil: 1"],
                 ["ops", "--api", "http://[::1", "overview"]):
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert stopped.value.code == 2, argv
