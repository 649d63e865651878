"""The console's sessions, signed out on the server.

Routes (:data:`router`; any signed-in person, with
or without roles; the caller's workspace only):

* ``POST /sessions/{session_id}/revocation``: sign the caller's console session out. The
  id is the random one the console's session cookie holds; from then on every execution
  environment refuses a copy of that cookie (the record is kept as long as a session
  lasts). Repeating it changes nothing.
* ``GET /sessions/{session_id}``: whether that session was signed out (``revoked_at``, or
  null while it was not) and the person's ``display_name``; the console asks it before
  every page and action.
"""

from datetime import datetime
from functools import partial
from typing import Annotated

from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Path
from pydantic import BaseModel, ConfigDict, Field

from timekeeper.api import errors
from timekeeper.api.routing import SECURITY, ApiRouter
from timekeeper.api.scope import WorkspaceScope, signed_in_scope
from timekeeper.platform import sessions

_ERRORS = {401: "No or invalid authorizer claims", 403: "The caller is refused in the token's workspace",
           422: "Invalid input (the field and the reason)"}
_responses = partial(errors.responses, texts=_ERRORS)


class SessionOut(BaseModel):
    """A console session as the server sees it: ``revoked_at`` is when it was signed out
    (UTC), null while it was not."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    revoked_at: datetime | None = Field(description="when the session was signed out; null: it was not")
    display_name: str | None = Field(None, description="the signed-in person's name (null: the directory has "
                                                       "none): what the console's header shows")


#: A handler parameter of this type gets the caller's scope whatever their roles.
Person = Annotated[WorkspaceScope, Depends(signed_in_scope)]
SessionPath = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_-]+$",
                                  description="the console session's id (its cookie's)")]
_TAGS = ["sessions"]

router = ApiRouter()


@router.get("/sessions/<session_id>", tags=_TAGS, operation_id="getSession", security=SECURITY,
            summary="Whether the caller's console session was signed out",
            responses=_responses(200, "The session"))
def get_session(scope: Person, session_id: SessionPath) -> SessionOut:
    with scope.unit() as conn:
        at = sessions.revoked_at(conn, workspace_id=scope.workspace_id, session_id=session_id)
        name = sessions.display_name(conn, user_id=scope.identity.user_id)
    return SessionOut(session_id=session_id, revoked_at=at, display_name=name)


@router.post("/sessions/<session_id>/revocation", tags=_TAGS, operation_id="revokeSession",
             security=SECURITY, summary="Sign the caller's console session out on the server (repeating it "
                                        "changes nothing)",
             responses=_responses(200, "The session, signed out"))
def revoke_session(scope: Person, session_id: SessionPath) -> SessionOut:
    with scope.unit() as conn:
        sessions.revoke(conn, workspace_id=scope.workspace_id, session_id=session_id, now=scope.now)
        at = sessions.revoked_at(conn, workspace_id=scope.workspace_id, session_id=session_id)
    return SessionOut(session_id=session_id, revoked_at=at)
