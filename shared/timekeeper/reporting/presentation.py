"""How the files recipients get write money, dates and instants: per currency, in the
workspace's locale and time zone.

The rule, one for every file (CSV and XLSX exports, report PDFs):

* **Money** is stored as an integer amount of minor units with an ISO 4217 currency
  (:class:`~timekeeper.reporting.catalogue.ColumnType.MONEY`). A file shows it in major
  units: the currency's number of decimals comes from CLDR (Babel's
  ``get_currency_precision``: EUR and USD 2, JPY 0, KWD 3). The currency is the row's own
  when the query selected the money column's currency column (``Column.currency``), else
  the workspace's, and then the column's header names it (``Amount (EUR)``).

  - CSV keeps machine-readable values: the decimal amount in major units with a point
    and no grouping (``48.00``, ``-1234.50``), so a program reads it without knowing the
    locale (:func:`major_units_text`).
  - XLSX money cells are numbers (major units) with a currency number format
    (:func:`xlsx_money_format`: the locale's symbol on the locale's side, the currency's
    decimals); the spreadsheet shows the digits with its reader's separators.
  - PDF shows Babel's formatted amount in the workspace's locale (:func:`format_money`:
    ``€48.00`` in en_US, ``48,00 €`` in de_DE).

* **Dates** (calendar days) are the day itself, no zone. **Instants** (UTC in the
  database) are shown in the workspace's IANA zone (:func:`local_time`); the file says
  which zone (a header ``Created (Europe/Berlin)``, the PDF's header line). CSV writes
  instants as ISO 8601 with the zone's offset (``2027-03-01T13:00:00+01:00``): local and
  still one instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg

from timekeeper.platform.directory import DEFAULT_LOCALE, get_workspace
from timekeeper.reporting.catalogue import Column, ColumnType


@dataclass(frozen=True)
class Presentation:
    """The workspace settings a file is written with: ``workspace_name`` (shown in PDFs),
    ``timezone`` (IANA name; instants are shown there), ``locale`` (CLDR identifier; how
    PDFs write money, and the XLSX currency symbol's side), ``currency`` (ISO 4217; the
    currency of money columns whose rows carry none)."""

    workspace_name: str = ""
    timezone: str = "UTC"
    locale: str = DEFAULT_LOCALE
    currency: str = "USD"

    @property
    def zone(self) -> ZoneInfo:
        """The workspace's :class:`ZoneInfo`."""
        return ZoneInfo(self.timezone)


#: The presentation of a file written without a workspace (UTC, en_US, USD).
DEFAULT_PRESENTATION = Presentation()


def presentation_of(conn: psycopg.Connection, workspace_id: UUID) -> Presentation:
    """The presentation of ``workspace_id``'s files, read from its directory row (name,
    time zone, locale, currency). Raises ``LookupError`` when there is no such workspace
    (or this login may not see it)."""
    workspace = get_workspace(conn, workspace_id)
    if workspace is None:
        raise LookupError(f"no workspace {workspace_id}")
    return Presentation(workspace_name=workspace.name, timezone=workspace.timezone, locale=workspace.locale,
                        currency=workspace.currency.strip())


@lru_cache(maxsize=256)
def currency_digits(currency: str) -> int:
    """The number of decimals of ``currency`` (ISO 4217 code) in CLDR: 2 for EUR and USD,
    0 for JPY, 3 for KWD; 2 for a code CLDR does not know."""
    from babel.numbers import get_currency_precision

    return get_currency_precision(currency)


def major_units(minor: int, currency: str) -> Decimal:
    """``minor`` units of ``currency`` as an exact decimal amount of major units
    (``4800`` EUR -> ``Decimal('48.00')``, ``4800`` JPY -> ``Decimal('4800')``)."""
    return Decimal(int(minor)).scaleb(-currency_digits(currency))


def major_units_text(minor: int | str, currency: str) -> str:
    """The CSV text of an amount: major units, a point, the currency's decimals, no
    grouping (``4800`` EUR -> ``48.00``; ``-5`` -> ``-0.05``; ``4800`` JPY -> ``4800``);
    ``minor`` may be the integer's text, as the CSV cursor loads it. Integer arithmetic:
    the same text as :func:`major_units`, without building a Decimal per cell."""
    digits = currency_digits(currency)
    value = int(minor)
    if not digits:
        return str(value)
    whole, part = divmod(-value if value < 0 else value, 10 ** digits)
    return f"{'-' if value < 0 else ''}{whole}.{part:0{digits}d}"


def format_money(minor: int, currency: str, locale: str) -> str:
    """``minor`` units of ``currency`` as Babel writes the amount in ``locale``
    (``4800``, EUR: ``€48.00`` in en_US, ``48,00 €`` in de_DE; the space is a no-break
    space, as CLDR has it)."""
    from babel.numbers import format_currency

    return format_currency(major_units(minor, currency), currency, locale=locale)


@lru_cache(maxsize=256)
def xlsx_money_format(currency: str, locale: str) -> str:
    """The spreadsheet number format of ``currency`` amounts in ``locale``: the locale's
    currency symbol (quoted) on the side its standard currency pattern puts it, grouped
    digits and the currency's decimals (``"€"#,##0.00`` in en_US, ``#,##0.00 "€"`` in
    de_DE, ``"¥"#,##0`` for JPY), with a minus for negative amounts. The digits'
    separators are the spreadsheet reader's (a number format names them by role)."""
    from babel import Locale
    from babel.numbers import get_currency_symbol

    digits = currency_digits(currency)
    number = "#,##0" + ("." + "0" * digits if digits else "")
    symbol = '"' + get_currency_symbol(currency, locale=locale).replace('"', "") + '"'
    pattern = Locale.parse(locale).currency_formats["standard"].pattern.split(";")[0]
    at = pattern.find("¤")
    digits_at = min((pattern.find(c) for c in "#0" if c in pattern), default=0)
    if at < 0 or at < digits_at:  # the symbol leads (en_US "¤#,##0.00", nl_NL "¤ #,##0.00")
        spaced = at >= 0 and pattern[at + 1:at + 2] in ("\u00a0", " ")
        return f"{symbol} {number}" if spaced else f"{symbol}{number}"
    spaced = pattern[at - 1:at] in ("\u00a0", " ")  # de_DE "#,##0.00 ¤"
    return f"{number} {symbol}" if spaced else f"{number}{symbol}"

def local_time(instant: datetime, presentation: Presentation) -> datetime:
    """``instant`` (aware) in the workspace's zone (aware, with that zone's offset)."""
    return instant.astimezone(presentation.zone)


def format_local_time(instant: datetime, presentation: Presentation) -> str:
    """``instant`` as a PDF shows it: the workspace's wall clock and the zone's
    abbreviation (``2027-03-01 13:00 CET``; ``+14`` where the zone has no letters)."""
    local = local_time(instant.astimezone(UTC), presentation)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def currency_sources(columns: Sequence[Column]) -> list[int | None]:
    """Per column, the position among ``columns`` of the column holding its row's
    currency: a money column whose ``currency`` column the query also selected; None for
    every other column (and a money column in the workspace's currency)."""
    at = {c.name: i for i, c in enumerate(columns)}
    return [at.get(c.currency) if c.type is ColumnType.MONEY and c.currency else None for c in columns]


def file_headers(columns: Sequence[Column], presentation: Presentation) -> list[str]:
    """The header row of a file of ``columns``: each column's label, a money column in
    the workspace's currency followed by that currency (``Amount (EUR)``), an instant
    column by the zone it is shown in (``Recorded at (Europe/Berlin)``)."""
    sources = currency_sources(columns)
    headers = []
    for column, source in zip(columns, sources, strict=True):
        if column.type is ColumnType.MONEY and source is None:
            headers.append(f"{column.label} ({presentation.currency})")
        elif column.type is ColumnType.TIMESTAMP:
            headers.append(f"{column.label} ({presentation.timezone})")
        else:
            headers.append(column.label)
    return headers
