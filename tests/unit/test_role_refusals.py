"""A 403 for a missing role names the role, and another role that would allow it only
where one does."""

from uuid import uuid4

import pytest

from timekeeper.api.auth import Identity
from timekeeper.api.errors import ApiError


@pytest.mark.parametrize(("permission", "message"), [
    ("schedules:write", "this action needs the role schedules:write (or schedules:admin)"),
    ("queries:write", "this action needs the role queries:write (or queries:admin)"),
    ("reports:read", "this action needs the role reports:read (or reports:write)"),
    ("reports:write", "this action needs the role reports:write"),
    ("snapshots:read", "this action needs the role snapshots:read"),
])
def test_a_missing_role_is_named_with_the_role_that_also_allows_it(permission, message):
    with pytest.raises(ApiError) as refused:
        Identity(user_id="u", workspace_id=uuid4(), roles=frozenset({"notices:own"})).require(permission)
    assert (refused.value.status, refused.value.message) == (403, message)


def test_each_named_alternative_really_allows_the_permission():
    from timekeeper.api.auth import _ADMIN_OF, ROLE_PERMISSIONS

    assert all(permission in ROLE_PERMISSIONS[role] for permission, role in _ADMIN_OF.items())
