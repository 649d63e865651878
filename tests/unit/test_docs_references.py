"""The design pages name the code they describe: every dotted name of the package they
write in backticks (``timekeeper.reporting.exports``, ``reporting.writers.write_file``)
is a module or an attribute that exists, so a page cannot keep sending a reader to a
module that moved.

Checked: names that start with ``timekeeper.``, and names of three or more parts whose
first part is one of the package's subpackages (or ``queries``, the delivery pipeline's
name, which is not a package). Two-part names are not checked: ``schedules.owner_user_id``
is a table's column. ``decisions.md`` is a record of what was decided when and may name a
module as it was then; it is left out.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import timekeeper

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
SUBPACKAGES = {m.name for m in pkgutil.iter_modules(timekeeper.__path__)} | {"queries"}
NAME = re.compile(r"`((?:[a-z_]+)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?(?=[`:\s(])")
#: Dotted names the pages write that are not code (an OAuth scope of Cognito's).
NOT_CODE = {"aws.cognito.signin.user.admin"}
FILE_SUFFIXES = {"md", "py", "sql", "json", "txt", "html", "csv", "xlsx", "pdf", "js", "css", "yml", "yaml", "ini",
                 "toml"}


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attribute in parts[i:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return False
        return True
    return False


def _checked_names(page: Path) -> list[str]:
    found = []
    for match in NAME.finditer(page.read_text(encoding="utf-8")):
        name = match.group(1)
        parts = name.split(".")
        if parts[-1] in FILE_SUFFIXES or name in NOT_CODE:
            continue
        if parts[0] == "timekeeper":
            found.append(name)
        elif parts[0] in SUBPACKAGES and len(parts) >= 3:
            found.append(f"timekeeper.{name}")
    return found


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "decisions.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_a_page_names_exists(page):
    # Given a design page, when each dotted package name it writes is imported,
    # then every one is a module or an attribute of one
    missing = sorted({name for name in _checked_names(page) if not _resolves(name)})
    assert not missing, f"{page.relative_to(ROOT)} names code that does not exist: {missing}"
