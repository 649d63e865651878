"""Database access: connections, named SQL, rows into dataclasses (:mod:`timekeeper.db.rows`)
and migrations.

Everything here is plain psycopg 3 with bound parameters. Instants are ``timestamptz``
and every value crossing this package boundary is an aware UTC ``datetime``.
"""

from timekeeper.db.connection import connect, set_tenant
from timekeeper.db.sql import load_queries

__all__ = ["connect", "load_queries", "set_tenant"]
