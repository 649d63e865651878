"""Keyset pagination, shared by every listing that pages by ``(instant, id)``.

A page is read with one statement ordered by a two-column key (an instant and a uuid,
e.g. ``(created_at, id)``): rows strictly after the previous page's last key, at most
``limit + 1`` of them, so the extra row tells whether another page follows without a
count. The key of the page's last row is the next page's ``after``; the API turns it
into an opaque cursor (:func:`timekeeper.api.models.encode_cursor`). Unlike an offset,
a keyset neither skips nor repeats rows when others are inserted or deleted between
pages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import psycopg

from timekeeper.db.rows import fetch_all

#: The key of a row in a listing: ``(instant, id)``.
Keyset = tuple[datetime, UUID]

T = TypeVar("T")


def keyset_rows(conn: psycopg.Connection, row_type: type[T], *, select: str, where: str, params: Mapping[str, Any],
                after: Keyset | None, limit: int, key: tuple[str, str] = ("created_at", "id"),
                newest_first: bool = False) -> list[T]:
    """At most ``limit`` (>= 1) rows of ``SELECT <select> WHERE <where>`` after the keyset
    ``after`` (None: from the start), ordered by ``key`` (two column expressions, oldest
    first or ``newest_first``), as ``row_type`` instances.

    ``select`` holds the columns and the FROM clause, ``where`` the listing's own
    condition; both are the caller's constant SQL (two named blocks of its ``.sql`` file,
    ``<listing>_from`` and ``<listing>_where``), and every value is a bound parameter
    of ``params`` (the names ``after_at``, ``after_id`` and ``limit`` are this function's).
    Raises ``ValueError`` for a ``limit`` below 1.
    """
    if limit < 1:
        raise ValueError("limit must be >= 1")
    at, id_ = key
    direction, comparison = ("DESC", "<") if newest_first else ("ASC", ">")
    statement = (f"SELECT {select} WHERE ({where}) AND (%(after_at)s::timestamptz IS NULL "
                 f"OR ({at}, {id_}) {comparison} (%(after_at)s, %(after_id)s::uuid)) "
                 f"ORDER BY {at} {direction}, {id_} {direction} LIMIT %(limit)s")
    return fetch_all(conn, statement, {**params, "after_at": after[0] if after else None,
                                       "after_id": after[1] if after else None, "limit": limit}, row_type)


def split_page(rows: list[T], limit: int, key_of: Callable[[T], Keyset]) -> tuple[list[T], Keyset | None]:
    """``rows`` read with ``limit + 1`` -> the page (at most ``limit`` rows) and the keyset
    of its last row when another page follows (None on the last page)."""
    page = rows[:limit]
    return page, (key_of(page[-1]) if len(rows) > limit and page else None)


__all__ = ["Keyset", "keyset_rows", "split_page"]
