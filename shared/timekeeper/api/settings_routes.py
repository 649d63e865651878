"""The workspace's settings, for its admins (``workspace:admin`` by the token and by the
access rule): the time zone, the locale of its files and messages, and who gets notices.

Routes (:data:`router`):

* ``GET /settings``: the zone, the locale, ``notify_admins`` and each active, current
  member's notice e-mails (on, or off since when and whether an admin or the person
  turned them off).
* ``POST /settings/zone-preview`` ``{"timezone"}``: what a zone change would do, nothing
  written: how many live schedules are in the current zone (those ``move_schedules``
  moves) and, for the first 20 by name, their next occurrences in the old zone and the new
  one with their next due instant before and after; every one of them whose rule would
  not run in the new zone is listed in ``would_not_run`` (and marked among the 20): a
  change with ``move_schedules`` is then refused.
* ``PATCH /settings`` ``{"timezone"?, "move_schedules"?, "locale"?, "notify_admins"?}``:
  change what is given, with a ``settings.updated`` audit event. An unknown zone or a
  locale CLDR does not know (or of a language the deployment ships no data for) is a 422
  naming the field; so is ``move_schedules`` with more than 1,000 schedules to move, and
  with a schedule whose rule would not run in the new zone (the message names it: its
  name and id).
* ``PUT /settings/notice-mail/<user_id>`` ``{"mail"}``: turn a member's notice e-mails on
  or off (404 for someone not an active, current member; 409 ``persons_own_opt_out`` to
  turn on what the person turned off themselves: only they do that, ``POST /notices/mail``).
"""

from functools import partial
from http import HTTPStatus
from typing import Annotated

from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from pydantic import BaseModel, ConfigDict, Field

from timekeeper.api import errors
from timekeeper.api.auth import WORKSPACE_ADMIN
from timekeeper.api.errors import ApiError
from timekeeper.api.models import TOKEN_PATTERN, OccurrenceOut, UtcDatetime, occurrences_out
from timekeeper.api.routing import SECURITY, ApiRouter
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.platform import access
from timekeeper.platform import workspace_settings as ws
from timekeeper.platform.directory import InvalidLocale, InvalidTimezone

PERSONS_OWN_OPT_OUT = "persons_own_opt_out"

_ERRORS = {401: "No or invalid authorizer claims", 403: "The caller's roles, or the access rule, refuse this",
           404: "No such member in the caller's workspace",
           409: "The person turned their notice e-mails off themselves",
           415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}
_responses = partial(errors.responses, texts=_ERRORS)
Admin = Annotated[WorkspaceScope, Depends(scope_for(WORKSPACE_ADMIN))]
_Zone = Annotated[str, Field(min_length=1, max_length=64, description="an IANA zone name", examples=["Europe/Berlin"])]
_Locale = Annotated[str, Field(min_length=2, max_length=20, description="a CLDR locale identifier",
                               examples=["de_DE"])]

router = ApiRouter()


class MemberNoticeMailOut(BaseModel):
    """A member and whether they get the workspace's notice e-mails."""

    user_id: str
    display_name: str
    mail: bool = Field(description="they get notice e-mails")
    opted_out_at: UtcDatetime | None = Field(description="when they were turned off (UTC); null when on")
    off_by_admin: bool = Field(description="an admin turned them off (an admin may turn them back on); "
                                           "false when on or when the person did")


class SettingsOut(BaseModel):
    """The workspace's settings."""

    timezone: str = Field(description="IANA zone: where people read times and months begin")
    locale: str = Field(description="CLDR locale of the files and messages (money, numbers)")
    notify_admins: bool = Field(description="the admins get a copy of every notice about the workspace's "
                                            "schedules (else the owner alone)")
    members: list[MemberNoticeMailOut] = Field(description="the active, current members by name (at most 500)")


class SettingsChange(BaseModel):
    """The settings to change (omitted or null: unchanged; none given changes nothing)."""

    model_config = ConfigDict(extra="forbid")

    timezone: _Zone | None = None
    move_schedules: bool = Field(False, description="with a zone change, move the schedules whose rule is in the "
                                                    "current zone to the new one (their next due instant is "
                                                    "recomputed from now); at most 1,000, else 422")
    locale: _Locale | None = None
    notify_admins: bool | None = None


class SettingsChanged(SettingsOut):
    """The settings after the change, and how many schedules moved to the new zone."""

    schedules_moved: int = Field(ge=0)


class ZonePreviewIn(BaseModel):
    """The zone to preview."""

    model_config = ConfigDict(extra="forbid")

    timezone: _Zone


class ScheduleZoneOut(BaseModel):
    """One schedule a zone change would move, its next occurrences before and after."""

    id: str
    name: str
    status: str
    before: list[OccurrenceOut] = Field(description="next occurrences with the rule in the current zone")
    after: list[OccurrenceOut] = Field(description="next occurrences with the rule in the new zone")
    next_due_before: UtcDatetime | None = Field(description="its next due instant now (UTC; null when paused)")
    next_due_after: UtcDatetime | None = Field(description="its next due instant once moved (UTC; null when "
                                                           "paused or when it would not run)")
    would_not_run: str | None = Field(None, description="why its rule would not run in the new zone (then "
                                                        "moving the schedules is refused); null when it would")


class WouldNotRunOut(BaseModel):
    """A schedule whose rule would not run in the new zone."""

    id: str
    name: str
    reason: str = Field(description="the rule check's field and reason")


class ZonePreviewOut(BaseModel):
    """What changing the zone from ``old`` to ``new`` would do."""

    old: str
    new: str
    affected: int = Field(ge=0, description="live schedules in the current zone (moved with move_schedules)")
    schedules: list[ScheduleZoneOut] = Field(description="the first 20 of them by name")
    would_not_run: list[WouldNotRunOut] = Field(description="every one of them (by name, up to 1,000) whose rule "
                                                            "would not run in the new zone: a change with "
                                                            "move_schedules is refused while any is listed")


class NoticeMailIn(BaseModel):
    """Whether the member gets the workspace's notice e-mails."""

    model_config = ConfigDict(extra="forbid")

    mail: bool


def _member_out(m: ws.MemberNoticeMail) -> MemberNoticeMailOut:
    return MemberNoticeMailOut(user_id=m.user_id, display_name=m.display_name, mail=m.opted_out_at is None,
                               opted_out_at=m.opted_out_at, off_by_admin=m.set_by is not None)


def _settings_out(conn, workspace_id) -> SettingsOut:  # noqa: ANN001
    settings = ws.get_settings(conn, workspace_id)
    return SettingsOut(timezone=settings.timezone, locale=settings.locale, notify_admins=settings.notify_admins,
                       members=[_member_out(m) for m in ws.list_notice_mail(conn, workspace_id)])


@router.get("/settings", tags=["settings"], operation_id="getSettings", security=SECURITY,
            summary="The workspace's zone, locale and who gets notices (admins)",
            responses=_responses(200, "The settings"))
def get_settings(scope: Admin) -> SettingsOut:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        return _settings_out(conn, scope.workspace_id)


@router.post("/settings/zone-preview", tags=["settings"], operation_id="previewZoneChange", security=SECURITY,
             summary="What a zone change would do to the workspace's schedules; nothing is written (admins)",
             responses=_responses(200, "The schedules in the current zone, before and after", 415))
def preview_zone(scope: Admin, body: Annotated[ZonePreviewIn, Body()]) -> ZonePreviewOut:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        try:
            preview = ws.preview_zone(conn, workspace_id=scope.workspace_id, timezone=body.timezone, now=scope.now)
        except InvalidTimezone as error:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR, str(error), "timezone") from None
    return ZonePreviewOut(old=preview.old, new=preview.new, affected=preview.affected, schedules=[
        ScheduleZoneOut(id=str(s.id), name=s.name, status=s.status, before=occurrences_out(s.before, preview.old),
                        after=occurrences_out(s.after, preview.new), next_due_before=s.next_due_before,
                        next_due_after=s.next_due_after, would_not_run=s.would_not_run) for s in preview.schedules],
        would_not_run=[WouldNotRunOut(id=str(r.schedule_id), name=r.name, reason=r.reason)
                       for r in preview.would_not_run])


@router.patch("/settings", tags=["settings"], operation_id="updateSettings", security=SECURITY,
              summary="Change the workspace's zone, locale or notify_admins, recorded in the audit log (admins)",
              responses=_responses(200, "The settings after the change", 415))
def update_settings(scope: Admin, body: Annotated[SettingsChange, Body()]) -> SettingsChanged:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        try:
            _, moved = ws.update_settings(conn, workspace_id=scope.workspace_id, actor=scope.user_id, now=scope.now,
                                          timezone=body.timezone, move_schedules=body.move_schedules,
                                          locale=body.locale, notify_admins=body.notify_admins)
        except InvalidTimezone as error:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR, str(error), "timezone") from None
        except InvalidLocale as error:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR, str(error), "locale") from None
        except ws.TooManyToMove as error:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR, str(error),
                           "move_schedules") from None
        except ws.ScheduleWouldNotRun as error:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.INVALID_RECURRENCE, str(error), "timezone") from None
        current = _settings_out(conn, scope.workspace_id)
    return SettingsChanged(**current.model_dump(), schedules_moved=moved)


@router.put("/settings/notice-mail/<user_id>", tags=["settings"], operation_id="setMemberNoticeMail",
            security=SECURITY, summary="Turn a member's notice e-mails on or off (admins)",
            responses=_responses(200, "The member's notice e-mails", 404, 409, 415))
def set_notice_mail(scope: Admin, user_id: Annotated[str, Path(min_length=1, max_length=200, pattern=TOKEN_PATTERN,
                                                               description="the member's user id")],
                    body: Annotated[NoticeMailIn, Body()]) -> MemberNoticeMailOut:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        try:
            member = ws.set_notice_mail(conn, workspace_id=scope.workspace_id, user_id=user_id, mail=body.mail,
                                        actor=scope.user_id, now=scope.now)
        except ws.NotAMember:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such member in this workspace") from None
        except ws.PersonsOwnOptOut:
            raise ApiError(HTTPStatus.CONFLICT, PERSONS_OWN_OPT_OUT,
                           "the person turned their notice e-mails off themselves: only they turn them back on",
                           "mail") from None
    return _member_out(member)


__all__ = ["PERSONS_OWN_OPT_OUT", "router"]
