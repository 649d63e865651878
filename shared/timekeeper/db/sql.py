"""Named SQL blocks kept in ``.sql`` files beside the code that runs them.

A file holds blocks introduced by a ``-- name: <snake_case_verb>`` line; everything up to
the next such line is that block's text. Files are read once per process and cached.

The rule: every statement the domain runs is a named block in the ``.sql`` file beside
the module that runs it, loaded once into a module-level dict called ``SQL``
(``SQL = load_queries("timekeeper.<package>", "<module>.sql")``) and read as
``SQL["block_name"]``; the local stack's statements are named blocks too. Python holds SQL
text only where a statement's shape is composed at run time from checked parts (the
saved-query compiler's ``psycopg.sql`` composition, the keyset pager's clauses, the
consumer's per-run savepoint, the sample-data bulk loader's ``COPY`` staging) and in this
package's plumbing (the tenant and query-role settings, the relaxed commit, the migration
runner's lock and bookkeeping).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@cache
def load_queries(package: str, filename: str) -> dict[str, str]:
    """Return ``{block name: SQL text}`` for ``filename`` inside ``package``.

    Raises ``ValueError`` when a name repeats or the file holds no named block.
    """
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{package}/{filename}: query {name!r} defined twice")
        queries[name] = body.strip()
    if not queries:
        raise ValueError(f"{package}/{filename}: no '-- name:' blocks")
    return queries
