"""Strict input types shared by the API's bodies and the rule schema.

A JSON body's integer follows JSON Schema, whose ``integer`` is any number with no
fractional part: ``3`` and ``3.0`` are the integer 3. What JSON Schema does not call an
integer is refused, where pydantic's lax ``int`` would coerce it: ``true`` (a boolean),
``"3"`` (a string) and ``3.5``. The OpenAPI document says ``integer``, and this type
accepts exactly what a client that reads it may send.
"""

from __future__ import annotations

from typing import Any

from pydantic import BeforeValidator


def _json_integer(value: Any) -> Any:
    """Pass a JSON integer on as ``int``; raise ``ValueError`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("Input should be a valid integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("Input should be a valid integer, got a number with a fractional part")
        return int(value)
    return value


#: Marks an ``int`` as an integer as JSON Schema defines it (``3`` or ``3.0``; never
#: ``true``, ``"3"`` or ``3.5``): ``Annotated[int, Field(ge=1, le=12), JSON_INTEGER]``.
#: Its bounds go before it, on the integer itself, so that they reach the OpenAPI
#: document as ``minimum`` and ``maximum`` (declared after it, or on the field of an
#: optional value, pydantic enforces them but documents them under names no client reads).
JSON_INTEGER = BeforeValidator(_json_integer)
