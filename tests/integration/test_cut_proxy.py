"""The fault campaigns' cutting proxy in front of the real database server: traffic passes
through it unchanged, a cut breaks the product's connection at its next statement while
the server rolls back what was open, and new connections pass again."""

from __future__ import annotations

import socket

import psycopg
import pytest

from timekeeper.local.cut_proxy import CuttingProxy, through, upstream_of


@pytest.fixture
def proxy(db_url):
    running = CuttingProxy(upstream_of(db_url))
    yield running
    running.close()


def test_the_upstream_of_a_socket_directory_and_of_a_tcp_host():
    assert upstream_of("host=/tmp/pg port=5433 dbname=x") == (socket.AF_UNIX, "/tmp/pg/.s.PGSQL.5433")
    assert upstream_of("postgresql://u@db.internal:6432/x") == (socket.AF_INET, ("db.internal", 6432))
    assert psycopg.conninfo.conninfo_to_dict(through("host=/tmp/pg dbname=x user=u", 4000)) == {
        "host": "127.0.0.1", "port": "4000", "dbname": "x", "user": "u"}


def test_a_cut_breaks_the_connection_at_its_next_statement_and_the_server_rolls_back(db_url, proxy):
    with psycopg.connect(db_url, autocommit=True) as direct:
        direct.execute("CREATE TABLE IF NOT EXISTS cut_probe (n int)")
        direct.execute("TRUNCATE cut_probe")
    product = psycopg.connect(through(db_url, proxy.port))
    try:
        # Given a transaction open through the proxy, with a row written
        product.execute("INSERT INTO cut_probe VALUES (1)")
        assert product.execute("SELECT count(*) FROM cut_probe").fetchone() == (1,)
        (link,) = proxy.live()
        # When its connection is cut between two statements
        assert proxy.cut(link) and not proxy.cut(link)
        # Then the next statement fails as after a network fault, and the row is gone
        with pytest.raises(psycopg.OperationalError):
            product.execute("INSERT INTO cut_probe VALUES (2)")
    finally:
        product.close()
    with psycopg.connect(db_url, autocommit=True) as direct:
        assert direct.execute("SELECT count(*) FROM cut_probe").fetchone() == (0,)
    # And a new connection through the proxy works
    with psycopg.connect(through(db_url, proxy.port), autocommit=True) as again:
        assert again.execute("SELECT 1").fetchone() == (1,)
    assert proxy.cuts == 1 and proxy.accepted == 2


def test_closing_the_proxy_cuts_every_connection_and_refuses_new_ones(db_url, proxy):
    first = psycopg.connect(through(db_url, proxy.port), autocommit=True)
    try:
        assert first.execute("SELECT 1").fetchone() == (1,)
        proxy.close()
        with pytest.raises(psycopg.OperationalError):
            first.execute("SELECT 1")
    finally:
        first.close()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(through(db_url, proxy.port), connect_timeout=5)
