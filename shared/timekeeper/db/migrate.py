"""Numbered plain-SQL migrations applied in order under an advisory lock.

Files ``NNNN_what.sql`` in ``timekeeper/db/migrations`` run once each, one transaction
each, recorded in ``schema_migrations`` with their SHA-256. A small runner rather than a
tool such as yoyo: the same ~60 lines run in the Lambda migration trigger, the local
stack and the tests with no extra dependency in the layer, and the lock makes concurrent
appliers (two test workers, two deploys) safe.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg.rows import tuple_row

#: Arbitrary but fixed key for ``pg_advisory_lock`` ("timekeeper" in ASCII, truncated).
MIGRATION_LOCK_KEY = 0x74696D656B656570

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One migration file: ``version`` (int), ``name``, ``sql`` text and its ``checksum``."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 (hex) of the file's whole text: what is recorded when it is applied."""
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def code_checksum(self) -> str:
        """SHA-256 (hex) of the text without its whole-line ``--`` comments."""
        code = "\n".join(line for line in self.sql.splitlines() if not line.lstrip().startswith("--"))
        return hashlib.sha256(code.encode()).hexdigest()

    def matches(self, recorded: str) -> bool:
        """Whether ``recorded`` (an applied migration's checksum) is this file's: its text
        now, or an earlier text listed in :data:`REWORDED` (comments changed, code not)."""
        return recorded == self.checksum or recorded in REWORDED.get(self.version, {})


#: Applied migrations whose comments were reworded after release: version -> {checksum of
#: the earlier text: code checksum that text and today's share}. A database that applied
#: the earlier text starts without a mismatch; a test checks that today's file still has
#: the listed code checksum, so only a comment can have changed.
REWORDED: dict[int, dict[str, str]] = {
    1: {"313b71daf5e6cb399de0d98d1718eeee16aef376da90922152c683719f6fb700":
        "81a9a3d51e114c08c1930e6de6a0cbbb6c998e029a943fb6f206b7de6e8a0825"},
    2: {"84c9731c500c4d651f6ba23aea1d428b258033b1be809bea717f26ccf396625f":
        "2410690e0128e9d3eedeeed89e4b57849a52c8561c70f4ed34185413281f0c87"},
    3: {"60abb0174ade00711588d68f4fe26ab6efa5b07cf277dec8aaa2155a7d1f4762":
        "e5f6c1dde484f3dccefd1d9d3d685d79abcc66b5487b346db7e49b31419c1920"},
}


class MigrationChecksumMismatch(RuntimeError):
    """An applied migration's file changed after it was applied."""


def available_migrations() -> list[Migration]:
    """Return the packaged migrations sorted by version; raises ``ValueError`` when two files
    share a version. (Versions are reserved per change, so one may be missing on a branch.)"""
    folder = resources.files("timekeeper.db").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    for previous, migration in zip(found, found[1:], strict=False):
        if migration.version == previous.version:
            raise ValueError(f"two migrations numbered {migration.version:04d}")
    return found


def apply_migrations(conn: psycopg.Connection) -> list[str]:
    """Apply every pending migration; return the names applied (``"0001_schedules"``...).

    Holds a session advisory lock for the duration so that concurrent callers serialize.
    Raises :class:`MigrationChecksumMismatch` when an applied file was edited.
    """
    applied_now: list[str] = []
    conn.rollback()
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
    conn.commit()
    try:
        conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        conn.commit()
        with conn.cursor(row_factory=tuple_row) as cur:
            done = dict(cur.execute("SELECT version, checksum FROM schema_migrations").fetchall())
        conn.commit()
        for migration in available_migrations():
            label = f"{migration.version:04d}_{migration.name}"
            if migration.version in done:
                if not migration.matches(done[migration.version]):
                    raise MigrationChecksumMismatch(f"{label} changed after it was applied")
                continue
            with conn.transaction():
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
            conn.commit()
            applied_now.append(label)
    finally:
        conn.rollback()
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
        conn.commit()
    return applied_now
