"""The timezones a rule may name: the canonical IANA zone names, one list for the whole
product.

A name is canonical when the pinned ``tzdata`` package lists it as a zone (its ``zones``
file: every ``Area/Location`` and the backward-compatible links such as ``US/Eastern``
and ``UTC``), less the names that are no place: ``Factory`` (a placeholder zone), and
never ``localtime`` (the host's zone), ``posixrules`` or the ``posix/`` and ``right/``
copies (``right/`` counts leap seconds) that a host's zoneinfo folder may add. The list
comes from the package, not the host, so the OpenAPI document's enum is the same on
every machine and in Lambda, and it changes only when the ``tzdata`` pin does.

:func:`canonical_zones` is the single source: the document's zone enum and the rule
parser's zone check both read it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

#: Names tzdata may list that name no place.
_NOT_PLACES = frozenset({"Factory", "localtime", "posixrules"})
_NOT_PLACE_PREFIXES = ("posix/", "right/")


@cache
def canonical_zones() -> frozenset[str]:
    """Every canonical IANA zone name (``"America/New_York"``, ``"UTC"``, ...), read once
    from the pinned ``tzdata`` package. Raises ``FileNotFoundError`` when ``tzdata`` is
    not installed (it is a runtime requirement)."""
    listed = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8").split()
    return frozenset(name for name in listed
                     if name not in _NOT_PLACES and not name.startswith(_NOT_PLACE_PREFIXES))


def is_canonical_zone(name: object) -> bool:
    """Whether ``name`` is a string in :func:`canonical_zones` (exact, case-sensitive)."""
    return isinstance(name, str) and name in canonical_zones()


def zone_json_schema() -> dict[str, object]:
    """The JSON schema of a zone field: a string enum of :func:`canonical_zones`, sorted."""
    return {"type": "string", "enum": sorted(canonical_zones()), "description": "a canonical IANA timezone",
            "examples": ["America/New_York", "Europe/London", "Asia/Kolkata"]}
