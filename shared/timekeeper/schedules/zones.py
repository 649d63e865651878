"""Which time zone names a rule, a workspace or a ledger may name: the one zone rule.

The canonical set is the IANA time zone database as the pinned ``tzdata`` package ships it
(its ``zones`` list: every zone and link name, such as ``Europe/Berlin``, ``UTC`` and
``US/Eastern``), minus ``Factory`` (a placeholder zone whose abbreviation says "local time
zone must be set"). The host's files are not consulted, so the answer is the same on a
laptop and in Lambda, and names that only a host's zoneinfo directory holds are refused:
``localtime`` (the host's own zone), ``posixrules``, and the ``right/`` (leap-second) and
``posix/`` copies of the database.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

#: Names in the database that are not zones a person lives in.
NOT_GEOGRAPHIC = frozenset({"Factory"})


@cache
def canonical_zones() -> frozenset[str]:
    """Every zone name a schedule or workspace may use (see the module docstring)."""
    names = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8").split()
    return frozenset(names) - NOT_GEOGRAPHIC


def is_canonical_zone(name: object) -> bool:
    """Whether ``name`` is exactly one of :func:`canonical_zones` (case and spaces count)."""
    return isinstance(name, str) and name in canonical_zones()
