"""Query schedules: create and change a scheduled delivery (a ``schedules`` row of owner
``queries``, work kind ``queries.deliver``, with its ``query_schedules`` settings and
recipients) for the API, the local stack and the tests.

Every check names its field (:class:`SettingsInvalid`): the source exists in the workspace
(``source.query_id`` / ``source.query_version`` / ``source.report_id``), the format fits the
source (``format``: csv or xlsx for a query, pdf for a report), the templates use named
placeholders only (``subject_template`` / ``body_template``), each recipient is a current
member of the workspace allowed to read the source now (``recipients[i]``, with the
access rule's reason). The person saving it must be allowed to read
the source now (``access.AccessDenied`` with the rule's reason): that person becomes the
schedule's owner, whose access automatic runs use.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.keyset import Keyset, keyset_rows
from timekeeper.db.rows import execute, fetch_rows, fetch_value
from timekeeper.platform import access
from timekeeper.platform.directory import member_with_user
from timekeeper.reporting import reports, store
from timekeeper.reporting.delivery import (
    DELIVER,
    MAX_RECIPIENTS,
    OWNER,
    QuerySchedule,
    check_source_access,
    contacts,
    get_query_schedule,
    list_recipients,
)
from timekeeper.reporting.templates import TemplateInvalid, check_template, require_link
from timekeeper.schedules import service
from timekeeper.schedules.models import Schedule
from timekeeper.schedules.runs import Event, record_events
from timekeeper.schedules.work import WorkKindRegistry

SQL = load_queries("timekeeper.reporting", "query_schedules.sql")

#: The longest lifetime of a delivery's signed links (hours); the files bucket keeps
#: delivered files longer (``infra.storage``).
MAX_LINK_TTL_HOURS = 720


class SettingsInvalid(ValueError):
    """A query schedule's settings are refused: ``field`` names the input, ``reason`` says
    why (safe to show)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Source:
    """What a schedule delivers: ``kind`` ``query`` (``query_id``, ``query_version`` pinned;
    None pins the current one) or ``report`` (``report_id``: the current version at each run)."""

    kind: str
    query_id: UUID | None = None
    query_version: int | None = None
    report_id: UUID | None = None


#: A delivery's signed links live this long unless its settings say otherwise (hours).
DEFAULT_LINK_TTL_HOURS = 168


@dataclass(frozen=True, kw_only=True)
class NewQuerySchedule:
    """The settings of a query schedule to create: its ``name``, ``recurrence`` (a rule's
    JSON object), ``source`` (:class:`Source`), ``format`` (``csv`` | ``xlsx`` for a query,
    ``pdf`` for a report), ``recipients`` (user ids, at most
    :data:`~timekeeper.reporting.delivery.MAX_RECIPIENTS`), the ``subject_template`` and
    ``body_template``, whether a run with no rows is skipped (``skip_when_empty``), the
    links' lifetime (``link_ttl_hours``, 1..:data:`MAX_LINK_TTL_HOURS`) and whether the
    schedule starts ``active``. Checked by :func:`create_query_schedule`."""

    name: str
    recurrence: dict[str, Any]
    source: Source
    format: str
    recipients: list[str]
    subject_template: str
    body_template: str
    skip_when_empty: bool = False
    link_ttl_hours: int = DEFAULT_LINK_TTL_HOURS
    active: bool = True


def _check_source(conn: psycopg.Connection, workspace_id: UUID, source: Source, fmt: str) -> Source:
    if source.kind == "query":
        if source.query_id is None:
            raise SettingsInvalid("source.query_id", "a query source needs query_id")
        if source.report_id is not None:
            raise SettingsInvalid("source.report_id", "a query source takes no report_id")
        if fmt not in ("csv", "xlsx"):
            raise SettingsInvalid("format", "a query is delivered as csv or xlsx")
        try:
            version = store.get_version(conn, workspace_id=workspace_id, query_id=source.query_id,
                                        version=source.query_version)
            store.get_query(conn, workspace_id=workspace_id, query_id=source.query_id)
        except store.QueryNotFound:
            field = "source.query_version" if source.query_version is not None else "source.query_id"
            raise SettingsInvalid(field, "no such query (or version) in this workspace") from None
        return Source("query", query_id=source.query_id, query_version=version.version)
    if source.kind == "report":
        if source.report_id is None:
            raise SettingsInvalid("source.report_id", "a report source needs report_id")
        if source.query_id is not None or source.query_version is not None:
            field = "source.query_id" if source.query_id is not None else "source.query_version"
            raise SettingsInvalid(field, "a report source takes no query_id or query_version")
        if fmt != "pdf":
            raise SettingsInvalid("format", "a report is delivered as pdf")
        try:
            reports.get_report(conn, workspace_id=workspace_id, report_id=source.report_id)
        except reports.ReportNotFound:
            raise SettingsInvalid("source.report_id", "no such report in this workspace") from None
        return Source("report", report_id=source.report_id)
    raise SettingsInvalid("source.kind", "query or report")


def _check_name(name: str) -> None:
    if not name.strip():
        raise SettingsInvalid("name", "a name needs a character other than white space")


def _check_recipients(conn: psycopg.Connection, workspace_id: UUID, recipients: list[str]) -> list[str]:
    if not recipients:
        raise SettingsInvalid("recipients", "at least one recipient")
    if len(recipients) > MAX_RECIPIENTS:
        raise SettingsInvalid("recipients", f"at most {MAX_RECIPIENTS} recipients")
    for i, user_id in enumerate(recipients):
        user, membership = member_with_user(conn, workspace_id=workspace_id, user_id=user_id)
        if user is None or membership is None or not membership.current:
            raise SettingsInvalid(f"recipients[{i}]", "not a current member of this workspace")
    return sorted(set(recipients))


def _check_recipients_read(conn: psycopg.Connection, settings: QuerySchedule, recipients: list[str]) -> None:
    """Each of ``recipients`` (in the order given) must be allowed to read the schedule's
    source now, by the access rule the runs apply (``queries:read`` on the query,
    ``reports:read`` on the report): else :class:`SettingsInvalid` naming ``recipients[i]``
    with the rule's reason. So a recipient the run would skip as ``no_access`` is refused
    when the schedule is saved, as a member who left is."""
    for i, user_id in enumerate(recipients):
        decision = check_source_access(conn, settings, user_id)
        if not decision:
            name = (contacts(conn, [user_id]).get(user_id) or {}).get("display_name")
            raise SettingsInvalid(f"recipients[{i}]", access.refusal_sentence(
                f"{name} ({user_id})" if name else user_id, decision.reason, settings.source_kind))


def _check_templates(subject_template: str, body_template: str, *, body_link: bool = True) -> None:
    """Check both templates (``SettingsInvalid`` naming the field); ``body_link``: the body
    must name ``{{ link }}`` (an update that keeps a body saved before the rule does not
    re-check it)."""
    for name, text in (("subject_template", subject_template), ("body_template", body_template)):
        try:
            check_template(text, name, html=name == "body_template")
            if name == "body_template" and body_link:
                require_link(text, name)
        except TemplateInvalid as error:
            raise SettingsInvalid(error.field, error.reason) from None


#: The format a draft is previewed in when it names none: the first its source is delivered in.
DEFAULT_FORMATS = {"query": "csv", "report": "pdf"}
#: A draft's stand-in schedule id (no opt-out or suppression of a saved schedule applies to it).
DRAFT_ID = UUID(int=0)


def draft_settings(conn: psycopg.Connection, *, workspace_id: UUID, actor: str, source: Source, fmt: str | None,
                   name: str, subject_template: str, body_template: str, link_ttl_hours: int,
                   now: datetime) -> QuerySchedule:
    """The settings of a delivery that is not saved yet, checked as :func:`create_query_schedule`
    checks them (the source exists, the format fits it, the templates are safe, the link's
    lifetime is 1..:data:`MAX_LINK_TTL_HOURS` hours; :class:`SettingsInvalid` naming the
    field), with ``actor`` as its owner: what a preview composes from. ``fmt`` None takes
    the source's first format. Raises ``access.AccessDenied`` when ``actor`` may not read the
    source."""
    _check_name(name)
    checked = _check_source(conn, workspace_id, source, fmt or DEFAULT_FORMATS.get(source.kind, "csv"))
    _check_templates(subject_template, body_template)
    if not 1 <= link_ttl_hours <= MAX_LINK_TTL_HOURS:
        raise SettingsInvalid("link_ttl_hours", "1..720")
    draft = QuerySchedule(schedule_id=DRAFT_ID, workspace_id=workspace_id, name=name, owner_user_id=actor,
                          source_kind=checked.kind, query_id=checked.query_id, query_version=checked.query_version,
                          report_id=checked.report_id, format=fmt or DEFAULT_FORMATS[checked.kind],
                          skip_when_empty=False, subject_template=subject_template, body_template=body_template,
                          link_ttl_hours=link_ttl_hours, created_at=now, updated_at=now)
    access.require(check_source_access(conn, draft, actor), f"read the {checked.kind}")
    return draft


def check_recipient(conn: psycopg.Connection, *, workspace_id: UUID, source: Source,
                    user_id: str) -> access.Decision:
    """Whether ``user_id`` may be a recipient of a delivery of ``source`` now: the access
    rule the saving applies (a current, active member allowed to read the query or the
    report, :func:`~timekeeper.reporting.delivery.check_source_access`). Raises
    :class:`SettingsInvalid` naming ``source.*`` for a source that is not in the
    workspace."""
    checked = _check_source(conn, workspace_id, source, DEFAULT_FORMATS.get(source.kind, "csv"))
    probe = QuerySchedule(schedule_id=DRAFT_ID, workspace_id=workspace_id, name="", owner_user_id=user_id,
                          source_kind=checked.kind, query_id=checked.query_id, query_version=checked.query_version,
                          report_id=checked.report_id, format=DEFAULT_FORMATS[checked.kind], skip_when_empty=False,
                          subject_template="", body_template="", link_ttl_hours=DEFAULT_LINK_TTL_HOURS,
                          created_at=datetime.min, updated_at=datetime.min)
    return check_source_access(conn, probe, user_id)


def schedule_recurrence(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> dict[str, Any] | None:
    """A query schedule's saved rule as the API takes it, with its ``timezone`` (None: no
    such schedule)."""
    value = fetch_value(conn, SQL["schedule_recurrence"], (workspace_id, schedule_id))
    return dict(value) if value is not None else None


def _replace_recipients(conn: psycopg.Connection, workspace_id: UUID, schedule_id: UUID, recipients: list[str],
                        now: datetime) -> None:
    execute(conn, SQL["delete_recipients"], (workspace_id, schedule_id))
    with conn.cursor() as cur:
        cur.executemany(SQL["insert_recipient"], [(workspace_id, schedule_id, u, now) for u in recipients])


def create_query_schedule(conn: psycopg.Connection, *, workspace_id: UUID, actor: str, new: NewQuerySchedule,
                          now: datetime, kinds: WorkKindRegistry | None = None) -> tuple[Schedule, QuerySchedule]:
    """Create the query schedule ``new`` (:class:`NewQuerySchedule`) in ``workspace_id``, owned
    by ``actor``, at ``now`` (aware UTC), in one transaction; ``kinds``: the work kinds the
    scheduling library checks the kind against (None: no check). Returns the schedule and
    its settings. Raises :class:`SettingsInvalid`, ``access.AccessDenied`` (``actor`` may
    not read the source) and the scheduling library's ``InvalidRecurrence``."""
    _check_name(new.name)
    with conn.transaction():
        checked = _check_source(conn, workspace_id, new.source, new.format)
        _check_templates(new.subject_template, new.body_template)
        if not 1 <= new.link_ttl_hours <= MAX_LINK_TTL_HOURS:
            raise SettingsInvalid("link_ttl_hours", "1..720")
        members = _check_recipients(conn, workspace_id, new.recipients)
        created = service.create_schedule(conn, workspace_id=workspace_id, owner=OWNER, work_kind=DELIVER,
                                          recurrence=new.recurrence, actor=actor, now=now, name=new.name,
                                          active=new.active, kinds=kinds, via_own_route=True)
        execute(conn, SQL["insert_settings"],
                (created.id, workspace_id, actor, checked.kind, checked.query_id, checked.query_version,
                 checked.report_id, new.format, new.skip_when_empty, new.subject_template, new.body_template,
                 new.link_ttl_hours, now, now))
        settings = get_query_schedule(conn, workspace_id=workspace_id, schedule_id=created.id)
        assert settings is not None
        access.require(check_source_access(conn, settings, actor), f"read the {checked.kind}")
        _check_recipients_read(conn, settings, new.recipients)
        _replace_recipients(conn, workspace_id, created.id, members, now)
    return created, settings


def update_query_schedule(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, actor: str,
                          now: datetime, name: str | None = None, recurrence: dict[str, Any] | None = None,
                          recipients: list[str] | None = None, subject_template: str | None = None,
                          body_template: str | None = None, skip_when_empty: bool | None = None,
                          link_ttl_hours: int | None = None) -> QuerySchedule:
    """Change a query schedule (None keeps a value); the source and format stay. Raises
    :class:`LookupError` (no such query schedule), :class:`SettingsInvalid` and the
    scheduling library's errors."""
    if name is not None:
        _check_name(name)
    with conn.transaction():
        current = get_query_schedule(conn, workspace_id=workspace_id, schedule_id=schedule_id)
        if current is None:
            raise LookupError(schedule_id)
        before = _audited(conn, current)
        subject = current.subject_template if subject_template is None else subject_template
        body = current.body_template if body_template is None else body_template
        _check_templates(subject, body, body_link=body_template is not None)
        ttl = current.link_ttl_hours if link_ttl_hours is None else link_ttl_hours
        if not 1 <= ttl <= MAX_LINK_TTL_HOURS:
            raise SettingsInvalid("link_ttl_hours", "1..720")
        if recipients is not None:
            members = _check_recipients(conn, workspace_id, recipients)
            _check_recipients_read(conn, current, recipients)
            _replace_recipients(conn, workspace_id, schedule_id, members, now)
        if name is not None or recurrence is not None:
            service.update_schedule(conn, workspace_id=workspace_id, schedule_id=schedule_id, actor=actor, now=now,
                                    recurrence=recurrence, name=name, record_changes=False)
        execute(conn, SQL["update_settings"],
                (subject, body, ttl, current.skip_when_empty if skip_when_empty is None else skip_when_empty,
                 now, workspace_id, schedule_id))
        updated = get_query_schedule(conn, workspace_id=workspace_id, schedule_id=schedule_id)
        assert updated is not None
        after = _audited(conn, updated)
        changes = {field: {"from": value, "to": after[field]} for field, value in before.items()
                   if after[field] != value}
        if recurrence is not None:
            changes["recurrence"] = {"to": recurrence}
        if changes:
            record_events(conn, [Event(schedule_id, workspace_id, "updated", "settings_changed",
                                       {"changes": changes})], actor=actor, now=now)
    return updated


#: The settings whose every change is a history event (``updated``, reason
#: ``settings_changed``, detail ``{"changes": {field: {"from": old, "to": new}}}``). The
#: source and the format are fixed once saved; the owner changes only by reassignment
#: (``owner_changed``).
AUDITED_FIELDS = ("name", "recipients", "subject_template", "body_template", "format", "source",
                  "skip_when_empty", "link_ttl_hours", "owner_user_id")


def _audited(conn: psycopg.Connection, settings: QuerySchedule) -> dict[str, Any]:
    """The audited settings of ``settings`` as JSON-ready values."""
    return {
        "name": settings.name, "subject_template": settings.subject_template,
        "body_template": settings.body_template, "format": settings.format,
        "source": {"kind": settings.source_kind, "query_id": str(settings.query_id) if settings.query_id else None,
                   "query_version": settings.query_version,
                   "report_id": str(settings.report_id) if settings.report_id else None},
        "skip_when_empty": settings.skip_when_empty, "link_ttl_hours": settings.link_ttl_hours,
        "owner_user_id": settings.owner_user_id,
        "recipients": list_recipients(conn, workspace_id=settings.workspace_id, schedule_id=settings.schedule_id),
    }


class OwnerRefused(ValueError):
    """The proposed owner may not own the schedule: ``reason`` is the access rule's
    (``user_deactivated``, ``left_workspace``, ``missing_role``, ``not_a_member``...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(access.refusal_sentence("The new owner", reason, "source"))
        self.reason = reason


def reassign_owner(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, owner_user_id: str,
                   actor: str, now: datetime) -> QuerySchedule:
    """Give a query schedule a new owner in one transaction (an admin's action; the route
    checks the caller): the access rule is asked for ``owner_user_id`` on the schedule's
    source now (:class:`OwnerRefused` with the rule's reason), then the delivery's acting
    person and the schedule's owner change together, an ownerless schedule becomes
    paused by its owner (resumable) and an ``owner_changed`` event records the change.
    Raises :class:`LookupError` (no such query schedule)."""
    with conn.transaction():
        current = get_query_schedule(conn, workspace_id=workspace_id, schedule_id=schedule_id)
        if current is None:
            raise LookupError(schedule_id)
        decision = check_source_access(conn, current, owner_user_id)
        if not decision:
            raise OwnerRefused(decision.reason or access.NOT_FOUND)
        execute(conn, SQL["set_owner"], (owner_user_id, now, workspace_id, schedule_id))
        service.set_owner(conn, workspace_id=workspace_id, schedule_id=schedule_id, owner_user_id=owner_user_id,
                          actor=actor, now=now)
        updated = get_query_schedule(conn, workspace_id=workspace_id, schedule_id=schedule_id)
    assert updated is not None
    return updated


def list_query_schedules(conn: psycopg.Connection, *, workspace_id: UUID, after: Keyset | None = None,
                         limit: int = 50, name: str | None = None, source_kind: str | None = None,
                         owner: str | None = None, status: str | None = None) -> list[QuerySchedule]:
    """The workspace's live (not deleted) query schedules, oldest first: at most ``limit``
    after the keyset ``(created_at, schedule_id)`` of the previous page's last row. Each
    filter given narrows them: ``name`` a part of the name (any case), ``source_kind``
    ``query`` or ``report``, ``owner`` the owner's user id, ``status`` the schedule's
    (``active``, ``paused``, ``disabled``)."""
    return keyset_rows(conn, QuerySchedule, select=SQL["list_schedules_from"], where=SQL["list_schedules_where"],
                       params={"ws": workspace_id, "name": name, "source_kind": source_kind, "owner": owner,
                               "status": status},
                       after=after, limit=limit, key=("q.created_at", "q.schedule_id"))


def source_names(conn: psycopg.Connection, *, workspace_id: UUID, query_ids: list[UUID],
                 report_ids: list[UUID]) -> dict[UUID, str]:
    """``{id: name}`` of the workspace's saved queries ``query_ids`` and reports
    ``report_ids`` (deleted ones too: a delivery still names its source)."""
    rows = fetch_rows(conn, SQL["source_names"], {"ws": workspace_id, "queries": query_ids, "reports": report_ids})
    return {row["id"]: str(row["name"]) for row in rows}


@dataclass(frozen=True)
class DeliveryRun:
    """One run of a query schedule with what it delivered (None before the file was made)."""

    run_id: UUID
    trigger: str
    requested_by: str | None
    state: str
    outcome_code: str | None
    occurrence_at: datetime
    finished_at: datetime | None
    acted_for: str | None
    row_count: int | None
    sha256: str | None
    report_version: int | None
    version_changed: bool | None
    #: Per section, the snapshot version the report showed (type, period, version,
    #: publication instant, run id, choice; None: a section over other data).
    snapshot_basis: list[dict[str, Any] | None] | None
    #: A snapshot period the previous run showed is shown in a newer version.
    snapshot_version_changed: bool | None


def list_delivery_runs(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID,
                       after: Keyset | None = None, limit: int = 20) -> list[DeliveryRun]:
    """A query schedule's runs, newest first (by occurrence, then id): at most ``limit``
    before the keyset ``(occurrence_at, id)`` of the previous page's last row."""
    return keyset_rows(
        conn, DeliveryRun,
        select=SQL["list_runs_from"], where=SQL["list_runs_where"],
        params={"ws": workspace_id, "schedule_id": schedule_id}, after=after, limit=limit,
        key=("r.occurrence_at", "r.id"), newest_first=True)
