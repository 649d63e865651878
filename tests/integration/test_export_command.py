"""``python -m timekeeper export``: a query saved from ``--definition`` and exported end to
end on the local stack (queue, real consumer, moto S3) into a file; a refusal is one line
and exit code 1."""

from __future__ import annotations

import csv
import os
import uuid

import psycopg
import pytest

from timekeeper.local import embedded
from timekeeper.local.cli import main

DEFINITION = ('{"entity": "invoices", "columns": ["number", "due_date", "amount_minor"], '
              '"filters": [{"column": "status", "op": "eq", "value": "paid"}], "sort": [{"column": "number"}]}')


@pytest.fixture
def server(pg_server_url, monkeypatch):
    """The test server as the local stack's (``DATABASE_URL``), and a database name to use."""
    name = f"tk_export_cli_{os.environ.get('PYTEST_XDIST_WORKER', 'gw')}"
    monkeypatch.setenv("DATABASE_URL", pg_server_url)
    yield name
    embedded.drop_database(pg_server_url, name)


def test_export_saves_the_definition_and_writes_the_file(server, tmp_path, capsys):
    workspace = uuid.uuid4()
    out = tmp_path / "paid.csv"
    # When a demo workspace's paid invoices are exported with a definition given on the command line
    code = main(["export", "--workspace", str(workspace), "--user", "alice", "--demo", "--definition", DEFINITION,
                 "--format", "csv", "--out", str(out), "--database", server])
    # Then the file holds the header and the 250 paid demo invoices, sorted
    assert code == 0, capsys.readouterr().err
    rows = list(csv.reader(out.open(newline="", encoding="utf-8")))
    assert rows[0] == ["Number", "Due", "Amount (EUR)"] and len(rows) == 251
    assert [r[0] for r in rows[1:]] == sorted(r[0] for r in rows[1:])
    printed = capsys.readouterr().out
    assert "250 rows" in printed and str(out) in printed
    # And another user of no workspace is refused in one line
    refused = main(["export", "--workspace", str(workspace), "--user", "mallory", "--definition", DEFINITION,
                    "--out", str(tmp_path / "x.csv"), "--database", server])
    assert refused == 1 and "export refused: not_a_member" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
    with psycopg.connect(embedded.with_database(os.environ["DATABASE_URL"], server)) as conn:
        assert conn.execute("SELECT count(*) FROM saved_queries WHERE created_by = 'mallory'").fetchone() == (0,)


def test_bad_arguments_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["export", "--workspace", "nope", "--user", "a", "--query", str(uuid.uuid4()), "--out", "x"])
    assert exit_.value.code == 2 and "expected a UUID" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "--workspace", str(uuid.uuid4()), "--user", "a", "--definition", "[1]", "--out", "x"])


def test_demo_never_changes_an_existing_workspace_user_or_membership(server, tmp_path, capsys):
    from datetime import UTC, datetime

    from timekeeper.db.connection import connect
    from timekeeper.local.stack import prepare_database
    from timekeeper.platform.directory import add_member, create_workspace, member_with_user, upsert_user

    # Given alice, an analyst with a name, an e-mail address and three roles in her workspace
    workspace = uuid.uuid4()
    url = prepare_database(server, reset=False)
    now = datetime(2026, 1, 5, tzinfo=UTC)
    with connect(url) as conn, conn.transaction():
        create_workspace(conn, name="Alice's club", timezone="America/Chicago", currency="USD",
                         workspace_id=workspace, now=now)
        upsert_user(conn, user_id="alice", display_name="Alice Liddell", email="alice@example.test", now=now)
        add_member(conn, workspace_id=workspace, user_id="alice", now=now,
                   roles=["queries:read", "queries:write", "reports:write"])
    with connect(url) as conn:
        before = member_with_user(conn, workspace_id=workspace, user_id="alice")
        workspace_before = conn.execute("SELECT * FROM workspaces WHERE id = %s", (workspace,)).fetchone()
    # When the demo export runs for her
    code = main(["export", "--workspace", str(workspace), "--user", "alice", "--demo", "--definition", DEFINITION,
                 "--out", str(tmp_path / "paid.csv"), "--database", server])
    assert code == 0, capsys.readouterr().err
    # Then her user, her membership and her workspace are exactly as they were
    with connect(url) as conn:
        assert member_with_user(conn, workspace_id=workspace, user_id="alice") == before
        assert conn.execute("SELECT * FROM workspaces WHERE id = %s", (workspace,)).fetchone() == workspace_before


def test_demo_creates_the_user_and_membership_only_when_missing(server, tmp_path, capsys):
    from timekeeper.db.connection import connect
    from timekeeper.local.stack import prepare_database
    from timekeeper.platform.directory import member_with_user

    # Given a workspace nobody has used yet
    workspace = uuid.uuid4()
    # When the demo export runs for a new user
    code = main(["export", "--workspace", str(workspace), "--user", "dora", "--demo", "--definition", DEFINITION,
                 "--out", str(tmp_path / "paid.csv"), "--database", server])
    # Then the workspace, the user and a queries:read membership were made for it
    assert code == 0, capsys.readouterr().err
    with connect(prepare_database(server, reset=False)) as conn:
        user, membership = member_with_user(conn, workspace_id=workspace, user_id="dora")
    assert user is not None and user.status == "active"
    assert membership is not None and membership.roles == ["queries:read"] and membership.left_at is None


def test_psql_on_a_database_the_server_does_not_have_says_which_it_has(pg_server_url, monkeypatch, capsys):
    # Given the local server (here: the test server, as DATABASE_URL)
    monkeypatch.setenv("DATABASE_URL", pg_server_url)
    # When psql is asked for a database it does not hold
    code = main(["psql", "--database", "tk_no_such_database"])
    # Then one line says so and names the databases it has, and psql is not started
    err = capsys.readouterr().err
    assert code == 1 and "no database tk_no_such_database" in err and "postgres" in err, err


def test_psql_passes_its_arguments_on_to_psql(pg_server_url, monkeypatch, capfd):
    # Given the local server (the test server, as DATABASE_URL)
    monkeypatch.setenv("DATABASE_URL", pg_server_url)
    # When psql is given a command after --
    code = main(["psql", "--database", "postgres", "--", "-At", "-c", "SELECT 40 + 2"])
    # Then psql runs it and exits 0
    assert code == 0
    assert capfd.readouterr().out.strip() == "42"
