"""The XLSX export writer (XlsxWriter, constant memory) writes the cells the openpyxl
writer it replaced would write: both files read back with openpyxl over the same rows,
typed (dates and instants date cells, money numbers) with the same number formats."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from openpyxl import load_workbook

from tests.support import openpyxl_xlsx
from timekeeper.reporting.catalogue import Column, ColumnType
from timekeeper.reporting.writers import write_xlsx

COLUMNS = tuple(Column(name=t.value, type=t, label=f"{t.value} label", source=t.value) for t in (
    ColumnType.TEXT, ColumnType.INTEGER, ColumnType.MONEY, ColumnType.DATE, ColumnType.TIMESTAMP,
    ColumnType.BOOLEAN, ColumnType.UUID, ColumnType.ENUM))
HEADERS = [c.label for c in COLUMNS]
TEXTS = ["plain", "=SUM(A1:A9)", "=1+1", "+41 79 000", "-12", "@cmd", "Ünïcode, \"quoted\"\nnew line",
         "tab\tinside", "bell\x07 and nul\x00 dropped", "", " leading space", "'already quoted", "1e5",
         "http://example.com/x", "TRUE", "日本語テキスト", "emoji 🎉"]


def rows():
    """The export cursor's shapes: UUIDs as text, dates as dates, timestamps aware datetimes."""
    out = []
    for i, text in enumerate(TEXTS * 3):
        out.append((
            None if i % 7 == 6 else text,
            [0, 1, -1, 2**31, 10**15 - 1, -(10**14), 42][i % 7],
            None if i % 5 == 4 else i * 12345,
            [date(2027, 1, 31), date(1999, 12, 31), date(1900, 1, 1), None][i % 4],
            [datetime(2027, 3, 28, 1, 30, tzinfo=UTC) + timedelta(minutes=i),
             datetime(2027, 3, 28, 2, 30, 15, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30))), None][i % 3],
            [True, False, None][i % 3],
            f"{i:08x}-0000-4000-8000-000000000000",
            ["open", "void", "=paid"][i % 3],
        ))
    return out


def cells(path):
    sheet = load_workbook(path).active
    # an empty cell's type is not a value: openpyxl wrote empty text as an empty inline string
    return [[(c.value, c.data_type if c.value is not None else None, c.number_format if c.value is not None else None)
             for c in row] for row in sheet.iter_rows()]


def test_both_writers_give_the_same_cells_and_types(tmp_path):
    # Given the same rows written by the product's writer and by the openpyxl writer
    data = rows()
    assert write_xlsx(str(tmp_path / "new.xlsx"), HEADERS, COLUMNS, iter(data)) == len(data)
    assert openpyxl_xlsx(str(tmp_path / "old.xlsx"), HEADERS, COLUMNS, iter(data)) == len(data)
    # When both are read back with openpyxl
    new, old = cells(tmp_path / "new.xlsx"), cells(tmp_path / "old.xlsx")
    # Then every cell has the same value and the same type (text never a formula)
    assert len(new) == len(old) == len(data) + 1
    for r, (a, b) in enumerate(zip(new, old, strict=True)):
        assert a == b, f"row {r}"
    assert not any(t == "f" for row in new for _, t, _ in row)
    # And the values are the rows' (spot checks independent of either writer): text, numbers,
    # booleans; dates and instants (UTC, the default presentation's zone) date cells; money
    # a number of major units with the currency's format
    assert new[0] == [(h, "s", "General") for h in HEADERS]
    assert new[2][0] == ("=SUM(A1:A9)", "s", "General") and new[9][0] == ("bell and nul dropped", "s", "General")
    assert new[5][1] == (10**15 - 1, "n", "General") and new[1][5] == (True, "b", "General")
    assert new[1][3] == (datetime(2027, 1, 31), "d", "yyyy-mm-dd")
    assert new[3][3] == (datetime(1900, 1, 1), "d", "yyyy-mm-dd")
    assert new[1][4] == (datetime(2027, 3, 28, 1, 30), "d", "yyyy-mm-dd hh:mm:ss")
    assert new[2][4] == (datetime(2027, 3, 27, 21, 0, 15, 123000), "d", "yyyy-mm-dd hh:mm:ss")
    assert new[2][2] == (123.45, "n", '"$"#,##0.00')


def test_an_empty_result_is_the_header_row_alone(tmp_path):
    assert write_xlsx(str(tmp_path / "e.xlsx"), HEADERS, COLUMNS, iter(())) == 0
    assert cells(tmp_path / "e.xlsx") == [[(h, "s", "General") for h in HEADERS]]


def test_text_longer_than_a_cell_holds_is_cut_at_32767_units(tmp_path):
    # openpyxl wrote such text whole, and Excel refused to open the file
    long = "x" * 40_000
    write_xlsx(str(tmp_path / "l.xlsx"), ["t"], COLUMNS[:1], iter([(long,)]))
    assert cells(tmp_path / "l.xlsx")[1] == [("x" * 32_767, "s", "General")]


def test_a_row_of_the_wrong_width_is_an_error(tmp_path):
    with pytest.raises(ValueError):
        write_xlsx(str(tmp_path / "w.xlsx"), HEADERS, COLUMNS, iter([("only one",)]))
