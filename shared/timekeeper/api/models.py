"""Request and response models of the HTTP API; the OpenAPI document is generated from them.

Instants are RFC 3339 strings in UTC (``2027-03-14T07:30:00Z``); a local wall time as
intended by the rule is a naive ``YYYY-MM-DDTHH:MM:SS`` string in the schedule's timezone;
an occurrence's actual local time is an RFC 3339 string with the zone's offset.
Recurrence rules are the JSON forms of :mod:`timekeeper.schedules.recurrence` (cron,
calendar, interval), validated by :func:`timekeeper.schedules.recurrence.parse_rule` (an
invalid rule is a 422 naming the field and the reason); their schema is generated from the
same models.
"""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal, Union
from uuid import UUID
from zoneinfo import ZoneInfo

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    WithJsonSchema,
    create_model,
    model_validator,
)

from timekeeper.api.errors import CURSOR_MESSAGE, INVALID_CURSOR, ApiError, pattern_words
from timekeeper.schedules.change_days import ChangeDay
from timekeeper.schedules.models import Schedule, ScheduleDetails, ScheduleEvent, ScheduleRun, UpcomingOccurrence
from timekeeper.schedules.recurrence import InvalidRecurrence, describe_rule, parse_rule
from timekeeper.schedules.rule_schema import published_rule_schema
from timekeeper.schema_forms import whole_forms
from timekeeper.strict_input import JSON_INTEGER
from timekeeper.topology import PIPELINES

#: Text without NUL characters (PostgreSQL text cannot hold them).
_PLAIN = r"^[^\x00]*$"

#: The owner modules a schedule may belong to: those with a pipeline in the topology.
OWNERS: tuple[str, ...] = tuple(sorted({p.owner for p in PIPELINES.values()}))
OwnerName = Literal[OWNERS]  # type: ignore[valid-type]

ScheduleStatus = Literal["active", "paused", "disabled"]
RunState = Literal["queued", "running", "succeeded", "skipped", "failed"]


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]

#: The document's description of a rule, generated from the recurrence models and
#: tightened by :mod:`timekeeper.schedules.rule_schema` (zones, calendar forms); the
#: authority is ``parse_rule`` (a rule this schema allows may still be refused: a cron
#: that never fires, or no occurrence within ten years).
RECURRENCE_SCHEMA = published_rule_schema()

Recurrence = Annotated[dict[str, Any], WithJsonSchema(RECURRENCE_SCHEMA)]


#: Characters that show nothing (zero-width spaces and joiners, the word joiner, the
#: byte-order mark, the Mongolian vowel separator): a text of only these and white space
#: reads as empty.
INVISIBLE_CLASS = r"\u180e\u200b-\u200d\u2060\ufeff"
#: The bidirectional controls (embeddings, overrides, isolates and marks): in a name they
#: reverse or reorder the text after them wherever it is shown (a page, a subject line).
BIDI_CONTROL_CLASS = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_BLANK = re.compile(rf"[\s{INVISIBLE_CLASS}]*")
_BIDI = re.compile(rf"[{BIDI_CONTROL_CLASS}]")


def _not_blank(text: str) -> str:
    if _BLANK.fullmatch(text):
        raise ValueError("must not be empty or only white space")
    return text


def no_bidi_controls(text: Any) -> Any:
    """``text`` unchanged; ``ValueError`` (a 422 naming the field) when it holds a
    bidirectional control character (U+202E and the others of :data:`BIDI_CONTROL_CLASS`)."""
    if isinstance(text, str) and _BIDI.search(text):
        raise ValueError("must not contain bidirectional control characters (such as U+202E), which reorder "
                         "the text shown after them")
    return text


#: NUL and every character some regular-expression dialect calls white space, spelled out:
#: ``\s`` means different sets in the server's validator (Unicode White_Space, with U+0085),
#: in JSON Schema's ECMA dialect (with U+FEFF, without U+0085) and in Python, so a pattern
#: written with ``\s`` would let a client's schema-valid text be refused. This class is the
#: union of the three, the same in each.
SPACE_CLASS = r"\x00\t-\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
#: Text with at least one character that is not white space, and no NUL (PostgreSQL text).
NOT_BLANK_PATTERN = pattern_words(rf"^[^\x00]*[^{SPACE_CLASS}{INVISIBLE_CLASS}][^\x00]*$",
                                  "must not be empty or only white space")
#: An opaque token (a user id, an address): no white space, no NUL.
TOKEN_PATTERN = pattern_words(rf"^[^{SPACE_CLASS}]+$", "must not contain white space")
#: A name for people (a schedule's, a delivery's, a report's): no NUL, no bidirectional
#: control, and not empty or only white space when given (the document's pattern says
#: each; :func:`_not_blank` and :func:`no_bidi_controls` word the refusals).
_NAMED = pattern_words(rf"^[^\x00{BIDI_CONTROL_CLASS}]*[^{SPACE_CLASS}{INVISIBLE_CLASS}{BIDI_CONTROL_CLASS}]"
                       rf"[^\x00{BIDI_CONTROL_CLASS}]*$", "must not be empty or only white space")
#: A text shown to people as it is typed (a name, a subject): refused with a bidirectional
#: control (put it after the ``Field``, whose pattern should be :data:`PLAIN_PATTERN` or
#: :data:`PLAIN_NAME_PATTERN`, so the document says the same).
PlainText = BeforeValidator(no_bidi_controls)
#: No NUL, no bidirectional control.
PLAIN_PATTERN = pattern_words(rf"^[^\x00{BIDI_CONTROL_CLASS}]*$",
                              "must not contain NUL or bidirectional control characters")
#: :data:`PLAIN_PATTERN`, and not empty or only white space.
PLAIN_NAME_PATTERN = _NAMED
Name = Annotated[str, Field(max_length=200, pattern=_NAMED, description="a label for people (no personal data)"),
                 BeforeValidator(no_bidi_controls), AfterValidator(_not_blank)]

#: The one spelling of an id the API takes: the canonical UUID text it writes itself
#: (lowercase hex, 8-4-4-4-12). Upper case, braces, a ``urn:uuid:`` prefix or no hyphens
#: would name the same resource by other texts (other URLs, Idempotency-Key fingerprints
#: and log lines), so they are a 422 naming the field. Values that are already UUIDs pass.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _canonical_uuid(value: Any) -> Any:
    if isinstance(value, str) and not _CANONICAL_UUID.fullmatch(value):
        raise ValueError("write the id as a canonical UUID (lowercase, 8-4-4-4-12 hex digits)")
    return value


CanonicalUuid = Annotated[UUID, BeforeValidator(_canonical_uuid)]


#: Path parameters that are whole numbers: written as plain decimal digits only, so
#: ``1.0``, ``+1`` and ``01`` are a 422 naming the parameter rather than other names of 1
#: (checked on the raw path by :func:`timekeeper.api.app.create_app`'s middleware, ahead of
#: the parameter's own ``int`` validation).
NUMBER_PATH_PARAMETERS = frozenset({"version"})
PLAIN_DECIMAL = re.compile(r"[1-9][0-9]*")


#: The JSON Schema keywords whose numbers Powertools writes as floats (its schema model
#: types them so): ``"maximum": 8784.0``, which a client generated from the document sends
#: as ``8784.0``, not the integer the route takes.
_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})


def integral_bounds(node: Any) -> Any:
    """``node`` (a JSON-ready OpenAPI document or part) with every integral float bound
    written as an integer (``8784.0`` -> ``8784``), in place; returns ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _BOUNDS and isinstance(value, float) and value.is_integer():
                node[key] = int(value)
            else:
                integral_bounds(value)
    elif isinstance(node, list):
        for item in node:
            integral_bounds(item)
    return node


# ------------------------------------------------------------------------------ requests


#: Which failures of a schedule's scheduled runs its owner is told of.
NotifyOn = Literal["first_failure", "every_failure", "pause_only"]
NOTIFY_ON_TEXT = ("which failures of its scheduled runs the owner is told of (in the product and by e-mail): "
                  "first_failure (the first of a streak), every_failure, or pause_only; the pause after five "
                  "failures in a row is always told")


class ScheduleCreateBase(BaseModel):
    """``POST /schedules``: a new schedule of ``owner``'s ``work_kind`` on ``recurrence``.

    ``subject_id`` names the owning module's row the work applies to (e.g. the recurring
    batch a ``batch.roll`` rolls); ``active=false`` creates it paused. The body's model is
    built per owner module by :func:`schedule_create_model`, so the document lists the
    work kinds each owner registered.
    """

    model_config = ConfigDict(extra="forbid")

    owner: str
    work_kind: str
    recurrence: Recurrence
    subject_id: CanonicalUuid | None = Field(None, description="the owning module's row the work applies to")
    #: Omitted, the schedule's name is empty; given, it must name something.
    name: Name = Field("", json_schema_extra=lambda schema: schema.pop("default", None))
    active: StrictBool = Field(True, description="false creates the schedule paused")
    notify_on: NotifyOn = Field("first_failure", description=NOTIFY_ON_TEXT)


def generic_kinds_by_owner(registry: Any, owners: tuple[str, ...] = OWNERS) -> dict[str, list[str]]:
    """Owner -> the sorted names of its work kinds that ``POST /schedules`` takes: those
    without a route of their own (``queries.deliver`` is created through
    ``/query-schedules``), read from ``registry`` (a
    :class:`~timekeeper.schedules.work.WorkKindRegistry`)."""
    return {owner: [name for name in registry.names(owner) if registry.find(owner, name).route is None]
            for owner in owners}


def subject_required_kinds(registry: Any) -> frozenset[str]:
    """The work kinds (``owner/name``) of ``registry`` whose schedules must name a subject
    (:class:`~timekeeper.schedules.work.SubjectRequirement` ``required``)."""
    return frozenset(f"{kind.owner}/{kind.name}" for kind in registry.kinds()
                     if kind.subject is not None and kind.subject.required)


def _subject_forms(required: list[str], optional: list[str]) -> Any:
    """A ``json_schema_extra`` that publishes which work kinds need ``subject_id``: the
    body becomes ``oneOf`` whole forms, each with every field (``<Title>WithSubject``,
    whose ``work_kind`` is one of ``required`` and whose ``subject_id`` is required, and
    ``<Title>SubjectOptional`` for the others), so a generated client loses none of them."""
    def extra(schema: dict[str, Any]) -> None:
        if not required:
            return
        title, properties = schema["title"], schema["properties"]
        uuid_ = next(s for s in properties["subject_id"]["anyOf"] if s.get("type") == "string")
        subject = dict(uuid_, description=properties["subject_id"].get("description", "the subject"))
        forms: list[dict[str, Any]] = [{"title": f"{title}WithSubject", "required": ["subject_id"], "properties": {
            "work_kind": dict(properties["work_kind"], enum=required), "subject_id": subject}}]
        if optional:
            forms.append({"title": f"{title}SubjectOptional",
                          "properties": {"work_kind": dict(properties["work_kind"], enum=optional)}})
        whole_forms(schema, forms)
    return extra


def schedule_create_model(kinds_by_owner: dict[str, list[str]],
                          subject_required: frozenset[str] = frozenset()) -> Any:
    """The ``POST /schedules`` body type: one :class:`ScheduleCreateBase` model per owner
    module (``ScheduleCreate<Owner>``, whose ``work_kind`` is an enum of the work kinds the
    owner registered), a union discriminated by ``owner`` when there are several. The
    schema also says which kinds need ``subject_id`` (``subject_required``, ``owner/name``;
    whether the row exists is the database's to say). Raises ``ValueError`` when no owner
    has work kinds."""
    variants = []
    for owner, kinds in sorted(kinds_by_owner.items()):
        if not kinds:
            continue
        variant = create_model(
            f"ScheduleCreate{owner.title().replace('_', '')}", __base__=ScheduleCreateBase,
            __doc__=ScheduleCreateBase.__doc__,
            owner=(Literal[owner], Field(description="the owner module (pipeline) of the work")),
            work_kind=(Literal[tuple(sorted(kinds))], Field(description=f"a work kind {owner} registered")))
        needs = sorted(k for k in kinds if f"{owner}/{k}" in subject_required)
        variant.model_config["json_schema_extra"] = _subject_forms(needs, sorted(set(kinds) - set(needs)))
        variants.append(variant)
    if not variants:
        raise ValueError("no owner module has registered work kinds")
    if len(variants) == 1:
        return variants[0]
    return Annotated[Union[tuple(variants)], Field(discriminator="owner")]  # noqa: UP007 - a runtime union


def _at_least_one(schema: dict[str, Any]) -> None:
    schema["minProperties"] = 1
    for prop in schema.get("properties", {}).values():
        if prop.get("default", ...) is None:
            del prop["default"]


class ScheduleUpdate(BaseModel):
    """``PATCH /schedules/{id}``: change the definition (bumps ``definition_version`` and
    recomputes the next due instant from now; no backlog). Omitted fields keep their value;
    at least one is required."""

    # Fields are optional but not nullable, and at least one is required (minProperties),
    # so the document says exactly what the route accepts.
    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema: _at_least_one(schema))

    recurrence: Recurrence = None  # type: ignore[assignment]
    name: Name = None  # type: ignore[assignment]
    subject_id: CanonicalUuid = Field(None, description="the owning module's row the work applies to")  # type: ignore[assignment]
    notify_on: NotifyOn = Field(None, description=NOTIFY_ON_TEXT + " (changes neither the definition version "  # type: ignore[assignment]
                                                  "nor the timing)")

    @model_validator(mode="after")
    def _something(self) -> ScheduleUpdate:
        if self.recurrence is None and self.name is None and self.subject_id is None and self.notify_on is None:
            raise ValueError("give at least one of recurrence, name, subject_id, notify_on")
        return self


# ----------------------------------------------------------------------------- responses


class ScheduleOut(BaseModel):
    """A schedule as its owner sees it, with its latest outcome summary."""

    model_config = ConfigDict(extra="ignore")

    id: UUID
    owner: str
    work_kind: str
    subject_id: UUID | None
    name: str
    recurrence: Recurrence = Field(description="the rule as saved (normalised: defaults filled in)")
    timezone: str = Field(description="IANA zone the rule is evaluated in")
    status: ScheduleStatus
    pause_reason: str | None = Field(description="why it is paused, e.g. paused_by_owner, consecutive_failures")
    next_due_at: UtcDatetime | None = Field(description="next due instant (UTC); null unless active")
    consecutive_failures: int = Field(ge=0)
    definition_version: int = Field(ge=1)
    last_run_id: UUID | None
    last_outcome: str | None
    last_run_at: UtcDatetime | None
    created_at: UtcDatetime
    updated_at: UtcDatetime
    warnings: list[str] = Field(default_factory=list, description="notes about a surprising but valid rule")
    description: str | None = Field(None, description="the rule in words, with its zone; null when the saved rule "
                                                      "no longer validates")
    notify_on: NotifyOn = Field("first_failure", description=NOTIFY_ON_TEXT)
    created_by: str | None = Field(None, description="the user who created it (null: not recorded)")


#: What a page's ``timezone`` is (its instants stay UTC; the zone is for showing them).
WORKSPACE_ZONE_TEXT = ("the workspace's IANA zone, to show the UTC instants in (UTC when the directory has no such "
                       "workspace)")


class SchedulePage(BaseModel):
    """One page of schedules, oldest first; pass ``next_cursor`` as ``cursor`` for the next."""

    items: list[ScheduleOut]
    next_cursor: str | None = Field(description="opaque; null on the last page")
    timezone: str = Field("UTC", description=WORKSPACE_ZONE_TEXT)


class RunOut(BaseModel):
    """A run of a schedule (one occurrence, or a manual "Run now")."""

    model_config = ConfigDict(extra="ignore")

    id: UUID
    trigger: Literal["scheduled", "manual", "test"]
    state: RunState
    occurrence_at: UtcDatetime = Field(description="the occurrence's instant (UTC); the request time of a manual run")
    occurrence_local: str = Field(description="intended local wall time in the schedule's timezone",
                                  examples=["2027-03-14T02:30:00"])
    dst_shifted: bool = Field(description="a spring-forward gap moved it later by the gap")
    requested_by: str | None
    attempts: int = Field(ge=0)
    queued_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    outcome_code: str | None
    detail: dict[str, Any] | None = Field(description="the work kind's result")
    error: str | None = Field(description="the refusal message; unexpected faults are not described here")
    skipped_backlog: int = Field(ge=0, description="older due occurrences collapsed into this run")
    first_skipped_at: UtcDatetime | None
    due_at: UtcDatetime | None = Field(None, description="the instant a flexible window (window_minutes) gave the "
                                                         "run; null: due at its occurrence")
    retry_of: UUID | None = Field(None, description="the run an operator's Retry now retried to make this one "
                                                    "(null: no retry)")
    stuck: Literal["not_started", "not_published", "lease_expired"] | None = Field(
        None, description="why a queued or running run waits too long (GET /runs/{id}'s stuck; a schedule's page "
                          "says it for each of its runs); null: it does not, or the list does not say")


class EventOut(BaseModel):
    """An entry of a schedule's append-only history."""

    model_config = ConfigDict(extra="ignore")

    id: int
    run_id: UUID | None
    kind: str = Field(examples=["created", "paused", "run_requested", "settled"])
    actor: str
    reason: str | None
    detail: dict[str, Any] | None
    at: UtcDatetime


class OccurrenceOut(BaseModel):
    """One upcoming occurrence in UTC and in the schedule's local time, with its DST markers."""

    at: UtcDatetime = Field(description="the instant (UTC)")
    local: datetime = Field(description="the same instant in the schedule's timezone, with its offset")
    local_date: date = Field(description="the intended local date (kept when a gap shifts the time)")
    local_time: str = Field(description="the intended local wall time HH:MM (before a gap shift)",
                            examples=["02:30"])
    timezone: str
    shifted: bool = Field(description="moved later by a spring-forward gap")
    repeated: bool = Field(description="its local time is in a fall-back overlap (the clock shows it twice); "
                                       "a fixed time runs at the first of the two unless the rule's dst.overlap "
                                       "says second or both")
    skipped: bool = Field(False, description="a local time in a spring-forward gap that the rule's dst.gap skip "
                                             "skips: recorded as a skipped run (outcome skipped_dst_gap), not run")
    window_end: UtcDatetime | None = Field(None, description="a rule with window_minutes: the end (exclusive) of "
                                                             "the window its run is due in, [at, window_end)")
    due_at: UtcDatetime | None = Field(None, description="a saved schedule with window_minutes (or a rule "
                                                         "previewed for one, schedule_id): the instant in the "
                                                         "window its run is given (at stays the occurrence)")


class ChangeDayOut(BaseModel):
    """One DST change day of the rule's zone within the coming year and what the rule's DST choice makes of it."""

    local_date: date = Field(description="the local date whose wall times the change skips (gap) or repeats (overlap)")
    kind: Literal["gap", "overlap"] = Field(description="gap: the clock springs forward; overlap: it falls back")
    at: UtcDatetime = Field(description="the instant the offset changes (UTC)")
    wall_from: str = Field(description="the first local wall time HH:MM skipped or repeated", examples=["02:00"])
    wall_to: str = Field(description="the local wall time HH:MM the skipped or repeated span ends at (exclusive)",
                         examples=["03:00"])
    affected: bool = Field(description="whether any time of the rule falls in the gap or the overlap")
    summary: str = Field(description="the day and what the rule does on it, in words",
                         examples=["2027-03-14: the clock springs forward from 02:00 to 03:00 (1 h); 02:30 is "
                                   "skipped (the time does not exist that day; recorded as a skipped run)"])
    occurrences: list[OccurrenceOut] = Field(description="the rule's occurrences whose intended wall time is in the "
                                                         "gap or the overlap, as its DST choice resolves them "
                                                         "(shifted, at the gap's end, skipped, first, second or "
                                                         "both instants)")


class HistoryOut(BaseModel):
    """Recent runs and history events, newest first."""

    runs: list[RunOut]
    events: list[EventOut]


class ScheduleDetail(BaseModel):
    """``GET /schedules/{id}``: the schedule, its latest run, the next occurrences and its history."""

    schedule: ScheduleOut
    latest_run: RunOut | None
    description: str | None = Field(description="the rule in words, with its zone; null when the saved rule "
                                                "no longer validates",
                                    examples=["At 02:30, every day, America/New_York"])
    next_occurrences: list[OccurrenceOut] = Field(description="the next instants (upcoming, 5 by default); "
                                                              "none unless active")
    change_days: list[ChangeDayOut] = Field(default_factory=list, description=(
        "the zone's DST change days within the coming year and what the rule does on each (as POST /rules/preview "
        "gives them, with each windowed occurrence's due_at); none unless active"))
    history: HistoryOut
    timezone: str = Field("UTC", description=WORKSPACE_ZONE_TEXT + "; the rule's own zone is schedule.timezone")
    changed_by: str | None = Field(None, description="who last changed the definition (name, subject, rule or "
                                                     "failure notices; its creator until then)")
    changed_at: UtcDatetime | None = Field(None, description="when (UTC); schedule.updated_at also moves with runs "
                                                             "and pauses")
    names: dict[str, str] = Field(default_factory=dict, description="display names of the people the schedule, "
                                  "its runs' requested_by and its history name: user id -> name; a user id the "
                                  "directory names nobody by is left out")


class RunAccepted(BaseModel):
    """``POST /schedules/{id}/run``: the manual run was committed and offered to its queue."""

    run_id: UUID
    schedule_id: UUID
    created: bool = Field(description="false when an earlier request with the same Idempotency-Key made this run")


# ---------------------------------------------------------------------------- converters


def check_rule_shape(rule: dict[str, Any]) -> None:
    """Refuse ``null`` anywhere in a rule (leave a field out instead), so what the API
    stores is what the document describes; the rule itself is validated by ``parse_rule``.
    Raises :class:`InvalidRecurrence` naming the field (a 422)."""

    def walk(value: Any, path: str) -> None:
        if value is None:
            raise InvalidRecurrence(path or "rule", "must not be null; leave the field out")
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")

    walk(rule, "")


def _rule_notes(recurrence: dict[str, Any]) -> dict[str, Any]:
    """A saved rule's ``warnings`` and ``description`` (compiled rules are cached: cheap per row)."""
    try:
        rule = parse_rule(recurrence)
    except InvalidRecurrence:
        return {"warnings": ["the saved rule no longer validates"], "description": None}
    return {"warnings": list(rule.warnings), "description": describe_rule(rule)}


def rule_description(recurrence: dict[str, Any]) -> str | None:
    """A saved rule in words with its zone (``"At 09:00 on Monday every week,
    Europe/Berlin"``); None when it no longer validates."""
    return _rule_notes(recurrence)["description"]


def _fields(row: Any) -> dict[str, Any]:
    """A row dataclass's fields as a dict (shallow: JSON columns are not copied)."""
    return {f.name: getattr(row, f.name) for f in fields(row)}


def schedule_out(row: Schedule) -> ScheduleOut:
    """A :class:`~timekeeper.schedules.models.Schedule` as :class:`ScheduleOut`."""
    return ScheduleOut.model_validate({**_fields(row), **_rule_notes(row.recurrence)})


def run_out(row: ScheduleRun) -> RunOut:
    """A :class:`~timekeeper.schedules.models.ScheduleRun` as :class:`RunOut`. The text of an
    unexpected fault is kept out of responses (it may quote SQL or values); refusals are
    owner-facing and shown."""
    data = _fields(row)
    data["occurrence_local"] = row.occurrence_local.isoformat(timespec="seconds")
    if row.outcome_code == "unexpected_error" or (row.error and not row.outcome_code):
        data["error"] = "the work failed unexpectedly; operators find the details in the logs by run id"
    return RunOut.model_validate(data)


_ERROR_KEYS = ("error", "last_error")


def event_out(row: ScheduleEvent, shown_errors: dict[Any, str | None]) -> EventOut:
    """A :class:`~timekeeper.schedules.models.ScheduleEvent` as :class:`EventOut`. Error
    texts in its detail are shown only for runs in ``shown_errors`` (run id -> the run's
    shown error); others are dropped, so an unexpected fault's text never reaches a response."""
    detail = row.detail
    if isinstance(detail, dict) and any(k in detail for k in _ERROR_KEYS) and row.kind != "definition_invalid":
        detail = dict(detail)
        for key in _ERROR_KEYS:
            if key in detail:
                shown = shown_errors.get(row.run_id)
                if shown is None:
                    del detail[key]
                else:
                    detail[key] = shown
    return EventOut.model_validate({**_fields(row), "detail": detail})


def occurrences_out(upcoming: list[UpcomingOccurrence], timezone: str | None) -> list[OccurrenceOut]:
    """Service :class:`~timekeeper.schedules.models.UpcomingOccurrence` rows as
    :class:`OccurrenceOut` in ``timezone`` (an IANA name; UTC when None)."""
    zone = ZoneInfo(timezone or "UTC")
    return [OccurrenceOut(at=o.at, local=o.at.astimezone(zone), local_date=o.local_date,
                          local_time=(o.local_time or o.local.time()).strftime("%H:%M"), timezone=timezone or "UTC",
                          shifted=o.shifted, repeated=o.repeated, skipped=o.skipped, window_end=o.window_end,
                          due_at=o.due_at)
            for o in upcoming]


DATE_PATTERN = pattern_words(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "must be a date YYYY-MM-DD")
#: How far from today a closure may be (years, before and after): a date outside is a typo.
CLOSURE_YEARS = 10


class ClosureIn(BaseModel):
    """``POST /closures``: a local date the workspace does not work, and why."""

    model_config = ConfigDict(extra="forbid")

    date: Annotated[str, Field(pattern=DATE_PATTERN, description="the closed local date YYYY-MM-DD",
                               examples=["2027-12-24"])]
    reason: Annotated[str, Field(max_length=200, pattern=pattern_words(rf"^$|{_NAMED}",
                                                                       "must be empty or not only white space")),
                      PlainText] = Field("", description="shown beside the date (empty, or not only white space)")


class ClosureOut(BaseModel):
    """A closed local date of the workspace: business-day rules skip it."""

    model_config = ConfigDict(extra="ignore")

    date: date
    reason: str
    created_by: str
    created_at: UtcDatetime


class ClosureList(BaseModel):
    """``GET /closures``: the workspace's closures, by date."""

    items: list[ClosureOut]
    timezone: str = Field("UTC", description=WORKSPACE_ZONE_TEXT)


class ClosureChange(BaseModel):
    """A closure added or removed, and how many business-day schedules were recomputed
    (each recorded a ``holidays_changed`` history event)."""

    closure: ClosureOut
    changed: bool = Field(description="false when the date was already closed (the first closure is kept)")
    schedules_recomputed: int = Field(ge=0)


def closure_out(row: Any) -> ClosureOut:
    """A :class:`~timekeeper.schedules.closures.Closure` as :class:`ClosureOut`."""
    return ClosureOut(date=row.closed_on, reason=row.reason, created_by=row.created_by, created_at=row.created_at)


class RulePreviewRequest(BaseModel):
    """``POST /rules/preview``: an unsaved rule (the ``recurrence`` a create takes) and how many occurrences to show."""

    model_config = ConfigDict(extra="forbid")

    recurrence: Recurrence
    count: Annotated[int, Field(ge=1, le=50), JSON_INTEGER] = Field(10, description="occurrences to show")


class ScheduleRulePreviewRequest(RulePreviewRequest):
    """``POST /rules/preview``: also, optionally, the schedule whose rule is being edited."""

    schedule_id: CanonicalUuid | None = Field(None, description=(
        "the schedule (of the caller's workspace) whose rule this would replace: a rule with window_minutes then "
        "gives each occurrence its due_at, the instant the dispatcher would give it (404 for an unknown id)"))


class RulePreview(BaseModel):
    """An unsaved rule in words with its next occurrences (local, UTC, DST markers)."""

    description: str = Field(examples=["At 09:00 on the third business day of every month, Europe/Berlin, "
                                       "public holidays of Germany (Berlin)"])
    timezone: str = Field(description="the zone the rule is evaluated in (UTC for an interval rule without one)")
    warnings: list[str] = Field(description="notes about a surprising but valid rule")
    recurrence: Recurrence = Field(description="the rule normalised (defaults filled in)")
    next_occurrences: list[OccurrenceOut]
    change_days: list[ChangeDayOut] = Field(default_factory=list, description=(
        "the zone's DST change days within the coming year (the spring-forward and the fall-back day), each with "
        "what the rule does on it; empty for a zone without changes"))


def change_days_out(days: list[ChangeDay], timezone: str) -> list[ChangeDayOut]:
    """Service :class:`~timekeeper.schedules.change_days.ChangeDay` rows as :class:`ChangeDayOut` in ``timezone``."""
    return [ChangeDayOut(local_date=d.change.day, kind="gap" if d.change.gap else "overlap", at=d.change.at,
                         wall_from=d.change.wall_from.strftime("%H:%M"), wall_to=d.change.wall_to.strftime("%H:%M"),
                         affected=d.affected, summary=d.summary, occurrences=occurrences_out(d.occurrences, timezone))
            for d in days]


def detail_out(details: ScheduleDetails) -> ScheduleDetail:
    """Service :class:`~timekeeper.schedules.service.ScheduleDetails` as :class:`ScheduleDetail`."""
    schedule = details.schedule
    runs = [run_out(r) for r in details.runs]
    shown_errors = {r.id: r.error for r in runs}
    upcoming = []
    if schedule.status == "active":
        upcoming = occurrences_out(details.next_occurrences, schedule.timezone)
    out = schedule_out(schedule)
    out.warnings = list(details.warnings) or out.warnings
    return ScheduleDetail(schedule=out, latest_run=runs[0] if runs else None, next_occurrences=upcoming,
                          description=details.description, changed_by=details.changed_by,
                          changed_at=details.changed_at,
                          history=HistoryOut(runs=runs, events=[event_out(e, shown_errors) for e in details.events]))


#: A cursor is ``<created_at in microseconds since the Unix epoch>-<id as 32 hex digits>``:
#: the keyset of the previous page's last row. Every string matching the pattern is a
#: position in the list, so any cursor the document allows is accepted.
CURSOR_PATTERN = r"^[0-9]{1,16}-[0-9a-f]{32}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode_cursor(after: tuple[datetime, UUID] | None) -> str | None:
    """The cursor of a keyset ``(created_at, id)`` (see :data:`CURSOR_PATTERN`), or None."""
    if after is None:
        return None
    micros = (after[0] - _EPOCH) // timedelta(microseconds=1)
    return f"{max(micros, 0)}-{after[1].hex}"


def decode_cursor(cursor: str | None) -> tuple[datetime, UUID] | None:
    """Inverse of :func:`encode_cursor`; raises a 422 :class:`ApiError` (field ``cursor``)
    for a string that does not match :data:`CURSOR_PATTERN`."""
    if cursor is None or cursor == "":
        return None
    if re.fullmatch(CURSOR_PATTERN, cursor) is None:
        raise ApiError(422, INVALID_CURSOR, CURSOR_MESSAGE, "cursor")
    micros, _, hex_id = cursor.partition("-")
    return _EPOCH + timedelta(microseconds=int(micros)), UUID(hex=hex_id)
