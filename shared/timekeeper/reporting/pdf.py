"""A report's PDF: the sections a render read, laid out on A4 landscape pages.

:func:`build_pdf` turns a report definition and its sections' rows
(:class:`SectionData`, read by :mod:`timekeeper.reporting.rendering`) into the PDF's
bytes: tables, bar charts and line charts, money Babel-formatted per currency in the
workspace's locale and instants in its zone
(:mod:`timekeeper.reporting.presentation`), DejaVu Sans embedded. The output is
deterministic: the creation date is the render's ``requested_at`` and the producer
fixed, so the same definition over the same rows gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from timekeeper.reporting.catalogue import Column, ColumnType
from timekeeper.reporting.presentation import (
    DEFAULT_PRESENTATION,
    Presentation,
    currency_sources,
    file_headers,
    format_local_time,
    format_money,
    major_units,
)
from timekeeper.reporting.reports import Display, ReportDefinition, Section

#: Rows a table section shows at most (the PDF says when the query returned more).
TABLE_ROW_CAP = 1_000
#: Points a chart section draws at most.
CHART_POINT_CAP = 50
#: The producer written into every PDF's metadata (fixed: deterministic output).
PRODUCER = "Timekeeper report renderer"


@dataclass(frozen=True)
class SectionData:
    """What one section shows: ``headers`` (column labels), ``columns`` (names), ``rows``
    (tuples, at most the cap), ``truncated`` (the query returned more rows than shown), and
    where it came from (``query_name``, ``query_version``; ``basis``: the snapshot version
    shown, see :attr:`timekeeper.reporting.rendering.ReportRender.snapshot_basis`)."""

    section: Section
    query_name: str
    query_version: int
    columns: tuple[str, ...]
    headers: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool
    basis: dict[str, Any] | None = None
    #: The catalogue columns, in order (their types say how a cell is written: money per
    #: currency and locale, instants in the workspace's zone); empty: every cell as text.
    kinds: tuple[Column, ...] = ()



#: The PDF's font (DejaVu Sans, regular and bold, subset to Latin, Greek, Cyrillic,
#: punctuation and currency signs; the core PDF fonts hold Latin-1 only, no euro sign).
FONT = "DejaVu"
_FONT_FILES = {"": "DejaVuSans.ttf", "B": "DejaVuSans-Bold.ttf", "I": "DejaVuSans.ttf"}
#: What the footer's page count is written as until the PDF is closed (fpdf2's alias).
PAGE_COUNT_ALIAS = "{nb}"


def _font_path(name: str) -> str:
    from importlib.resources import files

    return str(files("timekeeper.reporting").joinpath("fonts", name))


def _printable(text: str) -> str:
    """Text for the PDF: control characters (other than new line) become spaces (the font
    holds printable characters; one it lacks is left out of the page)."""
    return "".join(" " if (ord(c) < 32 and c != "\n") or 127 <= ord(c) < 160 else c for c in text)


def format_value(value: Any, presentation: Presentation = DEFAULT_PRESENTATION) -> str:
    """A cell's text: '' for NULL, ``yes``/``no`` for booleans, ISO 8601 for dates,
    instants on the workspace's wall clock with the zone's abbreviation
    (:func:`~timekeeper.reporting.presentation.format_local_time`), str otherwise."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return format_local_time(value, presentation)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _currency(row: Sequence[Any], source: int | None, presentation: Presentation) -> str:
    found = row[source] if source is not None else None
    return found.strip() if isinstance(found, str) and found.strip() else presentation.currency


def cell_text(value: Any, column: Column | None, row: Sequence[Any], source: int | None,
              presentation: Presentation) -> str:
    """The text of one table cell: a money cell (``column`` of type money, an integer of
    minor units) Babel-formatted in the workspace's locale in the row's currency (the
    query's currency column at position ``source``) or the workspace's (``€48.00`` in
    en_US, ``48,00 €`` in de_DE); otherwise :func:`format_value`."""
    if value is not None and column is not None and column.type is ColumnType.MONEY:
        return format_money(value, _currency(row, source, presentation), presentation.locale)
    return format_value(value, presentation)


def build_pdf(definition: ReportDefinition, sections: Sequence[SectionData], *, report_version: int,
              requested_at: datetime, presentation: Presentation = DEFAULT_PRESENTATION) -> tuple[bytes, int]:
    """The PDF of ``definition`` over ``sections`` (A4 landscape, DejaVu Sans): returns
    ``(bytes, page count)``.

    The first page's heading names the workspace (``presentation.workspace_name``), the
    report version and the data time (``requested_at``, the instant the sections' rows
    were read as of, on the workspace's wall clock, the zone named); a snapshot
    section names its period and version. Every page's footer carries the workspace's
    name, the report's title and ``Page x of y``. Money is Babel-formatted per currency in
    the workspace's locale, instants are shown in its zone. Deterministic: the creation
    date is ``requested_at`` and the producer fixed, so equal input gives equal bytes."""
    from fpdf import FPDF

    title = _printable(definition.title)
    footer_text = _printable(" \u00b7 ".join(t for t in (presentation.workspace_name, definition.title) if t))

    class _ReportPdf(FPDF):
        def footer(self) -> None:
            self.set_y(-10)
            self.set_font(FONT, "", 7)
            self.set_text_color(90, 90, 90)
            self.cell(0, 5, footer_text, align="L")
            self.set_x(self.l_margin)
            self.cell(0, 5, f"Page {self.page_no()} of {PAGE_COUNT_ALIAS}", align="R")
            self.set_text_color(0, 0, 0)

    pdf = _ReportPdf(orientation="landscape", unit="mm", format="A4")
    for style, name in _FONT_FILES.items():
        pdf.add_font(FONT, style, _font_path(name))
    pdf.alias_nb_pages(PAGE_COUNT_ALIAS)
    pdf.set_creation_date(requested_at.astimezone(UTC))
    pdf.set_producer(PRODUCER)
    pdf.set_creator(PRODUCER)
    pdf.set_title(title)
    if presentation.workspace_name:
        pdf.set_author(_printable(presentation.workspace_name))
    pdf.set_auto_page_break(auto=True, margin=14)
    pdf.set_margins(10, 10, 10)
    pdf.add_page()
    if presentation.workspace_name:
        pdf.set_font(FONT, "B", 10)
        pdf.cell(0, 6, _printable(presentation.workspace_name), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font(FONT, "B", 18)
    pdf.multi_cell(0, 9, title, new_x="LMARGIN", new_y="NEXT")
    pdf.set_font(FONT, "", 9)
    pdf.cell(0, 6, f"Report version {report_version}; data as of {format_local_time(requested_at, presentation)} "
                   f"(times in {presentation.timezone})", new_x="LMARGIN", new_y="NEXT")
    for data in sections:
        _section(pdf, data, presentation)
    return bytes(pdf.output()), pdf.pages_count


def _section(pdf: Any, data: SectionData, presentation: Presentation) -> None:
    section = data.section
    if pdf.will_page_break(30):
        pdf.add_page()
    pdf.ln(4)
    pdf.set_font(FONT, "B", 13)
    pdf.multi_cell(0, 7, _printable(section.heading), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font(FONT, "I", 8)
    cap = TABLE_ROW_CAP if section.display is Display.TABLE else CHART_POINT_CAP
    note = f"Query \"{data.query_name}\", version {data.query_version}"
    if data.basis is not None:
        published = format_local_time(datetime.fromisoformat(data.basis["published_at"]), presentation)
        note += (f"; period {data.basis['period'][:7]} (snapshot {data.basis['snapshot_type']}, version "
                 f"{data.basis['version']}, published {published})")
    if data.truncated:
        note += f"; showing the first {cap:,} {'rows' if section.display is Display.TABLE else 'points'} only"
    pdf.cell(0, 5, _printable(note), new_x="LMARGIN", new_y="NEXT")
    if not data.rows:
        pdf.set_font(FONT, "", 9)
        pdf.cell(0, 6, "No rows.", new_x="LMARGIN", new_y="NEXT")
        return
    if section.display is Display.TABLE:
        _table(pdf, data, presentation)
        return
    kinds = data.kinds or (None,) * len(data.columns)
    sources = currency_sources(data.kinds) if data.kinds else [None] * len(data.columns)
    label_at, value_at = data.columns.index(section.label_column), data.columns.index(section.value_column)
    money = kinds[value_at] is not None and kinds[value_at].type is ColumnType.MONEY
    points: list[tuple[str, float]] = []
    texts: list[str] = []
    for r in data.rows:
        value = r[value_at]
        if value is None:
            continue
        label = cell_text(r[label_at], kinds[label_at], r, sources[label_at], presentation)
        if money:
            currency = _currency(r, sources[value_at], presentation)
            points.append((label, float(major_units(value, currency))))
            texts.append(format_money(value, currency, presentation.locale))
        else:
            points.append((label, float(value)))
            texts.append(_number(float(value)))
    if section.display is Display.BAR_CHART:
        _bar_chart(pdf, points, texts)
    else:
        _line_chart(pdf, points, None if not money else presentation)


def _table(pdf: Any, data: SectionData, presentation: Presentation) -> None:
    kinds = data.kinds or (None,) * len(data.columns)
    sources = currency_sources(data.kinds) if data.kinds else [None] * len(data.columns)
    headers = file_headers(data.kinds, presentation) if data.kinds else list(data.headers)
    pdf.set_font(FONT, "", 7)
    with pdf.table(first_row_as_headings=True, line_height=4, text_align="LEFT", repeat_headings=1) as table:
        header = table.row()
        for label in headers:
            header.cell(_printable(label))
        for values in data.rows:
            row = table.row()
            for i, value in enumerate(values):
                row.cell(_printable(cell_text(value, kinds[i], values, sources[i], presentation)[:200]))


def _domain(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(0.0, *values), max(0.0, *values)
    return (lo, hi) if hi > lo else (lo, lo + 1.0)


def _bar_chart(pdf: Any, points: list[tuple[str, float]], texts: list[str]) -> None:
    """Horizontal bars from zero, one per point: label on the left, value (``texts``) after the bar."""
    if not points:
        return
    label_w, value_w, bar_h, gap = 60.0, 28.0, 5.0, 1.5
    left = pdf.l_margin
    plot_w = pdf.w - pdf.l_margin - pdf.r_margin - label_w - value_w
    lo, hi = _domain([v for _, v in points])

    def x(value: float) -> float:
        return left + label_w + (value - lo) / (hi - lo) * plot_w

    pdf.set_font(FONT, "", 7)
    pdf.set_fill_color(70, 110, 170)
    pdf.set_draw_color(90, 90, 90)
    pdf.ln(2)
    for (label, value), text in zip(points, texts, strict=True):
        if pdf.will_page_break(bar_h + gap):
            pdf.add_page()
        y = pdf.get_y()
        pdf.set_xy(left, y)
        pdf.cell(label_w - 2, bar_h, _printable(label[:40]), align="R")
        start, end = sorted((x(0.0), x(value)))
        pdf.rect(start, y + 0.5, max(end - start, 0.2), bar_h - 1, style="F")
        pdf.set_xy(x(max(value, 0.0)) + 1, y)
        pdf.cell(value_w, bar_h, _printable(text))
        pdf.set_y(y + bar_h + gap)


def _line_chart(pdf: Any, points: list[tuple[str, float]], money: Presentation | None) -> None:
    """A polyline over the points in query order, with the value range on the left axis
    and the first, middle and last labels under the horizontal axis; ``money``: the values
    are major units of the workspace's currency (the axis says so)."""
    if not points:
        return
    height, axis_w = 70.0, 25.0
    if pdf.will_page_break(height + 12):
        pdf.add_page()
    top = pdf.get_y() + 3
    left = pdf.l_margin + axis_w
    width = pdf.w - pdf.r_margin - left
    lo, hi = _domain([v for _, v in points])
    n = len(points)

    def xy(i: int, value: float) -> tuple[float, float]:
        px = left + (width * i / (n - 1) if n > 1 else width / 2)
        return px, top + height - (value - lo) / (hi - lo) * height

    pdf.set_draw_color(90, 90, 90)
    pdf.set_line_width(0.2)
    pdf.line(left, top, left, top + height)
    pdf.line(left, top + height, left + width, top + height)
    pdf.set_font(FONT, "", 7)
    for value in (lo, hi):
        pdf.set_xy(pdf.l_margin, xy(0, value)[1] - 2)
        pdf.cell(axis_w - 2, 4, _printable(_number(value) + (f" {money.currency}" if money else "")), align="R")
    pdf.set_draw_color(70, 110, 170)
    pdf.set_line_width(0.5)
    coordinates = [xy(i, v) for i, (_, v) in enumerate(points)]
    if n > 1:
        pdf.polyline(coordinates)
    for cx, cy in coordinates:
        pdf.circle(x=cx, y=cy, radius=0.7, style="F")
    pdf.set_line_width(0.2)
    for i in sorted({0, n // 2, n - 1}):
        cx = coordinates[i][0]
        pdf.set_xy(min(max(cx - 20, left), pdf.w - pdf.r_margin - 40), top + height + 1)
        pdf.cell(40, 4, _printable(points[i][0][:30]), align="C")
    pdf.set_y(top + height + 7)


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
