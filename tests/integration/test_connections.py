"""How production connects: through a pooler that, like RDS Proxy, refuses connection
startup options; as the workers' and the API's own login roles, whose timeouts are role
settings; the API walled by row-level security as a login, not by a session SET ROLE."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.support import scheduled_event, sqs_event
from timekeeper import clock, edge
from timekeeper.api.db import API_ROLE, UnwalledLogin, connect_api
from timekeeper.db.connection import (
    LOGIN_ROLES,
    WORKER_LOGIN,
    ConnectionProvider,
    connect,
    login_url,
    set_login_password,
)
from timekeeper.edge import adapters
from timekeeper.edge import api as api_edge
from timekeeper.local import embedded
from timekeeper.local.aws import create_pipeline_queues
from timekeeper.local.lambdas import invoke
from timekeeper.schedules import service
from timekeeper.topology import ACCOUNTING, API_STATEMENT_TIMEOUT_S, WORKER_STATEMENT_TIMEOUT_S

NOW = datetime(2027, 1, 4, 10, 0, tzinfo=UTC)


@pytest.fixture
def pooled_db_url(db_url, pooled_server_url) -> str:
    """The module's database, reached through the PgBouncer that refuses startup options."""
    return embedded.with_database(pooled_server_url, psycopg.conninfo.conninfo_to_dict(db_url)["dbname"])


@pytest.fixture
def clean(conn):
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    return conn


@pytest.fixture
def aws_env(monkeypatch):
    """moto with the accounting queues and topic; the edge reads the environment afresh."""
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "Timekeeper"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sqs = boto3.client("sqs")
        pair = create_pipeline_queues(sqs, ACCOUNTING)
        monkeypatch.setenv("RUN_QUEUE_URL_ACCOUNTING", pair.url)
        edge.reset()
        api_edge.reset()
        yield {"sqs": sqs, "queue": pair}
        edge.reset()
        api_edge.reset()
        clock.install(None)


def test_the_pooler_refuses_startup_options_as_rds_proxy_does(pooled_db_url):
    # Given the pooler in front of the server
    # When a client sends a statement timeout as a startup option (what connect() used to do)
    # ("unsupported startup parameter: options" before PgBouncer 1.20; since then it parses
    # options and refuses every parameter it does not track, statement_timeout included)
    with pytest.raises(psycopg.OperationalError, match="unsupported (options )?startup parameter"):
        psycopg.connect(pooled_db_url, options="-c statement_timeout=30000").close()
    # Then it is refused, while the options-free connection the code opens is accepted
    with connect(pooled_db_url) as conn:
        assert conn.execute("SELECT 1 AS one").fetchone()["one"] == 1


def test_the_edge_connections_open_through_the_pooler(pooled_db_url, aws_env, monkeypatch):
    # Given the Lambda edge pointed at the database through the pooler
    monkeypatch.setenv("DATABASE_URL", pooled_db_url)
    edge.reset()
    # When the workers' and the API's connections are opened
    worker = adapters.database().get()
    api = api_edge.api_database().get()
    # Then both are usable, each as its own login, with its role's statement timeout
    assert worker.execute("SELECT 1 AS one").fetchone()["one"] == 1
    row = api.execute("SELECT current_user AS u, current_setting('statement_timeout') AS t").fetchone()
    assert row == {"u": API_ROLE, "t": f"{API_STATEMENT_TIMEOUT_S}s"}


def test_each_login_role_carries_its_timeouts_from_the_topology(pooled_db_url):
    # Given the migrated database
    expected = {WORKER_LOGIN: WORKER_STATEMENT_TIMEOUT_S, f"{WORKER_LOGIN}_clone": WORKER_STATEMENT_TIMEOUT_S,
                API_ROLE: API_STATEMENT_TIMEOUT_S, f"{API_ROLE}_clone": API_STATEMENT_TIMEOUT_S}
    assert set(expected) == set(LOGIN_ROLES)
    for login, seconds in expected.items():
        # When each login connects through the pooler (no startup options)
        with connect(login_url(pooled_db_url, login)) as conn:
            row = conn.execute("SELECT current_setting('statement_timeout') AS st, "
                               "current_setting('idle_in_transaction_session_timeout') AS idle").fetchone()
        # Then its statement timeout is the topology's, and an abandoned transaction ends
        assert row["st"] == f"{seconds}s", login
        assert row["idle"] != "0", login


def test_the_worker_login_dispatches_and_consumes_every_workspace_but_changes_no_schema(
        pooled_db_url, clean, aws_env, monkeypatch):
    # Given due schedules in two workspaces, and the handlers logged in as the workers' role
    for _ in range(2):
        service.create_schedule(clean, workspace_id=uuid.uuid4(), owner="accounting",
                                work_kind="reconciliation.sweep", recurrence={"cron": "0 * * * *", "timezone": "UTC"},
                                actor="t", now=NOW - timedelta(minutes=30))
    monkeypatch.setenv("DATABASE_URL", login_url(pooled_db_url, WORKER_LOGIN))
    edge.reset()
    clock.install(lambda: NOW)
    # When the dispatcher and the consumer run
    dispatched = invoke("accounting_dispatcher", scheduled_event(NOW))
    messages = aws_env["sqs"].receive_message(QueueUrl=aws_env["queue"].url, MaxNumberOfMessages=10)["Messages"]
    consumed = invoke("accounting_consumer", sqs_event(*[m["Body"] for m in messages]))
    # Then both workspaces' runs were claimed and settled
    assert dispatched["claimed"] == 2 and consumed == {"batchItemFailures": []}
    states = [r["state"] for r in clean.execute("SELECT state FROM schedule_runs").fetchall()]
    assert len(states) == 2 and "queued" not in states and "running" not in states
    # And the workers' login may not change the schema or read the migration records
    worker = adapters.database().get()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        worker.execute("CREATE TABLE intruder (id int)")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        worker.execute("SELECT * FROM schema_migrations")


def test_the_api_login_is_walled_even_after_reset_role(pooled_db_url, clean):
    # Given a schedule in some workspace
    service.create_schedule(clean, workspace_id=uuid.uuid4(), owner="accounting", work_kind="reconciliation.sweep",
                            recurrence={"cron": "0 * * * *", "timezone": "UTC"}, actor="t", now=NOW)
    # When the API's login resets its role (what a session SET ROLE wall could not survive)
    with connect_api(login_url(pooled_db_url, API_ROLE)) as api:
        api.execute("RESET ROLE")
        row = api.execute("SELECT current_user AS u, count(*) AS n FROM schedules").fetchone()
    # Then it is still the walled login and sees no row outside a workspace
    assert row == {"u": API_ROLE, "n": 0}


def test_the_api_refuses_a_login_row_level_security_does_not_wall(pooled_db_url):
    # Given the owner's (superuser's) URL, which RLS does not wall
    # When the API is given it
    # Then it refuses to serve on it
    with pytest.raises(UnwalledLogin):
        connect_api(pooled_db_url)
    with pytest.raises(UnwalledLogin):
        connect_api(login_url(pooled_db_url, WORKER_LOGIN))


def test_provision_logins_sets_each_login_password_from_its_secret(conn, monkeypatch, aws_env):
    # Given the workers' and the API's secrets as the deployment creates them
    secrets = boto3.client("secretsmanager")
    arns = [secrets.create_secret(Name=f"tk-{login}", SecretString=(
        f'{{"username": "{login}", "password": "pw-{uuid.uuid4().hex}"}}'))["ARN"]
        for login in (WORKER_LOGIN, API_ROLE)]
    monkeypatch.setenv("DB_SECRET_ARN", "arn:owner")
    monkeypatch.setenv("DB_HOST", "proxy.example")
    monkeypatch.setenv("LOGIN_SECRET_ARNS", ",".join(arns))
    edge.reset()
    conn.execute("ALTER ROLE timekeeper_worker PASSWORD NULL")
    conn.execute("ALTER ROLE timekeeper_api PASSWORD NULL")
    # When the migration function provisions the logins
    done = adapters.provision_logins(conn)
    # Then each login has a password (the secret's), and nothing else was touched
    assert done == [WORKER_LOGIN, API_ROLE]
    rows = conn.execute("SELECT rolname, rolpassword IS NOT NULL AS has FROM pg_authid "
                        "WHERE rolname = ANY(%s)", ([WORKER_LOGIN, API_ROLE],)).fetchall()
    assert {r["rolname"]: r["has"] for r in rows} == {WORKER_LOGIN: True, API_ROLE: True}
    with pytest.raises(ValueError, match="not a Timekeeper login"):
        set_login_password(conn, "postgres", "x")


def test_a_connection_idle_past_the_bound_is_reopened_before_use(db_url):
    # Given a provider whose connection has been idle longer than its bound
    now = {"t": 0.0}
    opened: list[psycopg.Connection] = []

    def factory() -> psycopg.Connection:
        opened.append(connect(db_url))
        return opened[-1]

    provider = ConnectionProvider(factory, max_idle_s=450, monotonic=lambda: now["t"])
    first = provider.get()
    now["t"] = 300
    assert provider.get() is first  # used within the bound: kept
    now["t"] = 300 + 451
    # When it is asked for again
    second = provider.get()
    # Then a fresh connection replaces it (a proxy would have closed the old one)
    assert second is not first and first.closed and len(opened) == 2
    provider.close()


def test_every_table_is_open_to_the_workers_and_every_walled_table_lets_them_through(conn):
    # A later migration that adds a table gets the workers' grants by default; one that
    # enables row-level security must do it with timekeeper_enable_tenant_rls(...)
    rows = conn.execute("""
        SELECT c.relname, c.relrowsecurity,
               has_table_privilege(%(login)s, c.oid, 'SELECT, INSERT, UPDATE, DELETE') AS granted,
               EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'worker_access') AS passes
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()""", {"login": WORKER_LOGIN}).fetchall()
    assert rows
    assert [r["relname"] for r in rows if r["granted"] != (r["relname"] != "schema_migrations")] == []
    assert [r["relname"] for r in rows if r["relrowsecurity"] and not r["passes"]] == []
