"""Builders for the report tests: a workspace with people, members, invoices and saved
queries, made with the directory functions and plain SQL (no generator)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from uuid import UUID

from timekeeper.platform.directory import add_member, create_workspace, upsert_user
from timekeeper.reporting import store

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)
#: Invoices of every tenant: (member number, invoice number, issue date, amount in minor units, status)
INVOICES = [("M1", "INV-1", date(2027, 1, 5), 1000, "open"), ("M1", "INV-2", date(2027, 1, 20), 2500, "paid"),
            ("M2", "INV-3", date(2027, 2, 1), 700, "open"), ("M3", "INV-4", date(2027, 2, 2), 0, "draft"),
            ("M3", "INV-5", date(2027, 2, 3), 9900, "open")]


@dataclass(frozen=True)
class Tenant:
    """A workspace whose ``author`` may write reports and ``reader`` read them, and two
    saved queries: ``invoices_query`` (number, member_name, amount_minor by number) and
    ``statuses_query`` (number, status)."""

    workspace_id: UUID
    author: str
    reader: str
    invoices_query: UUID
    statuses_query: UUID


def make_tenant(conn, name: str, *, invoices: int | None = None) -> Tenant:
    """Create a tenant (see :class:`Tenant`) with the :data:`INVOICES` (or ``invoices``
    generated ones: INV-00001.. of 100 minor units each)."""
    with conn.transaction():
        ws = create_workspace(conn, name=name, timezone="Europe/Berlin", currency="EUR", now=NOW).id
        author, reader = f"{name}-author", f"{name}-reader"
        for user, roles in ((author, ["reports:write", "queries:write"]), (reader, ["reports:read"])):
            upsert_user(conn, user_id=user, display_name=user, now=NOW)
            add_member(conn, workspace_id=ws, user_id=user, roles=roles, now=NOW)
        members = {}
        for number in ("M1", "M2", "M3"):
            members[number] = conn.execute(
                "INSERT INTO members (workspace_id, member_number, display_name, joined_on) VALUES (%s, %s, %s, %s) "
                "RETURNING id", (ws, number, f"Member {number}", date(2026, 1, 1))).fetchone()["id"]
        rows = INVOICES if invoices is None else [
            ("M1", f"INV-{i:05d}", date(2027, 1, 1), 100, "open") for i in range(1, invoices + 1)]
        for member, number, issued, amount, status in rows:
            conn.execute(
                "INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, currency, "
                "status) VALUES (%s, %s, %s, %s, %s + 30, %s, 'EUR', %s)",
                (ws, members[member], number, issued, issued, amount, status))
        invoices_query, _ = store.create_query(
            conn, workspace_id=ws, name="Invoices", actor=author, now=NOW,
            definition={"entity": "invoices", "columns": ["number", "member_name", "amount_minor"],
                        "sort": [{"column": "number"}]})
        statuses_query, _ = store.create_query(
            conn, workspace_id=ws, name="Statuses", actor=author, now=NOW,
            definition={"entity": "invoices", "columns": ["number", "status"], "sort": [{"column": "number"}]})
    return Tenant(ws, author, reader, invoices_query.id, statuses_query.id)


def definition(tenant: Tenant, title: str = "Monthly invoices", **overrides) -> dict:
    """A three-section report over the tenant's queries: a table, a bar chart, a line chart."""
    out = {"title": title, "sections": [
        {"heading": "All invoices", "query_id": str(tenant.invoices_query), "display": "table"},
        {"heading": "Amount by invoice", "query_id": str(tenant.invoices_query), "display": "bar_chart",
         "label_column": "number", "value_column": "amount_minor"},
        {"heading": "Amount trend", "query_id": str(tenant.invoices_query), "query_version": 1,
         "display": "line_chart", "label_column": "number", "value_column": "amount_minor"},
    ]}
    out.update(overrides)
    return out
