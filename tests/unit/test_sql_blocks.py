"""The SQL style holds: every named block is run by its module, and rows reach callers
through timekeeper.db.rows.

Given the product's ``.sql`` files beside their modules (migrations aside), when each
block name is looked up in the Python of its package, then it is found (a block nobody
runs is dead code); and no product module builds rows with psycopg's ``class_row``.
"""

from __future__ import annotations

import re
from pathlib import Path

from timekeeper.db import load_queries

PACKAGE = Path(__file__).resolve().parents[2] / "shared" / "timekeeper"


def _sql_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.sql") if "migrations" not in p.parts)


def test_every_named_block_is_run_by_its_package():
    unused = []
    for path in _sql_files():
        package = ".".join(("timekeeper", *path.parent.relative_to(PACKAGE).parts))
        source = "\n".join(p.read_text(encoding="utf-8") for p in path.parent.glob("*.py"))
        for name in load_queries(package, path.name):
            if not re.search(rf"""["']{name}["']""", source):
                unused.append(f"{path.relative_to(PACKAGE)}: {name}")
    assert unused == []


def test_rows_are_built_by_the_rows_helper_only():
    users = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if "class_row" in p.read_text(encoding="utf-8") and p.name != "rows.py"]
    assert users == []
