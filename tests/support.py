"""Test doubles for adapters (never for our repository layer) and small builders."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from timekeeper.schedules.dispatcher import DispatchSettings
from timekeeper.schedules.messages import RunMessage
from timekeeper.topology import ACCOUNTING


class ListPublisher:
    """A RunPublisher that keeps what it was given and refuses the run ids in ``refuse``."""

    def __init__(self, refuse: set[UUID] | None = None, refuse_all: bool = False):
        self.sent: list[RunMessage] = []
        self.refuse = refuse or set()
        self.refuse_all = refuse_all

    def publish(self, messages: list[RunMessage]) -> set[UUID]:
        refused = {m.run_id for m in messages if self.refuse_all or m.run_id in self.refuse}
        self.sent.extend(m for m in messages if m.run_id not in refused)
        return refused


class ListNotifier:
    """A Notifier that keeps the notices; fails while ``failing`` is true."""

    def __init__(self) -> None:
        self.notices: list[dict[str, Any]] = []
        self.failing = False

    def notify(self, *, subject: str, payload: dict) -> None:
        if self.failing:
            raise RuntimeError("topic unavailable")
        self.notices.append({"subject": subject, "payload": payload})


def sqs_event(*messages: Any, receive_count: int = 1) -> dict[str, Any]:
    """An SQS event as Lambda delivers it; each message is a RunMessage, a dict or a raw string."""
    records = []
    for i, message in enumerate(messages):
        if isinstance(message, RunMessage):
            body = message.model_dump_json()
        elif isinstance(message, dict):
            body = json.dumps(message)
        else:
            body = str(message)
        records.append({
            "messageId": str(uuid.uuid4()), "receiptHandle": f"handle-{i}", "body": body,
            "attributes": {"ApproximateReceiveCount": str(receive_count), "SentTimestamp": "0",
                           "SenderId": "test", "ApproximateFirstReceiveTimestamp": "0"},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:timekeeper-accounting-runs",
            "awsRegion": "us-east-1"})
    return {"Records": records}


def scheduled_event(now: datetime, detail: dict[str, Any] | None = None) -> dict[str, Any]:
    """An EventBridge scheduled event at ``now`` with ``detail`` (a dispatcher partition's
    rule sends ``{"partition": i, "partitions": k}``)."""
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "123456789012", "time": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1", "resources": ["arn:aws:events:us-east-1:123456789012:rule/timekeeper"],
            "detail": dict(detail or {})}


def dispatch_settings(owner: str = "accounting", *, claim_limit: int | None = None,
                      reoffer_after: timedelta | None = None) -> DispatchSettings:
    """The accounting pipeline's dispatcher settings (:meth:`DispatchSettings.of`: 200 schedules
    a claim, re-offers after 15 minutes, 5 attempts, 3 publishes, a pause at 5 failures in a
    row) for ``owner``'s schedules, with the claim limit or re-offer delay a test chooses."""
    settings = DispatchSettings.of(ACCOUNTING)
    limits = settings.limits if reoffer_after is None else dataclasses.replace(settings.limits,
                                                                                 reoffer_after=reoffer_after)
    return dataclasses.replace(settings, owner=owner, limits=limits,
                               claim_limit=settings.claim_limit if claim_limit is None else claim_limit)


def due_messages(conn: Any, *, owner: str, kind: str, now: datetime, count: int) -> list[RunMessage]:
    """Create ``count`` hourly schedules (each in its own workspace) due at ``now`` (a whole
    UTC hour) and let the real dispatcher claim and publish them; return their run messages."""
    from timekeeper.schedules import service
    from timekeeper.schedules.dispatcher import dispatch

    for _ in range(count):
        service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=owner, work_kind=kind,
                                recurrence={"cron": "0 * * * *", "timezone": "UTC"}, actor="t",
                                now=now - timedelta(minutes=30))
    publisher = ListPublisher()
    dispatch(conn, dispatch_settings(owner), now=now, publisher=publisher)
    return publisher.sent


def openpyxl_xlsx(path: str, headers, columns, rows, presentation=None) -> int:
    """The XLSX writer exports used before XlsxWriter (openpyxl's write-only workbook), kept
    as the reference the product's writer is compared with: same arguments and cells as
    :func:`timekeeper.reporting.writers.write_xlsx` (typed date, date-time and money cells
    with the same number formats)."""
    from openpyxl import Workbook
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

    from timekeeper.reporting.catalogue import ColumnType
    from timekeeper.reporting.presentation import (
        DEFAULT_PRESENTATION,
        currency_digits,
        currency_sources,
        xlsx_money_format,
    )
    from timekeeper.reporting.writers import XLSX_DATE_FORMAT, XLSX_DATETIME_FORMAT

    presentation = presentation or DEFAULT_PRESENTATION
    workbook = Workbook(write_only=True)
    sheet = workbook.create_sheet("Export")
    sheet.append(list(headers))

    def text(value, row):
        value = ILLEGAL_CHARACTERS_RE.sub("", value)
        if value.startswith("="):
            cell = WriteOnlyCell(sheet, value=value)
            cell.data_type = "s"
            return cell
        return value

    def formatted(value, number_format):
        cell = WriteOnlyCell(sheet, value=value)
        cell.number_format = number_format
        return cell

    def money(source):
        def convert(value, row):
            currency = (row[source] if source is not None else None) or presentation.currency
            return formatted(value / 10 ** currency_digits(currency),
                             xlsx_money_format(currency, presentation.locale))
        return convert

    converters = []
    for i, (column, source) in enumerate(zip(columns, currency_sources(columns), strict=True)):
        if column.type in (ColumnType.TEXT, ColumnType.ENUM):
            converters.append((i, text))
        elif column.type is ColumnType.DATE:
            converters.append((i, lambda v, row: formatted(v, XLSX_DATE_FORMAT)))
        elif column.type is ColumnType.TIMESTAMP:
            converters.append((i, lambda v, row: formatted(v.astimezone(presentation.zone).replace(tzinfo=None),
                                                           XLSX_DATETIME_FORMAT)))
        elif column.type is ColumnType.MONEY:
            converters.append((i, money(source)))
    count = 0
    for row in rows:
        out = list(row)
        for i, convert in converters:
            if out[i] is not None:
                out[i] = convert(out[i], row)
        sheet.append(out)
        count += 1
    workbook.save(path)
    return count


class ProviderDown:
    """A mailer whose provider cannot be reached: every send raises ``ConnectionError``."""

    def send(self, **_: object) -> str:
        raise ConnectionError("provider down")
