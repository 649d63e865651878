"""The files an export or a delivery writes: a saved query's rows as CSV or XLSX.

Rows are streamed from a server-side cursor (:data:`ITERSIZE` rows a fetch) inside one
READ ONLY REPEATABLE READ transaction (one snapshot for the whole file) straight into the
file, so memory does not grow with rows (:func:`write_file`).

Cell values follow :mod:`timekeeper.reporting.presentation` (the workspace's currency,
locale and zone). CSV stays machine-readable: dates ISO 8601 (``2027-03-01``), instants
ISO 8601 in the workspace's zone with its offset (``2027-03-01T13:00:00+01:00``), money the
decimal amount in major units (``48.00``; its currency the row's currency column, or the
workspace's, named in the header), UUIDs as text, booleans ``true``/``false``, NULL an
empty cell; UTF-8 (no BOM), RFC 4180 quoting, CRLF line ends, a header row of the
column labels. XLSX cells are typed: date and date-time cells with their number formats
(instants on the workspace's wall clock, the zone in the header), money numbers in major
units with a currency number format, integers numbers, booleans booleans.

**Spreadsheet formula injection.** A text cell from user data that starts with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return is prefixed with a single quote in CSV
(OWASP's advice for CSV opened in spreadsheets: the quote makes the cell text); such a
CSV cell therefore reads back with the quote. XLSX cells are written as typed string
cells, never formulas, so XLSX keeps the exact text. Characters XML cannot hold (control
characters other than tab, newline and carriage return) are dropped from XLSX text cells.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Loader
from psycopg.rows import tuple_row

from timekeeper.db.connection import walled_query
from timekeeper.reporting.catalogue import Column, ColumnType
from timekeeper.reporting.compiler import CompiledQuery
from timekeeper.reporting.presentation import (
    DEFAULT_PRESENTATION,
    Presentation,
    currency_digits,
    currency_sources,
    file_headers,
    major_units_text,
    xlsx_money_format,
)

#: The formats a file may have.
FORMATS = ("csv", "xlsx")
#: Media types of the files, by format.
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8",
                 "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"}
#: Rows fetched per round trip from the server-side cursor.
ITERSIZE = 2000

#: The first characters that make a spreadsheet read a CSV cell as a formula.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def file_digest(path: str) -> tuple[int, str]:
    """``(byte size, sha256 hex)`` of the file at ``path``, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def csv_text(value: str) -> str:
    """``value`` made safe for a spreadsheet: prefixed with ``'`` when it starts with a
    formula character (:data:`FORMULA_PREFIXES`)."""
    return "'" + value if value.startswith(FORMULA_PREFIXES) else value


class _FormulaGuardLoader(Loader):
    """Loads text (``text``, ``varchar``, ``char``) already made spreadsheet-safe (:func:`csv_text`)."""

    def load(self, data: Any) -> str:
        text = bytes(data).decode("utf-8")
        return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def _csv_loaders(cur: Any) -> None:
    """Have ``cur`` return every value a CSV cell takes as is, as the server's text: UUIDs,
    dates (ISO: psycopg, and so every Timekeeper connection, needs the server's default
    DateStyle ISO to load timestamps at all) and integers without building Python
    objects, and text formula-guarded; timestamps, booleans and money stay typed or
    textual input to :func:`_csv_converters`."""
    as_text = cur.adapters.get_loader(cur.adapters.types["text"].oid, pq.Format.TEXT)
    for name in ("uuid", "date", "int2", "int4", "int8"):
        cur.adapters.register_loader(name, as_text)
    for name in ("text", "varchar", "bpchar"):
        cur.adapters.register_loader(name, _FormulaGuardLoader)


#: Converts one loaded cell (never None) of a row, given the whole row.
CellConverter = Callable[[Any, Sequence[Any]], Any]


def _money_currency(source: int | None, presentation: Presentation) -> Callable[[Sequence[Any]], str]:
    """The currency of a money cell: the row's currency column (``source``) when the
    query selected it and it is not NULL, else the workspace's."""
    fallback = presentation.currency
    if source is None:
        return lambda row: fallback
    return lambda row: (row[source] or fallback).strip().lstrip("'")


def _csv_converters(columns: Sequence[Column], presentation: Presentation) -> list[tuple[int, CellConverter]]:
    """Per converted column: instants ISO 8601 in the workspace's zone (with its offset),
    booleans ``true``/``false``, money the decimal amount in major units
    (:func:`~timekeeper.reporting.presentation.major_units_text`)."""
    out: list[tuple[int, CellConverter]] = []
    zone = presentation.zone
    for i, (column, source) in enumerate(zip(columns, currency_sources(columns), strict=True)):
        if column.type is ColumnType.TIMESTAMP:
            out.append((i, lambda v, row: v.astimezone(zone).isoformat()))
        elif column.type is ColumnType.BOOLEAN:
            out.append((i, lambda v, row: "true" if v else "false"))
        elif column.type is ColumnType.MONEY:
            currency = _money_currency(source, presentation)
            out.append((i, lambda v, row, currency=currency: major_units_text(v, currency(row))))
    return out


def _xlsx_loaders(cur: Any) -> None:
    """UUIDs as the server's text, without building Python objects (dates load as
    :class:`datetime.date`, instants as aware datetimes)."""
    as_text = cur.adapters.get_loader(cur.adapters.types["text"].oid, pq.Format.TEXT)
    cur.adapters.register_loader("uuid", as_text)


def _converted(rows: Iterable[tuple[Any, ...]], converters: list[tuple[int, CellConverter]],
               counter: list[int]) -> Iterator[Any]:
    if not converters:
        for row in rows:
            counter[0] += 1
            yield row
        return
    for row in rows:
        counter[0] += 1
        out = list(row)
        for i, convert in converters:
            value = row[i]
            if value is not None:
                out[i] = convert(value, row)
        yield out


@contextmanager
def _stream(conn: psycopg.Connection, compiled: CompiledQuery,
            loaders: Callable[[Any], None] | None = None) -> Iterator[Any]:
    """A server-side cursor over the compiled query's rows (tuples), inside one READ ONLY
    REPEATABLE READ transaction held while the block runs, walled to the query's workspace
    (:func:`timekeeper.db.connection.walled_query`) (``conn``'s own isolation level
    and read-only setting are restored after); ``loaders(cursor)`` may change how it loads
    values first."""
    previous = (conn.isolation_level, conn.read_only)
    # BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY (no SET statement: RDS Proxy would pin)
    conn.isolation_level, conn.read_only = psycopg.IsolationLevel.REPEATABLE_READ, True
    try:
        with conn.transaction():
            # The cursor keeps PostgreSQL's fast-start planning (cursor_tuple_fraction 0.1):
            # every FETCH stays a short statement under the workers' statement timeout,
            # where a plan for all rows (a sort of the whole result) could make the first
            # FETCH exceed it.
            with walled_query(conn, compiled.workspace_id), \
                    conn.cursor(name="timekeeper_export", row_factory=tuple_row) as cur:
                cur.itersize = ITERSIZE
                if loaders is not None:
                    loaders(cur)
                cur.execute(compiled.statement, compiled.params)
                yield cur
    finally:
        conn.isolation_level, conn.read_only = previous


def write_file(conn: psycopg.Connection, compiled: CompiledQuery, fmt: str, path: str,
               presentation: Presentation = DEFAULT_PRESENTATION) -> int:
    """Write the rows of ``compiled`` to a ``fmt`` file (``csv`` | ``xlsx``) at ``path``
    with a header row (:func:`~timekeeper.reporting.presentation.file_headers`); return
    the number of data rows. Money, dates and instants are written for ``presentation``
    (the workspace's currency, locale and zone; see
    :mod:`timekeeper.reporting.presentation`). Memory stays flat: rows are fetched
    :data:`ITERSIZE` at a time and written as they come. Raises ``ValueError`` for an
    unknown format."""
    counter = [0]
    headers = file_headers(compiled.columns, presentation)
    if fmt == "csv":
        converters = _csv_converters(compiled.columns, presentation)
        with open(path, "w", encoding="utf-8", newline="", buffering=1 << 20) as out, \
                _stream(conn, compiled, _csv_loaders) as cur:
            writer = csv.writer(out)
            writer.writerow(headers)
            if converters:
                writer.writerows(_converted(cur, converters, counter))
                return counter[0]
            while rows := cur.fetchmany(ITERSIZE):  # every cell as loaded: the csv module's C loop alone
                writer.writerows(rows)
                counter[0] += len(rows)
            return counter[0]
    if fmt == "xlsx":
        with _stream(conn, compiled, _xlsx_loaders) as cur:
            return write_xlsx(path, headers, compiled.columns, cur, presentation)
    raise ValueError(f"unknown export format {fmt!r}")


#: Characters XML 1.0 cannot hold (C0 controls other than tab, new line and carriage
#: return): dropped from XLSX text, as openpyxl's ``ILLEGAL_CHARACTERS_RE`` names them.
XML_ILLEGAL_CHARACTERS = re.compile(r"[\000-\010\013\014\016-\037]")


#: The spreadsheet number formats of date and instant cells.
XLSX_DATE_FORMAT = "yyyy-mm-dd"
XLSX_DATETIME_FORMAT = "yyyy-mm-dd hh:mm:ss"
#: ``date.toordinal()`` of the spreadsheet's day 0 (1899-12-30: serial 1 is 1899-12-31,
#: 61 is 1900-03-01, the 1900 system's leap-day quirk already behind it).
_EXCEL_EPOCH = date(1899, 12, 30).toordinal()
_FIRST_PLAIN_SERIAL_DAY = date(1900, 3, 1)


def write_xlsx(path: str, headers: Sequence[str], columns: Sequence[Column], rows: Iterable[Sequence[Any]],
               presentation: Presentation = DEFAULT_PRESENTATION) -> int:
    """Write one sheet ``Export`` to ``path``: the ``headers`` row, then ``rows`` (values
    in the order of ``columns``, as the export's cursor loads them: UUIDs as text, dates
    as :class:`datetime.date`, instants as aware datetimes, integers, booleans, None);
    return the data rows.

    XlsxWriter in constant-memory mode: each row is written to the sheet's temporary file
    when the next begins, so memory stays flat whatever the row count. Cells are typed by
    column: text, enum and UUID cells are strings (never a formula, whatever they start
    with; XML-illegal control characters dropped; at most 32,767 UTF-16 units, the most a
    cell holds); dates are date cells (``yyyy-mm-dd``); instants are date-time cells of
    the wall clock in ``presentation``'s zone (``yyyy-mm-dd hh:mm:ss``; the header names
    the zone); integers numbers; money a number of major units with the currency's
    number format (the row's currency when the query selected its column, else the
    workspace's; :func:`~timekeeper.reporting.presentation.xlsx_money_format` in the
    workspace's locale); booleans booleans; NULL and empty text an empty cell.
    """
    import xlsxwriter

    workbook = xlsxwriter.Workbook(path, {"constant_memory": True, "strings_to_formulas": False,
                                          "strings_to_urls": False, "strings_to_numbers": False})
    try:
        sheet = workbook.add_worksheet("Export")
        for col, header in enumerate(headers):
            sheet.write_string(0, col, header)
        current: list[Sequence[Any]] = [()]
        cells = _XlsxCells(workbook, sheet, presentation, current)
        writers = [cells.writer(column, source) for column, source in zip(columns, currency_sources(columns),
                                                                           strict=True)]
        count = 0
        for count, row in enumerate(rows, 1):
            current[0] = row
            for col, (write, value) in enumerate(zip(writers, row, strict=True)):
                if value is not None:
                    write(count, col, value)
    finally:
        workbook.close()
    return count


class _XlsxCells:
    """The cell writers of one sheet, with the formats they share (one per currency)."""

    def __init__(self, workbook: Any, sheet: Any, presentation: Presentation, current: list[Sequence[Any]]) -> None:
        self.workbook, self.sheet, self.presentation, self.current = workbook, sheet, presentation, current
        self.date_format = workbook.add_format({"num_format": XLSX_DATE_FORMAT})
        self.datetime_format = workbook.add_format({"num_format": XLSX_DATETIME_FORMAT})
        self.money_formats: dict[str, tuple[Any, int]] = {}

    def money_format(self, currency: str) -> tuple[Any, int]:
        """``(format, 10 ** decimals)`` of ``currency``'s amounts."""
        found = self.money_formats.get(currency)
        if found is None:
            found = (self.workbook.add_format({"num_format": xlsx_money_format(currency, self.presentation.locale)}),
                     10 ** currency_digits(currency))
            self.money_formats[currency] = found
        return found

    def writer(self, column: Column, source: int | None) -> Callable[[int, int, Any], Any]:
        """The function writing one cell of ``column`` (row, column, value); ``source``:
        the position of the row's currency column (money only)."""
        sheet = self.sheet
        if column.type is ColumnType.INTEGER:
            return sheet.write_number
        if column.type is ColumnType.MONEY:
            return self._money(source)
        if column.type is ColumnType.BOOLEAN:
            return sheet.write_boolean
        if column.type is ColumnType.DATE:
            return self._date()
        if column.type is ColumnType.TIMESTAMP:
            return self._instant()
        if column.type in (ColumnType.TEXT, ColumnType.ENUM):
            write_string, illegal = sheet.write_string, XML_ILLEGAL_CHARACTERS

            def text(row: int, col: int, value: str) -> Any:
                if not value:
                    return None  # empty text is an empty cell, as NULL is
                if illegal.search(value):
                    value = illegal.sub("", value)
                return write_string(row, col, value)

            return text
        return sheet.write_string  # UUID: text from the cursor

    def _money(self, source: int | None) -> Callable[[int, int, Any], Any]:
        write_number, current = self.sheet.write_number, self.current
        fmt, scale = self.money_format(self.presentation.currency)
        if source is None:
            return lambda row, col, value: write_number(row, col, value / scale, fmt)
        fallback = self.presentation.currency

        def money(row: int, col: int, value: int) -> Any:
            currency = current[0][source] or fallback
            row_fmt, row_scale = self.money_format(currency.strip())
            return write_number(row, col, value / row_scale, row_fmt)

        return money

    def _date(self) -> Callable[[int, int, Any], Any]:
        write_number, write_datetime, fmt = self.sheet.write_number, self.sheet.write_datetime, self.date_format

        def day(row: int, col: int, value: date) -> Any:
            if value < _FIRST_PLAIN_SERIAL_DAY:
                return write_datetime(row, col, value, fmt)  # XlsxWriter knows the 1900 quirks
            return write_number(row, col, value.toordinal() - _EXCEL_EPOCH, fmt)

        return day

    def _instant(self) -> Callable[[int, int, Any], Any]:
        write_datetime, fmt, zone = self.sheet.write_datetime, self.datetime_format, self.presentation.zone
        return lambda row, col, value: write_datetime(row, col, value.astimezone(zone).replace(tzinfo=None), fmt)
