"""A work kind's declared input is checked when a schedule is created or changed:
``batch.roll`` needs a recurring batch and ``batch.auto_close`` a batch of the caller's
workspace as ``subject_id``. Missing, unknown, of the wrong type or of another workspace:
the same 422 naming ``subject_id`` (another workspace's subject never shows it exists)."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from tests.api.conftest import NOW, Caller, new_schedule
from timekeeper.accounting import books


@pytest.fixture
def subjects(conn, caller):
    """A recurring batch and a standalone batch in the caller's workspace, and a recurring
    batch in another workspace."""
    def recurring(workspace_id):
        calendar = books.create_calendar(conn, workspace_id=workspace_id, name="books", timezone="UTC",
                                         first_period_start=date(2027, 3, 1), periods=3)
        return books.create_recurring_batch(conn, workspace_id=workspace_id, calendar_id=calendar.id,
                                            name="daily", opens_on=date(2027, 3, 1), now=NOW)

    with conn.transaction():
        mine = recurring(caller.workspace_id)
        batch = books.create_batch(conn, workspace_id=caller.workspace_id, name="one-off", now=NOW)
        theirs = recurring(uuid.uuid4())
    return {"recurring": str(mine.id), "batch": str(batch.id), "other_workspace": str(theirs.id)}


def roll(**overrides):
    return new_schedule(work_kind="batch.roll", name="daily roll", **overrides)


def test_create_of_a_kind_without_its_required_subject_is_422_naming_subject_id(call):
    # Given a batch.roll and a batch.auto_close schedule without a subject
    for kind, noun in (("batch.roll", "recurring batch"), ("batch.auto_close", "batch")):
        # When they are created
        reply = call("POST", "/schedules", new_schedule(work_kind=kind))
        # Then each is refused, naming the field and what the kind needs
        assert reply.status == 422, reply.body
        assert reply.body == {"code": "validation_error", "field": "subject_id",
                              "message": f"{kind} needs the id of a {noun} of this workspace"}
    assert call("GET", "/schedules").body["items"] == []


@pytest.mark.parametrize("which", ["unknown", "wrong_type", "other_workspace"])
def test_create_with_a_subject_not_found_in_the_workspace_is_the_same_422(call, subjects, which):
    # Given a subject id that is unknown, a batch instead of a recurring batch, or another workspace's
    subject = {"unknown": str(uuid.uuid4()), "wrong_type": subjects["batch"],
               "other_workspace": subjects["other_workspace"]}[which]
    # When a batch.roll schedule is created with it
    reply = call("POST", "/schedules", roll(subject_id=subject))
    # Then it is the one refusal of an unknown subject (nothing tells another workspace's apart)
    assert reply.status == 422, reply.body
    assert reply.body == {"code": "validation_error", "field": "subject_id",
                          "message": "no recurring batch with this id in this workspace"}


def test_create_with_the_declared_subject_is_201(call, subjects):
    assert call("POST", "/schedules", roll(subject_id=subjects["recurring"])).status == 201
    assert call("POST", "/schedules", new_schedule(work_kind="batch.auto_close",
                                                   subject_id=subjects["batch"])).status == 201
    # and kinds that declare nothing take any subject or none
    assert call("POST", "/schedules", new_schedule(subject_id=str(uuid.uuid4()))).status == 201


def test_update_to_a_subject_not_found_is_422_and_changes_nothing(call, subjects):
    # Given a valid batch.roll schedule
    created = call("POST", "/schedules", roll(subject_id=subjects["recurring"])).body
    # When its subject is changed to another workspace's recurring batch, or a batch
    for subject in (subjects["other_workspace"], subjects["batch"]):
        reply = call("PATCH", f"/schedules/{created['id']}", {"subject_id": subject})
        # Then it is refused naming subject_id
        assert reply.status == 422, reply.body
        assert reply.body["field"] == "subject_id"
    # And the schedule is unchanged; a change that keeps the valid subject is accepted
    assert call("GET", f"/schedules/{created['id']}").body["schedule"]["definition_version"] == 1
    renamed = call("PATCH", f"/schedules/{created['id']}", {"name": "renamed"})
    assert renamed.status == 200 and renamed.body["subject_id"] == subjects["recurring"]


def test_another_workspace_cannot_use_my_subject(call, subjects, caller):
    # Given a caller of another workspace who knows my recurring batch's id
    stranger = Caller(workspace_id=uuid.uuid4())
    # When they create a batch.roll schedule on it
    reply = call("POST", "/schedules", roll(subject_id=subjects["recurring"]), as_=stranger)
    # Then it is the refusal of an unknown subject
    assert reply.status == 422 and reply.body["message"] == "no recurring batch with this id in this workspace"


def test_billing_prepare_takes_its_workspace_s_plan_or_no_subject(call, conn, caller):
    # Given a billing plan in the caller's workspace and one in another workspace
    with conn.transaction():
        mine = books.create_billing_plan(conn, workspace_id=caller.workspace_id, customer="Ada", amount="10.00",
                                         currency="EUR", interval_months=1, first_bill_date=date(2027, 4, 1))
        theirs = books.create_billing_plan(conn, workspace_id=uuid.uuid4(), customer="Bob", amount="10.00",
                                           currency="EUR", interval_months=1, first_bill_date=date(2027, 4, 1))
    # When billing.prepare schedules are created with my plan, with none, with theirs and with an unknown id
    prepare = {"work_kind": "billing.prepare", "name": "monthly billing"}
    assert call("POST", "/schedules", new_schedule(subject_id=str(mine.id), **prepare)).status == 201
    assert call("POST", "/schedules", new_schedule(**prepare)).status == 201
    for subject in (theirs.id, uuid.uuid4()):
        reply = call("POST", "/schedules", new_schedule(subject_id=str(subject), **prepare))
        # Then another workspace's plan and an unknown id are the one refusal naming subject_id
        assert reply.status == 422, reply.body
        assert reply.body == {"code": "validation_error", "field": "subject_id",
                              "message": "no billing plan with this id in this workspace"}
