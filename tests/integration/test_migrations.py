"""The migrations apply to an empty database, are recorded, and re-applying is a no-op."""

import psycopg

from timekeeper.db.migrate import apply_migrations, available_migrations
from timekeeper.local import embedded


def test_migrations_apply_once_and_record_each_file(pg_server_url):
    # Given an empty database
    url = embedded.create_database(pg_server_url, "tk_migrations_empty")
    try:
        with psycopg.connect(url) as conn:
            # When the migrations are applied twice
            first = apply_migrations(conn)
            second = apply_migrations(conn)
            # Then every file ran once, in order, and the second call applied nothing
            expected = [f"{m.version:04d}_{m.name}" for m in available_migrations()]
            assert first == expected
            assert second == []
            tables = {r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()}
            assert {"schedules", "schedule_runs", "schedule_events", "schema_migrations"} <= tables
            recorded = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
            assert recorded == len(expected)
    finally:
        embedded.drop_database(pg_server_url, "tk_migrations_empty")
