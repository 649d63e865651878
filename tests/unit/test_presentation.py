"""How files write money and instants (timekeeper.reporting.presentation): the pure rules,
against Babel's and Python's own arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from timekeeper.reporting.catalogue import CATALOGUE
from timekeeper.reporting.presentation import (
    Presentation,
    currency_sources,
    file_headers,
    format_local_time,
    format_money,
    major_units,
    major_units_text,
    xlsx_money_format,
)


@given(minor=st.integers(-10**15, 10**15), currency=st.sampled_from(["EUR", "USD", "JPY", "KWD", "CLF"]))
def test_the_csv_amount_is_the_exact_decimal_of_major_units(minor, currency):
    text = major_units_text(minor, currency)
    assert Decimal(text) == major_units(minor, currency) == Decimal(minor).scaleb(-len(text.partition(".")[2]))
    assert text == format(major_units(minor, currency), "f") and "," not in text


def test_money_is_written_per_currency_and_locale():
    assert major_units_text(4800, "EUR") == "48.00" and major_units_text(4800, "JPY") == "4800"
    assert major_units_text(-5, "EUR") == "-0.05" and major_units_text(1234, "KWD") == "1.234"
    assert format_money(4800, "EUR", "en_US") == "€48.00"
    assert format_money(4800, "EUR", "de_DE") == "48,00\u00a0€"
    assert format_money(1250, "USD", "de_DE") == "12,50\u00a0$"
    assert xlsx_money_format("EUR", "en_US") == '"€"#,##0.00'
    assert xlsx_money_format("EUR", "de_DE") == '#,##0.00 "€"'
    assert xlsx_money_format("JPY", "en_US") == '"¥"#,##0'
    assert xlsx_money_format("CHF", "de_CH") == '"CHF" #,##0.00'


def test_headers_name_the_currency_and_zone_a_cell_does_not_carry():
    invoices = CATALOGUE["invoices"].columns
    with_currency = [invoices[n] for n in ("amount_minor", "currency", "created_at")]
    alone = [invoices[n] for n in ("number", "amount_minor")]
    berlin = Presentation("Club", "Europe/Berlin", "de_DE", "EUR")
    assert currency_sources(with_currency) == [1, None, None] and currency_sources(alone) == [None, None]
    assert file_headers(with_currency, berlin) == ["Amount", "Currency", "Recorded at (Europe/Berlin)"]
    assert file_headers(alone, berlin) == ["Number", "Amount (EUR)"]


def test_a_pdf_time_is_the_workspaces_wall_clock_with_its_abbreviation():
    at = datetime(2027, 3, 28, 1, 30, tzinfo=UTC)  # Berlin springs forward at 01:00 UTC
    assert format_local_time(at, Presentation(timezone="Europe/Berlin")) == "2027-03-28 03:30 CEST"
    assert format_local_time(at, Presentation(timezone="Pacific/Kiritimati")) == "2027-03-28 15:30 +14"
