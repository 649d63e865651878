"""The access rule (timekeeper.platform.access) against real directory rows: the sample
set's personas in berlin, saved queries and reports inserted with SQL (live, deleted, and
another workspace's), every permission and every refusal reason."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from timekeeper.db.connection import connect
from timekeeper.local.platform_data import load_sample
from timekeeper.platform import access
from timekeeper.platform.access import (
    LEFT_WORKSPACE,
    MISSING_ROLE,
    NOT_A_MEMBER,
    NOT_FOUND,
    PERMISSIONS,
    QUERIES_READ,
    QUERIES_WRITE,
    REPORTS_READ,
    REPORTS_WRITE,
    USER_DEACTIVATED,
    AccessDenied,
)
from timekeeper.platform.directory import add_member, leave_workspace, set_user_status, upsert_user

NOW = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)


def _insert_query(conn, workspace_id: uuid.UUID, *, deleted: bool = False) -> uuid.UUID:
    query_id = uuid.uuid4()
    conn.execute("INSERT INTO saved_queries (id, workspace_id, name, current_version, created_by, created_at, "
                 "updated_at, deleted_at) VALUES (%s, %s, 'q', 1, 'sql', %s, %s, %s)",
                 (query_id, workspace_id, NOW, NOW, NOW if deleted else None))
    conn.execute("INSERT INTO saved_query_versions (workspace_id, query_id, version, definition, created_by, "
                 "created_at) VALUES (%s, %s, 1, %s, 'sql', %s)",
                 (workspace_id, query_id, json.dumps({"entity": "members", "columns": ["id"]}), NOW))
    return query_id


def _insert_report(conn, workspace_id: uuid.UUID, *, deleted: bool = False) -> uuid.UUID:
    report_id = uuid.uuid4()
    conn.execute("INSERT INTO reports (id, workspace_id, name, current_version, created_by, created_at, updated_at, "
                 "deleted_at) VALUES (%s, %s, 'r', 1, 'sql', %s, %s, %s)",
                 (report_id, workspace_id, NOW, NOW, NOW if deleted else None))
    return report_id


@pytest.fixture(scope="module")
def world(db_url):
    """The sample set, and in berlin a live and a deleted query and report; in sydney a
    live query and report."""
    with connect(db_url) as conn:
        sample = load_sample(conn, now=NOW)
        berlin, sydney = sample.workspaces["berlin"], sample.workspaces["sydney"]
        with conn.transaction():
            objects = {
                "query": _insert_query(conn, berlin), "deleted_query": _insert_query(conn, berlin, deleted=True),
                "report": _insert_report(conn, berlin), "deleted_report": _insert_report(conn, berlin, deleted=True),
                "other_query": _insert_query(conn, sydney), "other_report": _insert_report(conn, sydney),
            }
    return sample, objects


def check(conn, world, persona: str, permission: str, obj: str | None = None, workspace: str = "berlin"):
    """The rule's decision for ``persona`` of the sample in ``workspace``: on the person
    only (``obj`` None), else on the named query or report."""
    sample, objects = world
    user, ws = sample.users[persona], sample.workspaces[workspace]
    if obj is None:
        return access.check_person(conn, workspace_id=ws, user_id=user, permission=permission)
    if "query" in obj:
        return access.check_query(conn, workspace_id=ws, user_id=user, query_id=objects[obj], permission=permission)
    return access.check_report(conn, workspace_id=ws, user_id=user, report_id=objects[obj], permission=permission)


#: What each berlin persona's roles allow (the sample's roles; the table of access.py).
EXPECTED = {
    "admin": set(PERMISSIONS),
    "analyst": {QUERIES_READ, QUERIES_WRITE, REPORTS_READ, REPORTS_WRITE},  # queries:write + reports:write
    "viewer": {QUERIES_READ, REPORTS_READ},  # queries:read + reports:read
    "no_email": {QUERIES_READ, REPORTS_READ},  # an address is not needed for access
    "multi": {REPORTS_READ},
}


@pytest.mark.parametrize("persona", EXPECTED)
@pytest.mark.parametrize("permission", PERMISSIONS)
def test_each_role_grants_exactly_its_permissions(conn, world, persona, permission):
    obj = "query" if permission.startswith("queries") else "report"
    decision = check(conn, world, persona, permission, obj)
    if permission in EXPECTED[persona]:
        assert decision and decision.reason is None
    else:
        assert not decision and decision.reason == MISSING_ROLE


@pytest.mark.parametrize(("persona", "workspace", "reason"), [
    ("deactivated", "berlin", USER_DEACTIVATED),  # roles that would allow it, but deactivated
    ("left", "berlin", LEFT_WORKSPACE),
    ("outsider", "berlin", NOT_A_MEMBER),  # never a member of any workspace
    ("sydney_admin", "berlin", NOT_A_MEMBER),  # another workspace's admin
    ("admin", "sydney", NOT_A_MEMBER),  # berlin's admin, asking in sydney
])
@pytest.mark.parametrize("permission", [QUERIES_READ, REPORTS_WRITE])
def test_people_who_may_not_act_get_the_reason(conn, world, persona, workspace, reason, permission):
    for obj in (None, "query" if permission == QUERIES_READ else "report"):
        decision = check(conn, world, persona, permission, obj if workspace == "berlin" else None, workspace)
        assert (decision.allowed, decision.reason) == (False, reason)


def test_an_unknown_user_is_not_a_member(conn, world):
    sample, objects = world
    decision = access.check_query(conn, workspace_id=sample.workspaces["berlin"], user_id="nobody-at-all",
                                  query_id=objects["query"])
    assert (decision.allowed, decision.reason) == (False, NOT_A_MEMBER)


@pytest.mark.parametrize("obj", ["deleted_query", "other_query", "deleted_report", "other_report", "missing"])
def test_a_deleted_or_other_workspaces_object_is_not_found(conn, world, obj):
    sample, objects = world
    berlin, admin = sample.workspaces["berlin"], sample.users["admin"]
    if obj == "missing":
        decisions = [access.check_query(conn, workspace_id=berlin, user_id=admin, query_id=uuid.uuid4()),
                     access.check_report(conn, workspace_id=berlin, user_id=admin, report_id=uuid.uuid4())]
    elif "query" in obj:
        decisions = [access.check_query(conn, workspace_id=berlin, user_id=admin, query_id=objects[obj],
                                        permission=p) for p in (QUERIES_READ, QUERIES_WRITE)]
    else:
        decisions = [access.check_report(conn, workspace_id=berlin, user_id=admin, report_id=objects[obj],
                                         permission=p) for p in (REPORTS_READ, REPORTS_WRITE)]
    assert [(d.allowed, d.reason) for d in decisions] == [(False, NOT_FOUND)] * len(decisions)


def test_the_person_is_checked_before_the_object(conn, world):
    # A deleted query asked for by someone who left: the person's reason, not not_found
    assert check(conn, world, "left", QUERIES_READ, "deleted_query").reason == LEFT_WORKSPACE
    assert check(conn, world, "viewer", QUERIES_WRITE, "other_query").reason == MISSING_ROLE


def test_reading_a_report_needs_reports_read_only(conn, world):
    # multi holds reports:read and nothing for queries in berlin: the report reads, its queries do not
    assert check(conn, world, "multi", REPORTS_READ, "report")
    assert check(conn, world, "multi", QUERIES_READ, "query").reason == MISSING_ROLE
    assert check(conn, world, "multi", REPORTS_WRITE, "report").reason == MISSING_ROLE


def test_the_rule_reads_the_directory_as_it_is_now(db_url, world):
    # Access lost after a decision is seen by the next one: leave, deactivate, rejoin
    sample, objects = world
    berlin = sample.workspaces["berlin"]
    with connect(db_url) as conn:
        with conn.transaction():
            upsert_user(conn, user_id="changing", display_name="C", email="c@example.org", now=NOW)
            add_member(conn, workspace_id=berlin, user_id="changing", roles=["queries:read"], now=NOW)

        def decide():
            return access.check_query(conn, workspace_id=berlin, user_id="changing", query_id=objects["query"])

        first = decide()
        with conn.transaction():
            leave_workspace(conn, workspace_id=berlin, user_id="changing", now=NOW)
        after_leaving = decide()
        with conn.transaction():
            add_member(conn, workspace_id=berlin, user_id="changing", roles=["reports:read"], now=NOW)
        rejoined_other_role = decide()
        with conn.transaction():
            set_user_status(conn, "changing", "deactivated", now=NOW)
        deactivated = decide()
    assert first and (after_leaving.reason, rejoined_other_role.reason, deactivated.reason) == \
        (LEFT_WORKSPACE, MISSING_ROLE, USER_DEACTIVATED)


def test_require_raises_with_the_reason(conn, world):
    decision = check(conn, world, "viewer", QUERIES_WRITE, "query")
    with pytest.raises(AccessDenied) as refused:
        access.require(decision, "change query")
    assert refused.value.reason == MISSING_ROLE
    access.require(check(conn, world, "viewer", QUERIES_READ, "query"), "read query")
    with pytest.raises(ValueError):
        access.check_person(conn, workspace_id=world[0].workspaces["berlin"], user_id="x", permission="queries:own")
