"""Shared fixtures: one PostgreSQL server per test session (embedded unless DATABASE_URL),
a fresh migrated database per test module, moto for AWS, and event factories."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime

import psycopg
import pytest

from timekeeper.db.connection import connect
from timekeeper.db.migrate import apply_migrations
from timekeeper.local import embedded


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory) -> str:
    """URL of the server every test module creates its database on."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    # One data directory shared by all xdist workers of this session.
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return embedded.server_url(root / "pgdata")


@pytest.fixture(scope="module")
def db_url(pg_server_url, request) -> str:
    """A freshly migrated database for this test module (the schema reset per module)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    digest = hashlib.sha1(request.module.__name__.encode()).hexdigest()[:10]
    name = f"tk_{worker}_{digest}"
    url = embedded.create_database(pg_server_url, name)
    with psycopg.connect(url) as conn:
        apply_migrations(conn)
    yield url
    embedded.drop_database(pg_server_url, name)


@pytest.fixture
def conn(db_url):
    """A dict-row connection to the module's database, closed after the test."""
    c = connect(db_url)
    yield c
    c.close()


@pytest.fixture
def utc():
    """Build an aware UTC datetime: ``utc(2027, 3, 14, 7, 30)``."""
    return lambda *parts: datetime(*parts, tzinfo=UTC)
