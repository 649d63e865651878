"""The Platform data generator on real PostgreSQL: the same seed gives byte-identical
tables in two databases (ids included), another seed other data; loading twice changes
nothing; the data keeps its invariants (payments against invoice statuses, void dates,
membership dates); benchmark volumes land in one workspace only."""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from timekeeper.db.connection import WORKER_LOGIN, connect, login_url
from timekeeper.db.migrate import apply_migrations
from timekeeper.local import embedded
from timekeeper.local.platform_data import PERSONAS, SPAN_DAYS, WORKSPACES, load_sample, load_volume
from timekeeper.platform.directory import create_workspace

NOW = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
TABLES = ("workspaces", "users", "workspace_memberships", "membership_types", "members", "memberships",
          "invoices", "payments")


def digests(conn, where: str = "true") -> dict[str, str]:
    """md5 of each Platform table's rows as text, in text order (``where`` filters rows)."""
    return {t: conn.execute(f"SELECT md5(coalesce(string_agg(x, E'\\n' ORDER BY x), '')) AS d, count(*) AS n "
                            f"FROM (SELECT r::text AS x FROM {t} r WHERE {where}) s").fetchone()["d"]
            for t in TABLES}


@pytest.fixture(scope="module")
def other_database(pg_server_url):
    """A second freshly migrated database on the same server (a URL factory by suffix)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    made = []

    def make(suffix: str) -> str:
        name = f"tk_{worker}_platform_gen_{suffix}"
        url = embedded.create_database(pg_server_url, name)
        made.append(name)
        with psycopg.connect(url) as conn:
            apply_migrations(conn)
        return url

    yield make
    for name in made:
        embedded.drop_database(pg_server_url, name)


@pytest.fixture(scope="module")
def sample(db_url):
    with connect(db_url) as conn:
        return load_sample(conn, seed=7, now=NOW)


def test_the_same_seed_gives_identical_tables_in_two_databases_and_another_seed_other_data(
        db_url, sample, other_database):
    twin, other = other_database("twin"), other_database("other")
    with connect(twin) as conn:
        twin_sample = load_sample(conn, seed=7, now=NOW)
        twin_digests = digests(conn)
    with connect(other) as conn:
        load_sample(conn, seed=8, now=NOW)
        other_digests = digests(conn)
    with connect(db_url) as conn:
        here = digests(conn)  # before the volume tests below
    assert twin_sample == sample
    assert twin_digests == here
    assert all(other_digests[t] != here[t] for t in TABLES)


def test_loading_again_changes_nothing_even_with_another_now(db_url, sample):
    with connect(db_url) as conn:
        before = digests(conn)
        again = load_sample(conn, seed=7, now=NOW)
        later = load_sample(conn, seed=7, now=NOW + timedelta(days=40))
        after = digests(conn)
    assert before == after
    assert again == sample and later.counts == sample.counts and later.workspaces == sample.workspaces


def test_the_sample_covers_zones_statuses_flags_and_personas(conn, sample):
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM workspaces WHERE id = ANY(%s)",
                                             (list(sample.workspaces.values()),)).fetchall()}
    by_key = {key: rows[i] for key, i in sample.workspaces.items()}
    assert len({w["timezone"] for w in by_key.values()}) == len(WORKSPACES) >= 3
    assert {w["status"] for w in by_key.values()} == {"active", "loading", "disabled"}
    assert by_key["new_york"]["status"] == "loading" and by_key["sydney"]["snapshots_enabled"] is False
    assert (by_key["berlin"]["currency"], by_key["new_york"]["currency"], by_key["sydney"]["currency"]) == \
        ("EUR", "USD", "AUD")
    users = {r["id"]: r for r in conn.execute("SELECT * FROM users WHERE id = ANY(%s)",
                                              (list(sample.users.values()),)).fetchall()}
    assert len(users) == len(PERSONAS)
    assert users[sample.users["no_email"]]["email"] is None
    assert users[sample.users["deactivated"]]["status"] == "deactivated"
    memberships = conn.execute(
        "SELECT user_id, workspace_id, roles, left_at FROM workspace_memberships WHERE user_id = ANY(%s)",
        (list(sample.users.values()),)).fetchall()
    of = {(m["user_id"], m["workspace_id"]): m for m in memberships}
    berlin = sample.workspaces["berlin"]
    assert of[(sample.users["left"], berlin)]["left_at"] is not None
    assert of[(sample.users["analyst"], berlin)]["roles"] == ["queries:write", "reports:write"]
    assert of[(sample.users["viewer"], berlin)]["roles"] == ["queries:read", "reports:read"]
    assert of[(sample.users["admin"], berlin)]["roles"] == ["workspace:admin"]
    assert {w for (u, w) in of if u == sample.users["multi"]} == {berlin, sample.workspaces["new_york"]}
    assert not [m for m in memberships if m["user_id"] == sample.users["outsider"]]
    counts = {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in TABLES}
    assert counts["members"] == sample.counts["members"] >= 300
    assert counts["invoices"] == sample.counts["invoices"] >= 2000
    assert counts["payments"] == sample.counts["payments"] > 0


def test_every_status_occurs_and_dates_span_about_three_years(conn, sample):
    statuses = {(r["t"], r["status"]) for r in conn.execute(
        "SELECT 'membership' AS t, status FROM memberships UNION SELECT 'invoice', status FROM invoices").fetchall()}
    assert statuses == {("membership", s) for s in ("pending", "active", "lapsed", "cancelled")} | \
        {("invoice", s) for s in ("draft", "open", "paid", "void")}
    span = conn.execute("SELECT (SELECT min(start_date) FROM memberships) AS first, "
                        "(SELECT max(issue_date) FROM invoices) AS last").fetchone()
    assert (span["last"] - span["first"]).days > 2.5 * 365
    assert span["first"] >= (NOW - timedelta(days=SPAN_DAYS + 1)).date()
    partial = conn.execute(
        """SELECT count(*) AS n FROM invoices i WHERE status = 'open'
              AND EXISTS (SELECT FROM payments p WHERE p.workspace_id = i.workspace_id AND p.invoice_id = i.id)"""
    ).fetchone()["n"]
    assert partial > 0


#: Each query returns the rows that break one invariant (so each must return none).
INVARIANTS = {
    "a paid invoice's payments sum to its amount": """
        SELECT i.id FROM invoices i LEFT JOIN payments p ON p.workspace_id = i.workspace_id AND p.invoice_id = i.id
         WHERE i.status = 'paid' GROUP BY i.id, i.amount_minor HAVING coalesce(sum(p.amount_minor), 0) <> i.amount_minor
    """,
    "an open invoice is paid less than its amount": """
        SELECT i.id FROM invoices i JOIN payments p ON p.workspace_id = i.workspace_id AND p.invoice_id = i.id
         WHERE i.status = 'open' GROUP BY i.id, i.amount_minor HAVING sum(p.amount_minor) >= i.amount_minor
    """,
    "draft and void invoices have no payments": """
        SELECT i.id FROM invoices i JOIN payments p ON p.workspace_id = i.workspace_id AND p.invoice_id = i.id
         WHERE i.status IN ('draft', 'void')
    """,
    "void invoices are voided on or after issue, others not": """
        SELECT id FROM invoices WHERE (status = 'void') <> (voided_on IS NOT NULL) OR voided_on < issue_date
    """,
    "payments are in the invoice's currency, received after issue and not after the last day": """
        SELECT p.id FROM payments p JOIN invoices i ON i.workspace_id = p.workspace_id AND i.id = p.invoice_id
          JOIN workspaces w ON w.id = p.workspace_id
         WHERE p.received_on < i.issue_date OR p.currency <> i.currency OR i.currency <> w.currency
            OR p.received_on > (%(now)s AT TIME ZONE w.timezone)::date
    """,
    "membership statuses agree with their dates on the last day": """
        SELECT m.id FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
          CROSS JOIN LATERAL (SELECT (%(now)s AT TIME ZONE w.timezone)::date AS today) d
         WHERE NOT CASE m.status
                   WHEN 'pending' THEN m.start_date > d.today AND m.cancelled_on IS NULL
                   WHEN 'active' THEN m.start_date <= d.today AND (m.end_date IS NULL OR m.end_date >= d.today)
                   WHEN 'lapsed' THEN m.end_date < d.today AND m.cancelled_on IS NULL
                   WHEN 'cancelled' THEN m.cancelled_on BETWEEN m.start_date AND d.today
                                         AND m.end_date = m.cancelled_on END
    """,
    "memberships start on or after the member joined, one type of the same workspace": """
        SELECT m.id FROM memberships m JOIN members b ON b.workspace_id = m.workspace_id AND b.id = m.member_id
          JOIN membership_types t ON t.workspace_id = m.workspace_id AND t.id = m.membership_type_id
         WHERE m.start_date < b.joined_on
    """,
    "a member's later membership starts after the earlier one ended": """
        SELECT a.id FROM memberships a JOIN memberships b
            ON b.workspace_id = a.workspace_id AND b.member_id = a.member_id AND b.start_date > a.start_date
         WHERE a.end_date IS NULL OR b.start_date <= a.end_date
    """,
    "invoice amounts are positive": """
        SELECT id FROM invoices WHERE amount_minor <= 0
    """,
}


@pytest.mark.parametrize("name", INVARIANTS)
def test_sample_invariant(conn, sample, name):
    assert conn.execute(INVARIANTS[name], {"now": NOW}).fetchall() == []


def test_volume_fills_one_workspace_only_and_keeps_the_invariants(db_url, sample):
    sydney = sample.workspaces["sydney"]
    with connect(db_url) as conn:
        others_before = digests(conn, f"r::text NOT LIKE '%{sydney}%'")
        count_before = conn.execute("SELECT count(*) AS n FROM invoices WHERE workspace_id = %s",
                                    (sydney,)).fetchone()["n"]
        loaded = load_volume(conn, workspace_id=sydney, invoices=5000)
        again = load_volume(conn, workspace_id=sydney, invoices=5000)
        others_after = digests(conn, f"r::text NOT LIKE '%{sydney}%'")
        rows = conn.execute(
            """SELECT count(*) AS n, count(DISTINCT member_id) AS members, min(issue_date) AS first,
                      max(issue_date) AS last, count(DISTINCT currency) AS currencies
                 FROM invoices WHERE workspace_id = %s AND number LIKE 'V11-%%'""", (sydney,)).fetchone()
        total = conn.execute("SELECT count(*) AS n FROM invoices WHERE workspace_id = %s", (sydney,)).fetchone()["n"]
        broken = {name: conn.execute(q, {"now": NOW}).fetchall() for name, q in INVARIANTS.items()}
        settings = conn.execute("SELECT current_setting('session_replication_role') AS role, "
                                "current_setting('statement_timeout') AS timeout").fetchone()
    assert (loaded, again) == (5000, 0)
    assert total - count_before == rows["n"] == 5000 and rows["members"] > 400 and rows["currencies"] == 1
    assert rows["last"] == NOW.date() and (rows["last"] - rows["first"]).days == SPAN_DAYS - 1
    assert others_after == others_before
    assert broken == {name: [] for name in INVARIANTS}
    assert settings["role"] == "origin"


def test_volume_is_deterministic_across_databases(db_url, sample, other_database):
    twin = other_database("volume")
    with connect(twin) as conn:
        load_sample(conn, seed=7, now=NOW)
    tokyo = sample.workspaces["tokyo"]
    found = {}
    for url in (db_url, twin):
        with connect(url) as conn:
            with conn.transaction():  # inside the caller's transaction: its settings come back
                assert load_volume(conn, workspace_id=tokyo, invoices=700, seed=3, members=40) == 700
                role = conn.execute("SELECT current_setting('session_replication_role') AS r").fetchone()["r"]
            found[url] = digests(conn, f"r::text LIKE '%{tokyo}%'")
    assert found[db_url] == found[twin] and role == "origin"
    assert found[db_url]["invoices"] != hashlib.md5(b"").hexdigest()  # the volume is there


def test_volume_needs_a_login_row_level_security_does_not_apply_to(db_url, sample):
    # COPY FROM refuses tables whose policies apply to the login (the workers', the API's)
    with connect(login_url(db_url, WORKER_LOGIN)) as conn:
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="row-level security"):
            load_volume(conn, workspace_id=sample.workspaces["tokyo"], invoices=10, seed=99)
        assert conn.execute("SELECT count(*) AS n FROM members WHERE member_number LIKE 'V99-%%'").fetchone()["n"] == 0


def test_volume_refuses_an_unknown_workspace_and_bad_counts(conn):
    with pytest.raises(LookupError):
        load_volume(conn, workspace_id=uuid.uuid4(), invoices=10)
    with pytest.raises(ValueError):
        load_volume(conn, workspace_id=uuid.uuid4(), invoices=-1)


def test_volume_into_a_fresh_workspace_ends_where_the_workspace_was_created_plus_the_span(conn):
    with conn.transaction():
        ws = create_workspace(conn, name="Bench", timezone="Europe/Berlin", currency="EUR", now=NOW).id
    assert load_volume(conn, workspace_id=ws, invoices=300, seed=5) == 300
    span = conn.execute("SELECT min(issue_date) AS first, max(issue_date) AS last, count(*) AS n FROM invoices "
                        "WHERE workspace_id = %s", (ws,)).fetchone()
    end = (NOW + timedelta(days=SPAN_DAYS)).date()
    assert span["n"] == 300 and span["first"] == end - timedelta(days=SPAN_DAYS - 1)
    assert end - timedelta(days=5) <= span["last"] <= end


def test_the_platform_data_command_loads_the_sample_and_volume_once(other_database, capsys):
    from timekeeper.local.cli import main

    url = other_database("cli")
    assert main(["platform-data", "--database-url", url, "--invoices", "200"]) == 0
    first = capsys.readouterr().out
    assert main(["platform-data", "--database-url", url, "--invoices", "200"]) == 0
    second = capsys.readouterr().out
    with connect(url) as conn:
        counts = conn.execute("SELECT (SELECT count(*) FROM workspaces) AS w, (SELECT count(*) FROM invoices) AS i"
                              ).fetchone()
        sample = load_sample(conn, now=NOW)  # inserts nothing: describes what is there
    assert "volume: 200 invoices" in first and "(already there)" in second and "workspace berlin:" in first
    assert counts["w"] == len(WORKSPACES) and counts["i"] == sample.counts["invoices"] + 200


def test_the_platform_data_command_refuses_a_bad_count(capsys):
    from timekeeper.local.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["platform-data", "--invoices", "-5"])
    assert exit_.value.code == 2 and "--invoices" in capsys.readouterr().err
