"""``python -m timekeeper ops snapshots ...`` against ``serve`` over HTTP, as staff script
them: the failed periods found, a backfill of one month requested with a reason and then
cancelled, the period's versions shown, a range previewed (nothing recorded) and requested
with its progress; a refusal is exit code 1 with the API's status, code and field."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, date, datetime

import pytest
from rich.console import Console

from tests.api.conftest import FAILED_NAME, MISSING_NAME, PUBLISHED_NAME, enrol, seed_overdue_workspaces, serving
from timekeeper.local.cli import main

STAFF_WORKSPACE = uuid.uuid4()
STAFF_TOKEN = f"dev:staff-1:{STAFF_WORKSPACE}:platform:staff"
TYPE = "platform:membership_counts"


@pytest.fixture(scope="module")
def server(db_url):
    enrol(db_url, "staff-1", STAFF_WORKSPACE)
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


def month_back(n: int) -> date:
    """The first day of the month ``n`` months before this one (serve's real clock)."""
    today = datetime.now(UTC)
    index = today.year * 12 + today.month - 1 - n
    return date(index // 12, index % 12 + 1, 1)


@pytest.fixture(scope="module")
def months():
    """Two complete months at serve's real clock: three and two months ago."""
    return month_back(3), month_back(2)


#: A month the workspaces expect (after their creation) and that is older than the
#: planner's horizon: serve's planner never plans it by itself.
OLD_MONTH = month_back(5)


@pytest.fixture(scope="module")
def workspaces(server, db_url, months):
    """Three Berlin workspaces created six months ago: one never planned, one whose two
    ``months`` failed, one whose two ``months`` are published."""
    from timekeeper.db.connection import connect

    created = month_back(6)
    with connect(db_url) as conn, conn.transaction():
        return seed_overdue_workspaces(conn, created=datetime(created.year, created.month, 10, tzinfo=UTC),
                                       periods=list(months))


def ops(server, out, *args: str, token: str = STAFF_TOKEN) -> tuple[int, str]:
    out.seek(0)
    out.truncate()
    code = main(["ops", "--api", server.base_url, "--token", token, *args])
    return code, out.getvalue()


def test_staff_find_the_failed_periods_by_workspace_name(server, printed, workspaces, months, monkeypatch):
    import rich.console

    # (at a terminal's 80 columns: a period stays on one line)
    monkeypatch.setattr(rich.console, "Console", lambda *a, **k: Console(file=printed, width=80))
    code, text = ops(server, printed, "snapshots", "periods", "--search", "Failed &", "--status", "failed",
                     "--type", TYPE)
    assert code == 0, text
    # (other tests' workspaces may bear the same name: this one's rows)
    rows = [line for line in text.splitlines() if f"{FAILED_NAME} ({workspaces[FAILED_NAME]})" in line]
    assert len(rows) == 2
    # The type by the name the API gives it, not its code
    assert all(any(f"Membership counts {m:%Y-%m}  failed" in r for r in rows) for m in months), rows
    assert TYPE not in text
    assert all("  run " in r for r in rows)
    assert all("failed (generator_failed)" in r for r in rows)


def test_a_backfill_is_requested_shown_and_cancelled_with_reasons(server, printed, workspaces, months):
    month, missing = f"{OLD_MONTH:%Y-%m}", str(workspaces[MISSING_NAME])
    # A blank reason is the API's 422 naming it
    code, text = ops(server, printed, "snapshots", "request", missing, month, "--type", TYPE, "--mode", "backfill",
                     "--reason", "   ")
    assert code == 1 and "422" in text and "(field reason)" in text
    # A backfill of the month never planned, with a reason
    code, text = ops(server, printed, "snapshots", "request", missing, month, "--type", TYPE, "--mode", "backfill",
                     "--reason", "never planned: the workspace was loading", "--json")
    assert code == 0, text
    run = json.loads(text)
    assert (run["mode"], run["version"], run["reason"]) == ("backfill", 1, "never planned: the workspace was loading")
    # Cancelled at once with a reason (admission may have queued it meanwhile: both are cancellable)
    code, text = ops(server, printed, "snapshots", "cancel", missing, run["id"], "--reason", "requested by mistake")
    assert code == 0, text
    assert f"version 1 of {TYPE} {month} cancelled (state cancelled, run {run['id']}): requested by mistake" in text
    # The period shows the version, its requester and reason, who cancelled it and why
    code, text = ops(server, printed, "snapshots", "show", missing, month, "--type", TYPE)
    assert code == 0, text
    assert f"{MISSING_NAME} ({missing})" in text and "months end in Europe/Berlin" in text
    assert "version 1: cancelled (a staff backfill)" in text
    assert "requested by staff-1: never planned: the workspace was loading" in text
    assert "cancelled by staff-1 " in text and ": requested by mistake" in text
    # Cancelling again is the API's 409 with its code
    code, text = ops(server, printed, "snapshots", "cancel", missing, run["id"], "--reason", "again")
    assert code == 1 and "409 not_cancellable" in text


def test_a_range_is_previewed_then_requested_and_its_progress_shown(server, printed, workspaces, months):
    first, through = (f"{m:%Y-%m}" for m in months)
    failed, published = str(workspaces[FAILED_NAME]), str(workspaces[PUBLISHED_NAME])
    targets = ["--workspace", failed, "--workspace", published]
    # The preview: every month of both workspaces planned as version 2, nothing recorded
    code, text = ops(server, printed, "snapshots", "range", "--type", TYPE, *targets, "--first", first, "--through",
                     through, "--mode", "manual", "--reason", "the generator is fixed", "--preview")
    assert code == 0, text
    assert text.startswith("preview: 4 planned, 0 refused (admission: 4 at once, 1 kept for backfills)")
    assert f"{FAILED_NAME} ({failed})  {first}  planned as version 2" in text
    code, text = ops(server, printed, "snapshots", "show", failed, first, "--type", TYPE)
    assert "version 2" not in text
    # The failed workspace's months only, requested: the range's id, then its progress
    code, text = ops(server, printed, "snapshots", "range", "--type", TYPE, "--workspace", failed, "--first", first,
                     "--through", through, "--mode", "manual", "--reason", "the generator is fixed", "--json")
    assert code == 0, text
    plan = json.loads(text)
    assert plan["planned"] == 2 and plan["group_id"]
    code, text = ops(server, printed, "snapshots", "progress", plan["group_id"])
    assert code == 0, text
    assert text.startswith(f"range {plan['group_id']}: ")
    assert sum(f"{FAILED_NAME} ({failed})" in line and "version 2" in line for line in text.splitlines()) == 2
    code, text = ops(server, printed, "snapshots", "ranges")
    assert any(line.startswith(plan["group_id"]) and f"{TYPE} manual {first}..{through}" in line
               and ": the generator is fixed" in line for line in text.splitlines()), text
    # A range again over the same months: refused per month with the ledger's reason
    code, text = ops(server, printed, "snapshots", "range", "--type", TYPE, "--workspace", failed, "--first", first,
                     "--through", first, "--mode", "backfill", "--reason", "again", "--preview")
    assert code == 0 and "0 planned, 1 refused" in text and "refused " in text


def test_snapshot_commands_are_staffs_and_check_their_arguments(server, printed, workspaces, months, capsys):
    member = f"dev:bob:{workspaces[MISSING_NAME]}:snapshots:read"
    code, text = ops(server, printed, "snapshots", "request", str(workspaces[MISSING_NAME]), f"{months[0]:%Y-%m}",
                     "--type", TYPE, "--mode", "backfill", "--reason", "mine", token=member)
    assert code == 1 and text.startswith("403 ")
    for wrong in (["snapshots", "request", str(uuid.uuid4()), "2027-13", "--type", TYPE, "--mode", "manual",
                   "--reason", "x"],
                  ["snapshots", "show", str(uuid.uuid4()), "2027-01", "--type", "membership_counts"],
                  ["snapshots", "range", "--type", TYPE, "--first", "2027-01", "--through", "2027-02", "--mode",
                   "manual", "--reason", "x"]):
        with pytest.raises(SystemExit) as exited:
            main(["ops", *wrong])
        assert exited.value.code == 2
    assert "expected OWNER:TYPE" in capsys.readouterr().err
