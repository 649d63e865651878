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


def test_a_database_that_applied_a_reworded_migration_starts_and_a_changed_one_is_refused(pg_server_url):
    # Given a migrated database whose record of 0001 is the checksum of its text before the
    # comments were reworded
    from timekeeper.db.migrate import REWORDED, MigrationChecksumMismatch

    url = embedded.create_database(pg_server_url, "tk_migrations_reworded")
    try:
        with psycopg.connect(url) as conn:
            apply_migrations(conn)
            (earlier,) = REWORDED[1]
            conn.execute("UPDATE schema_migrations SET checksum = %s WHERE version = 1", (earlier,))
            conn.commit()
            # When the migrations are applied again, then nothing is refused or applied
            assert apply_migrations(conn) == []
            # But a checksum of any other text is the mismatch
            conn.execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1")
            conn.commit()
            try:
                apply_migrations(conn)
            except MigrationChecksumMismatch as error:
                assert "0001_schedules" in str(error)
            else:
                raise AssertionError("an edited migration was accepted")
    finally:
        embedded.drop_database(pg_server_url, "tk_migrations_reworded")


def test_reworded_migrations_changed_only_comments():
    # The code (text without whole-line comments) of each reworded migration is the code of
    # the text databases applied
    from timekeeper.db.migrate import REWORDED

    files = {m.version: m for m in available_migrations()}
    for version, earlier in REWORDED.items():
        assert set(earlier.values()) == {files[version].code_checksum}, version
