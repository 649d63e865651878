"""``GET /work-kinds`` and ``GET /work-kinds/{owner}/{kind}/subjects``: what a client needs
to make a schedule without knowing an owner module; ``GET /schedules/{id}`` says who made
and last changed it."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from tests.api.conftest import NOW, Caller, new_schedule
from timekeeper.accounting import books
from timekeeper.reporting import delivery


def test_the_work_kinds_are_listed_with_owner_description_and_subject(call):
    reply = call("GET", "/work-kinds")
    assert reply.status == 200, reply.body
    kinds = {(k["owner"], k["kind"]): k for k in reply.body["items"]}
    roll = kinds[("accounting", "batch.roll")]
    assert roll["route"] is None and roll["description"]
    assert roll["subject"] == {"noun": "recurring batch", "required": True, "listed": True}
    assert kinds[("accounting", "billing.prepare")]["subject"]["required"] is False
    assert kinds[("accounting", "reconciliation.sweep")]["subject"] is None
    # a kind with a route of its own says which
    assert kinds[(delivery.OWNER, delivery.DELIVER)]["route"] == "/query-schedules"


def test_the_work_kinds_need_schedules_read(call):
    reply = call("GET", "/work-kinds", as_=Caller(roles="queries:read"))
    assert reply.status == 403 and reply.body["code"] == "forbidden"
    assert call("GET", "/work-kinds", as_=Caller(roles="schedules:read")).status == 200


def test_a_kinds_subjects_are_the_workspaces_by_name(call, batches):
    reply = call("GET", "/work-kinds/accounting/batch.roll/subjects")
    assert reply.status == 200, reply.body
    assert reply.body == {"noun": "recurring batch", "required": True, "items": [
        {"id": batches["cash"], "name": "Cash book"}, {"id": batches["daily"], "name": "Daily sales"}]}


def test_another_workspace_sees_none_of_my_subjects(call, batches):
    stranger = Caller(workspace_id=uuid.uuid4())
    reply = call("GET", "/work-kinds/accounting/batch.roll/subjects", as_=stranger)
    assert reply.status == 200 and reply.body["items"] == []


@pytest.mark.parametrize("target", ["/work-kinds/accounting/no.such/subjects",
                                    "/work-kinds/nobody/batch.roll/subjects",
                                    "/work-kinds/accounting/reconciliation.sweep/subjects"])
def test_a_kind_unknown_or_without_subjects_is_404(call, target):
    reply = call("GET", target)
    assert reply.status == 404 and reply.body["code"] == "not_found"


def test_the_subjects_need_schedules_read(call, batches):
    reply = call("GET", "/work-kinds/accounting/batch.roll/subjects", as_=Caller(roles="queries:read"))
    assert reply.status == 403


def test_a_schedule_says_who_made_and_last_changed_it(call, caller, clock_now):
    created = call("POST", "/schedules", new_schedule()).body
    assert created["created_by"] == caller.user_id
    detail = call("GET", f"/schedules/{created['id']}").body
    assert detail["changed_by"] == caller.user_id and detail["changed_at"] == created["created_at"]
    # When a colleague renames it
    colleague = Caller(user_id="colleague", workspace_id=caller.workspace_id)
    assert call("PATCH", f"/schedules/{created['id']}", {"name": "renamed"}, as_=colleague).status == 200
    detail = call("GET", f"/schedules/{created['id']}").body
    # Then the page says who made it and who last changed it
    assert detail["schedule"]["created_by"] == caller.user_id
    assert detail["changed_by"] == "colleague"
    # and a pause is no change of the definition
    assert call("POST", f"/schedules/{created['id']}/pause").status == 200
    assert call("GET", f"/schedules/{created['id']}").body["changed_by"] == "colleague"


def test_open_batches_and_active_billing_plans_are_the_other_kinds_subjects(call, conn, caller):
    with conn.transaction():
        open_batch = books.create_batch(conn, workspace_id=caller.workspace_id, name="March close", now=NOW)
        closed = books.create_batch(conn, workspace_id=caller.workspace_id, name="February close", now=NOW)
        books.close_batch(conn, workspace_id=caller.workspace_id, batch_id=closed.id, now=NOW)
        plan = books.create_billing_plan(conn, workspace_id=caller.workspace_id, customer="Acme", amount="120.00",
                                         currency="EUR", interval_months=1, first_bill_date=date(2027, 4, 1))
        books.create_billing_plan(conn, workspace_id=caller.workspace_id, customer="Gone", amount="1.00",
                                  currency="EUR", interval_months=1, first_bill_date=date(2027, 4, 1), active=False)
    batches = call("GET", "/work-kinds/accounting/batch.auto_close/subjects").body
    assert batches["items"] == [{"id": str(open_batch.id), "name": "March close"}]
    plans = call("GET", "/work-kinds/accounting/billing.prepare/subjects").body
    assert plans["required"] is False
    assert plans["items"] == [{"id": str(plan.id), "name": "Acme (120.00 EUR, monthly)"}]
