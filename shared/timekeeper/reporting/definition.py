"""A saved query's definition: entity, columns, filters, sort and limit.

Two layers of checks, both naming the offending field:

* shape (pydantic, :class:`QueryDefinition`): types, lengths, no unknown keys; the API's
  request models embed it, so its JSON schema is in the OpenAPI document;
* meaning (:func:`check_definition`, against the :mod:`~timekeeper.reporting.catalogue`):
  the entity and columns exist, each operator is allowed for its column's type, and each
  value has that type. Raises :class:`InvalidDefinition` with a dotted field path such as
  ``"filters[1].value"``, which the API answers as a 422 and an export records as its
  failure code.

:func:`check_definition` returns a :class:`CheckedDefinition`: the definition with its
filter values converted to Python values (dates, UUIDs, ints), ready for the compiler.
Checking is idempotent: a checked definition passed again (a stored version's
``parsed()`` handed to the compiler) is returned as it is, and a converted value checks
as its JSON form would, so a definition that saves always compiles.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from functools import partial
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, StringConstraints, ValidationError
from pydantic.json_schema import JsonSchemaValue

from timekeeper.reporting.catalogue import CATALOGUE, OPERATORS, Column, ColumnType, Entity, Operator
from timekeeper.strict_input import JSON_INTEGER

#: Bounds of a definition (a stored definition and its compiled statement stay small).
MAX_COLUMNS = 50
MAX_FILTERS = 20
MAX_SORT = 5
MAX_LIST_VALUES = 200
MAX_TEXT_VALUE = 500
MAX_LIMIT = 5_000_000
_INT_RANGE = (-(2**63), 2**63 - 1)

Name = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class InvalidDefinition(ValueError):
    """A definition the catalogue refuses: ``field`` is the dotted path of the offending
    input (``"columns[2]"``, ``"filters[0].value"``), ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class Filter(BaseModel):
    """Keep rows whose ``column`` satisfies ``op`` with ``value`` (see
    :class:`~timekeeper.reporting.catalogue.Operator` for the value each operator takes)."""

    model_config = ConfigDict(extra="forbid")

    column: Name
    op: Operator
    value: Any = None


class SortKey(BaseModel):
    """Order by ``column``, ascending or descending (ties are broken by the row's id)."""

    model_config = ConfigDict(extra="forbid")

    column: Name
    direction: Literal["asc", "desc"] = "asc"


class QueryDefinition(BaseModel):
    """What a saved query version asks for. ``limit`` None: every matching row.

    As a request body its published JSON schema is the catalogue's
    (:func:`definition_json_schema`); as stored and answered it is the model's own shape
    (a stored version may name a column the catalogue has since dropped)."""

    model_config = ConfigDict(extra="forbid")

    entity: Name = Field(description="an entity of the catalogue, e.g. invoices")
    columns: list[Name] = Field(min_length=1, max_length=MAX_COLUMNS, description="columns, in output order")
    filters: list[Filter] = Field(default_factory=list, max_length=MAX_FILTERS,
                                  description="all must hold (AND)")
    sort: list[SortKey] = Field(default_factory=list, max_length=MAX_SORT)
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT), JSON_INTEGER] | None = None

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """The catalogue's schema for input (what :func:`check_definition` accepts), the
        model's own for output."""
        own = handler(core_schema)
        if handler.mode == "validation":
            return definition_json_schema()
        return own


def parse_definition(data: Any) -> QueryDefinition:
    """Shape-check ``data`` (JSON-like) as a :class:`QueryDefinition`; raises
    :class:`InvalidDefinition` naming the first offending field."""
    try:
        return QueryDefinition.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidDefinition(_path(first.get("loc") or ()) or "definition",
                                str(first.get("msg", "invalid value")).removeprefix("Value error, ")) from None


def _path(loc: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def storable_text(text: str) -> bool:
    """Whether PostgreSQL can hold ``text`` (as text and inside jsonb): no NUL character
    and no unpaired surrogate (which has no UTF-8 form)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _entity(name: str) -> Entity:
    entity = CATALOGUE.get(name)
    if entity is None:
        raise InvalidDefinition("entity", f"unknown entity; one of {', '.join(sorted(CATALOGUE))}")
    return entity


def _column(entity: Entity, name: str, field: str) -> Column:
    column = entity.columns.get(name)
    if column is None:
        raise InvalidDefinition(field, f"{entity.name} has no such column; one of {', '.join(entity.columns)}")
    return column


def _scalar(column: Column, value: Any, field: str) -> Any:
    """``value`` as the Python value of ``column``'s type; raises InvalidDefinition."""
    kind = column.type
    if value is None:
        raise InvalidDefinition(field, "a value is required (use is_null to match missing values)")
    if kind in (ColumnType.TEXT, ColumnType.ENUM):
        if not isinstance(value, str):
            raise InvalidDefinition(field, f"{column.name} takes text")
        if len(value) > MAX_TEXT_VALUE:
            raise InvalidDefinition(field, f"text longer than {MAX_TEXT_VALUE} characters")
        if not storable_text(value):
            raise InvalidDefinition(field, "text must not contain NUL characters or unpaired surrogates")
        if kind is ColumnType.ENUM and value not in column.values:
            raise InvalidDefinition(field, f"{column.name} is one of {', '.join(column.values)}")
        return value
    if kind in (ColumnType.INTEGER, ColumnType.MONEY):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidDefinition(field, f"{column.name} takes an integer"
                                    + (" (minor units)" if kind is ColumnType.MONEY else ""))
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise InvalidDefinition(field, "integer out of range")
        return value
    if kind is ColumnType.BOOLEAN:
        if not isinstance(value, bool):
            raise InvalidDefinition(field, f"{column.name} takes true or false")
        return value
    if kind is ColumnType.DATE:
        if type(value) is date:  # already converted by an earlier check
            return value
        try:
            return date.fromisoformat(value) if isinstance(value, str) and len(value) == 10 else _bad()
        except ValueError:
            raise InvalidDefinition(field, f"{column.name} takes a date (YYYY-MM-DD)") from None
    if kind is ColumnType.TIMESTAMP:
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value
        try:
            instant = datetime.fromisoformat(value) if isinstance(value, str) and len(value) <= 40 else _bad()
        except ValueError:
            raise InvalidDefinition(field, f"{column.name} takes an ISO 8601 instant with its offset") from None
        if instant.tzinfo is None:
            raise InvalidDefinition(field, f"{column.name} takes an ISO 8601 instant with its offset")
        return instant
    if kind is ColumnType.UUID:
        if isinstance(value, UUID):
            return value
        try:
            return UUID(value) if isinstance(value, str) and len(value) <= 40 else _bad()
        except ValueError:
            raise InvalidDefinition(field, f"{column.name} takes a UUID") from None
    raise AssertionError(kind)


def _bad() -> Any:
    raise ValueError


def _value(column: Column, op: Operator, value: Any, field: str) -> Any:
    if op in (Operator.IS_NULL, Operator.IS_NOT_NULL):
        if value is not None:
            raise InvalidDefinition(field, f"{op.value} takes no value")
        return None
    if op in (Operator.IN, Operator.NOT_IN):
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_LIST_VALUES:
            raise InvalidDefinition(field, f"{op.value} takes a list of 1 to {MAX_LIST_VALUES} values")
        return [_scalar(column, item, f"{field}[{i}]") for i, item in enumerate(value)]
    if op is Operator.BETWEEN:
        if not isinstance(value, list) or len(value) != 2:
            raise InvalidDefinition(field, "between takes [low, high]")
        low, high = (_scalar(column, item, f"{field}[{i}]") for i, item in enumerate(value))
        if low > high:
            raise InvalidDefinition(field, "between needs low <= high")
        return [low, high]
    return _scalar(column, value, field)


class CheckedDefinition(QueryDefinition):
    """A :class:`QueryDefinition` that :func:`check_definition` accepted against the
    catalogue: its filter values are Python values of their columns' types (``date``,
    ``datetime`` with offset, ``UUID``, ``int``, ``bool``, ``str``). Made only by
    :func:`check_definition`; ``model_dump(mode="json")`` gives back the stored JSON form."""


def check_definition(definition: QueryDefinition | Any) -> CheckedDefinition:
    """Check ``definition`` (a :class:`QueryDefinition` or its JSON) against the catalogue
    and return it as a :class:`CheckedDefinition`, filter values converted to their column
    types. A :class:`CheckedDefinition` is returned unchanged (checking twice is the same
    as checking once). Raises :class:`InvalidDefinition` naming the offending field."""
    if isinstance(definition, CheckedDefinition):
        return definition
    if not isinstance(definition, QueryDefinition):
        definition = parse_definition(definition)
    entity = _entity(definition.entity)
    seen: set[str] = set()
    for i, name in enumerate(definition.columns):
        _column(entity, name, f"columns[{i}]")
        if name in seen:
            raise InvalidDefinition(f"columns[{i}]", f"{name!r} is listed twice")
        seen.add(name)
    filters = []
    for i, item in enumerate(definition.filters):
        column = _column(entity, item.column, f"filters[{i}].column")
        if item.op not in OPERATORS[column.type]:
            allowed = ", ".join(sorted(o.value for o in OPERATORS[column.type]))
            raise InvalidDefinition(f"filters[{i}].op", f"{item.op.value} does not apply to {column.name} "
                                    f"({column.type.value}); one of {allowed}")
        filters.append(Filter.model_construct(column=item.column, op=item.op,
                                              value=_value(column, item.op, item.value, f"filters[{i}].value")))
    sort_seen: set[str] = set()
    for i, key in enumerate(definition.sort):
        _column(entity, key.column, f"sort[{i}].column")
        if key.column in sort_seen:
            raise InvalidDefinition(f"sort[{i}].column", f"{key.column!r} is sorted by twice")
        sort_seen.add(key.column)
    fields = {name: getattr(definition, name) for name in type(definition).model_fields}
    return CheckedDefinition.model_construct(**dict(fields, filters=filters))


# ------------------------------------------------------------------ the published schema

_DATE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
#: The integer range the schema publishes: the stored range less the top 1,023 values, so
#: the bound survives a trip through a double (OpenAPI tooling, JavaScript clients).
_SCHEMA_INT_RANGE = (-(2**63) + 1024, 2**63 - 1024)


def _value_schema(column: Column) -> dict[str, Any]:
    """The JSON schema of one value of ``column`` (what :func:`_scalar` accepts, less the
    checks JSON Schema cannot say: no NUL or unpaired surrogate in text)."""
    kind = column.type
    if kind is ColumnType.ENUM:
        return {"type": "string", "enum": list(column.values)}
    if kind is ColumnType.TEXT:
        return {"type": "string", "maxLength": MAX_TEXT_VALUE}
    if kind in (ColumnType.INTEGER, ColumnType.MONEY):
        return {"type": "integer", "minimum": _SCHEMA_INT_RANGE[0], "maximum": _SCHEMA_INT_RANGE[1]}
    if kind is ColumnType.BOOLEAN:
        return {"type": "boolean"}
    if kind is ColumnType.DATE:
        return {"type": "string", "format": "date", "pattern": _DATE_PATTERN}
    if kind is ColumnType.TIMESTAMP:
        return {"type": "string", "format": "date-time", "maxLength": 40}
    if kind is ColumnType.UUID:
        return {"type": "string", "format": "uuid", "maxLength": 40}
    raise AssertionError(kind)


def schema_name(text: str) -> str:
    """``"member_number"`` -> ``"MemberNumber"``: a name for a published schema (a model
    name in a generated client)."""
    return "".join(word[:1].upper() + word[1:] for word in re.split(r"[^A-Za-z0-9]+", text) if word)


def _filter_schemas(entity: Entity, column: Column) -> list[dict[str, Any]]:
    """One schema per group of ``column``'s operators that take the same kind of value,
    each titled by its entity, column and group (``InvoicesDueDateRangeFilter``): the
    model name a generated client gives it. The null tests take no ``value`` (the route
    also takes ``null``; the schema leaves it out)."""
    allowed = OPERATORS[column.type]
    one = _value_schema(column)
    groups: list[tuple[str, list[Operator], dict[str, Any] | None]] = [
        ("", [op for op in Operator if op in allowed and op not in _NOT_ONE], one),
        ("List", [op for op in (Operator.IN, Operator.NOT_IN) if op in allowed],
         {"type": "array", "items": one, "minItems": 1, "maxItems": MAX_LIST_VALUES}),
        ("Range", [op for op in (Operator.BETWEEN,) if op in allowed],
         {"type": "array", "items": one, "minItems": 2, "maxItems": 2,
          "description": "[low, high], both inclusive, low <= high"}),
        ("Null", [op for op in (Operator.IS_NULL, Operator.IS_NOT_NULL) if op in allowed], None),
    ]
    out = []
    for group, ops, value in groups:
        if not ops:
            continue
        properties: dict[str, Any] = {"column": {"type": "string", "const": column.name},
                                      "op": {"type": "string", "enum": [op.value for op in ops]}}
        if value is not None:
            properties["value"] = value
        out.append({"title": f"{schema_name(entity.name)}{schema_name(column.name)}{group}Filter",
                    "type": "object", "additionalProperties": False, "properties": properties,
                    "required": ["column", "op"] if value is None else ["column", "op", "value"]})
    return out


_NOT_ONE = frozenset({Operator.IN, Operator.NOT_IN, Operator.BETWEEN, Operator.IS_NULL, Operator.IS_NOT_NULL})


def _entity_schema(entity: Entity) -> dict[str, Any]:
    names = list(entity.columns)
    return {
        "title": f"{schema_name(entity.name)}Query", "description": f"a query of {entity.label}",
        "type": "object", "additionalProperties": False,
        "required": ["entity", "columns"],
        "properties": {
            "entity": {"type": "string", "const": entity.name},
            "columns": {"type": "array", "items": {"type": "string", "enum": names}, "minItems": 1,
                        "maxItems": MAX_COLUMNS, "uniqueItems": True, "description": "columns, in output order"},
            "filters": {"type": "array", "maxItems": MAX_FILTERS, "description": "all must hold (AND)",
                        "items": {"oneOf": [s for c in entity.columns.values() for s in _filter_schemas(entity, c)]}},
            "sort": {"type": "array", "maxItems": MAX_SORT, "description": "each column at most once",
                     "items": {"type": "object", "additionalProperties": False, "required": ["column"],
                               "properties": {"column": {"type": "string", "enum": names},
                                              "direction": {"type": "string", "enum": ["asc", "desc"],
                                                            "default": "asc"}}}},
            "limit": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}, {"type": "null"}],
                      "description": "null or left out: every matching row"},
        }}


def definition_json_schema() -> dict[str, Any]:
    """The JSON schema of a definition the catalogue accepts: ``oneOf`` one object per
    entity (its ``entity`` a const), whose columns and sort keys are enums of that
    entity's columns and whose filters are one schema per column and operator group,
    typed by the column. What it cannot say stays with :func:`check_definition` (a
    documented 422 naming the field): ``between``'s low <= high, a column sorted by
    twice, and text PostgreSQL cannot hold."""
    return {"oneOf": [_entity_schema(e) for e in CATALOGUE.values()],
            "description": "a saved query's definition: an entity of the catalogue, its columns, filters, "
                           "sort and limit (GET /catalogue lists the same)"}


# ------------------------------------------------------------ values typed in a locale


def _entered_scalar(column: Column, value: Any, field: str, *, locale: str, digits: int) -> Any:
    """One value of a date or money ``column`` typed as text in ``locale`` ("31.12.2026",
    "1.234,50" in de_DE) as its JSON form (``"2026-12-31"``, ``123450`` minor units with
    ``digits`` decimals); any other value is returned as it is."""
    from babel.dates import parse_date
    from babel.numbers import NumberFormatError, parse_decimal

    if not isinstance(value, str):
        return value
    text = value.strip()
    if column.type is ColumnType.DATE:
        try:
            if len(text) > 40:
                raise ValueError
            return parse_date(text, locale=locale).isoformat()
        except (ValueError, IndexError):
            example = _format_date(date(2026, 12, 31), locale)
            raise InvalidDefinition(field, f"{column.name} takes a date as written in {locale}, "
                                    f"e.g. {example}") from None
    try:
        if len(text) > 40:
            raise ValueError
        amount = parse_decimal(text, locale=locale, strict=True)
        minor = amount.scaleb(digits)
        if not amount.is_finite() or minor != minor.to_integral_value():
            raise ValueError
    except (ValueError, NumberFormatError, ArithmeticError):
        example = _format_amount(123450, digits, locale)
        raise InvalidDefinition(field, f"{column.name} takes an amount as written in {locale}, e.g. {example}"
                                + (f", at most {digits} decimals" if digits else ", without decimals")) from None
    return int(minor)


def _format_date(value: date, locale: str) -> str:
    """``value`` in ``locale``'s short date pattern with a four-digit year (``31.12.2026``)."""
    from babel import Locale
    from babel.dates import format_date

    pattern = Locale.parse(locale).date_formats["short"].pattern
    return format_date(value, format=pattern.replace("yy", "y") if "yyy" not in pattern else pattern, locale=locale)


def _format_amount(minor: int, digits: int, locale: str) -> str:
    from decimal import Decimal

    from babel.numbers import format_decimal

    pattern = "#,##0" + ("." + "0" * digits if digits else "")
    return format_decimal(Decimal(minor).scaleb(-digits), format=pattern, locale=locale,
                          decimal_quantization=False)


def entered_values(definition: QueryDefinition, *, locale: str, currency_digits: int) -> QueryDefinition:
    """``definition`` whose date and money filter values were typed as people type them in
    ``locale`` (a CLDR identifier such as ``de_DE``: dates "31.12.2026", amounts "1.234,50"),
    with those values as their JSON form (ISO dates, integer minor units of a currency
    with ``currency_digits`` decimals). Lists and ``[low, high]`` pairs are converted item
    by item; values of other columns, and values that are not text, are left for
    :func:`check_definition`. Parsing is Babel's (``parse_date``, ``parse_decimal`` strict).
    Raises :class:`InvalidDefinition` naming ``filters[i].value`` (or ``filters[i].value[j]``)
    for a value that does not parse, or an amount with more decimals than the currency has."""
    entity = CATALOGUE.get(definition.entity)
    if entity is None:
        return definition
    filters = []
    for i, item in enumerate(definition.filters):
        column = entity.columns.get(item.column)
        value = item.value
        if column is not None and column.type in (ColumnType.DATE, ColumnType.MONEY):
            field = f"filters[{i}].value"
            convert = partial(_entered_scalar, column, locale=locale, digits=currency_digits)
            value = ([convert(v, f"{field}[{j}]") for j, v in enumerate(value)] if isinstance(value, list)
                     else convert(value, field))
        filters.append(item.model_copy(update={"value": value}))
    return definition.model_copy(update={"filters": filters})

