"""The OpenAPI document says what the API checks: schemathesis' coverage and stateful
phases against ``serve`` (in-process, over this module's database).

Checks, for every request: no 5xx, and every response conforms to the document. For a
request the document allows (a positive case): it is not refused with a 422, except for
a check only the database (or a parser JSON Schema cannot express) can make, each listed
in :data:`RUNTIME_CHECKED` by the field the 422 names. A client generated from the
document therefore sends requests the API accepts.

Bounded and deterministic: the coverage phase enumerates its cases from the document (no
randomness; the negative ones capped at :data:`NEGATIVE_CAP` per operation), the stateful
phase is derandomized with a few short scenarios. Deeper:
``TK_SCHEMATHESIS_STATEFUL=50 python -m pytest tests/api/test_openapi_contract.py``.
"""

from __future__ import annotations

import os
import re
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance
from schemathesis.generation import GenerationMode
from schemathesis.generation.drivers import CoverageGenerator
from schemathesis.generation.feedback import FeedbackSources
from schemathesis.generation.overrides import Override

from tests.api.conftest import enrol, seed_member, serving
from timekeeper.api import create_app, openapi_document
from timekeeper.edge.api import unconfigured_adapters
from timekeeper.schedules.recurrence import parse_rule
from timekeeper.schedules.zones import canonical_zones

WORKSPACE = uuid.uuid4()
ROLES = "schedules:read,schedules:write,schedules:run,queries:read,queries:write,reports:read,reports:write"
AUTH = {"Authorization": f"Bearer dev:alice:{WORKSPACE}:{ROLES}"}
STAFF = {"Authorization": f"Bearer dev:staff-1:{WORKSPACE}:snapshots:read,platform:staff"}
#: Negative coverage cases sent per operation (the first ones, in schemathesis' order).
NEGATIVE_CAP = 25

#: The 422s a request the document allows may still get: by operation, (the field the error
#: names, a pattern its message matches, why no JSON Schema can say it). Each is a fact only
#: the database holds (a row that exists) or a rule JSON Schema cannot express.
_NO_OCCURRENCE = ("recurrence", r"no occurrence in the next 10 years",
                  "a rule must have an occurrence within ten years (computed by the rule parser)")
_CRON = ("recurrence.cron", r".", "the cron grammar and a cron that ever fires (parsed, not a pattern)")
_MONTH_LENGTH = ("recurrence.calendar.month_day", r"has at most \d+ days",
                 "a yearly month_day beyond its month's length")
_RRULE = ("recurrence.rrule", r".", "the RFC 5545 RRULE grammar and its refused parts (parsed, not a pattern)")
_EXDATE = ("recurrence.exdate", r"must be a local date", "an excluded date must be a real calendar date")
_BUSINESS_DAY = ("recurrence.calendar.business_day", r"^must be 1 to \d+ or -1 to -\d+: no month has more",
                 "the most business days a month can have follows the business week (weekdays)")
_HOLIDAYS = ("recurrence.calendar.holidays", r"^no holiday calendar for|has no subdivision",
             "the holiday calendars are the holidays library's countries and subdivisions")
_RULE = [_NO_OCCURRENCE, _CRON, _MONTH_LENGTH, _RRULE, _EXDATE, _BUSINESS_DAY, _HOLIDAYS]
_SUBJECT = ("subject_id", r"^no [a-z ]+ with this id in this workspace$",
            "the owner's row (batch, recurring batch, billing plan) must exist in the workspace")
_BETWEEN = ("definition.filters", r"between needs low <= high", "between's low <= high compares two values")
_SORT_TWICE = ("definition.sort", r"is sorted by twice", "a column sorted by at most once (items differ "
                                                          "by direction, so uniqueItems cannot say it)")
_RECIPIENT = ("recipients", r"member", "each recipient must be a member of the workspace")
_TEMPLATE = ("_template", r"placeholder|template", "templates use named placeholders only (their grammar)")
_SOURCE = [("source.query_id", r"^no such query \(or version\) in this workspace$", "the saved query must exist"),
           ("source.query_version", r"^no such query \(or version\) in this workspace$", "the version must exist"),
           ("source.report_id", r"^no such report in this workspace$", "the report must exist")]
RUNTIME_CHECKED: dict[str, list[tuple[str, str, str]]] = {
    "POST /schedules": [*_RULE, _SUBJECT],
    "PATCH /schedules/{schedule_id}": [*_RULE, _SUBJECT],
    "POST /rules/preview": _RULE,
    "POST /queries": [_BETWEEN, _SORT_TWICE],
    "POST /queries/{query_id}/versions": [_BETWEEN, _SORT_TWICE],
    "POST /queries/preview": [_BETWEEN, _SORT_TWICE],
    "POST /query-schedules": [
        *_RULE, _RECIPIENT, _TEMPLATE,
        ("source.query_id", r"^no such query \(or version\) in this workspace$", "the saved query must exist"),
        ("source.query_version", r"^no such query \(or version\) in this workspace$", "the version must exist"),
        ("source.report_id", r"^no such report in this workspace$", "the report must exist")],
    "PATCH /query-schedules/{schedule_id}": [*_RULE, _RECIPIENT, _TEMPLATE],
    "POST /query-schedules/recipient-check": _SOURCE,
    "POST /query-schedules/message-preview": [
        *_SOURCE, _TEMPLATE, ("format", r"^a (query|report) is delivered as", "the format fits the source's kind")],
    "POST /query-schedules/rule-preview": _RULE,
    "GET /members": [("cursor", r"^not a cursor this listing gave$", "a cursor is one a page gave (opaque)")],
    "POST /reports": [
        ("definition.sections", r"^no such saved query|^the query selects no column|is not numeric",
         "each section's saved query (and version) must exist; a chart's columns must be columns that "
         "query selects, the value numeric")],
    "PUT /reports/{report_id}": [
        ("definition.sections", r"^no such saved query|^the query selects no column|is not numeric",
         "as for POST /reports")],
    "POST /snapshots/runs": [
        ("workspace_id", r"^no workspace ", "the workspace must exist in the directory"),
        ("owner", r"^no snapshot type ", "the snapshot registry is assembled at the edge, per stage"),
        ("snapshot_type", r"^no snapshot type ", "the snapshot registry is assembled at the edge, per stage")],
    **{f"POST /snapshots/ranges{tail}": [
        ("workspaces", r"^no workspace ", "each workspace must exist in the directory"),
        ("through", r"^the last month is before the first|^a range spans at most", "the range's order and span "
                                                                                   "compare two months"),
        ("owner", r"^no snapshot type ", "the snapshot registry is assembled at the edge, per stage"),
        ("snapshot_type", r"^no snapshot type ", "the snapshot registry is assembled at the edge, per stage")]
       for tail in ("", "/preview")},
    "GET /snapshots/staff/periods": [
        ("cursor", r"^not a cursor this listing gave$", "a cursor is one a page gave (opaque)"),
        ("through", r"^the last month is before the first$", "the range's order compares two months")],
}

schema = schemathesis.openapi.from_dict(openapi_document(create_app(unconfigured_adapters())))
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.fixture(scope="module")
def server(db_url):
    """``serve`` on a free port over this module's database, alice a queries:admin member
    of :data:`WORKSPACE`; the environment and the edge's caches restored afterwards."""
    seed_member(db_url, workspace_id=WORKSPACE, user_id="alice", roles=("queries:admin",))
    enrol(db_url, "staff-1", WORKSPACE)  # the staff token names it too
    with serving(db_url, poll_interval_s=0.2) as server:
        yield server


def _headers(operation) -> dict[str, str]:
    return STAFF if operation.path.startswith(("/snapshots", "/operations")) else AUTH


#: The zones a coverage case may name: the coverage phase sends one case per value of the
#: zone enum (about 600, for each rule form); every canonical zone is checked against the
#: rule parser in-process instead (test_every_published_zone_is_accepted_by_the_rule_parser).
SAMPLED_ZONES = frozenset(sorted(canonical_zones())[::75]) | {"UTC", "America/New_York", "Europe/London",
                                                             "Asia/Kolkata"}


def _sampled(case) -> bool:
    rule = case.body.get("recurrence") if isinstance(case.body, dict) else None
    zone = rule.get("timezone") if isinstance(rule, dict) else None
    return not isinstance(zone, str) or zone not in canonical_zones() or zone in SAMPLED_ZONES


def _coverage(operation, mode: GenerationMode) -> list:
    """The coverage phase's cases of ``operation`` in ``mode``, in schemathesis' order (a
    sample of the zones, as :data:`SAMPLED_ZONES` says)."""
    generator = CoverageGenerator(
        operation=operation, generation_modes=[mode],
        generation_config=schema.config.generation_for(operation=operation, phase="coverage"),
        auth_storage=None, override=Override(), feedback=FeedbackSources())
    return [case for case in generator if _sampled(case)]


def test_every_published_zone_is_accepted_by_the_rule_parser():
    for zone in sorted(canonical_zones()):
        for rule in ({"cron": "30 2 * * *", "timezone": zone},
                     {"interval": {"hours": 6}, "anchor": "2027-01-01T00:00:00Z", "timezone": zone}):
            parse_rule(rule)


def _holds_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _holds_integral_float(value: object) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_holds_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_integral_float(v) for v in value)
    return False


def refused_without_cause(operation, case, response) -> str | None:
    """Why a positive case's 422 is not one of :data:`RUNTIME_CHECKED` (None when it is).

    Two refusals hold for every body and are not judged: a NUL in any string (PostgreSQL
    text cannot hold it), and a number such as ``10.0`` where an integer is asked (JSON
    Schema counts it an integer; the API takes JSON integers only, never coercing)."""
    if response.status_code != 422 or _holds_nul(case.body) or _holds_nul(case.query):
        return None
    if _holds_integral_float(case.body):
        return None
    body = response.json()
    field = str(body.get("field") or "")
    if os.environ.get("TK_DUMP_422"):
        with open(os.environ["TK_DUMP_422"], "a") as out:
            out.write(f"{operation.label}\t{field}\t{body.get('message')}\n")
    message = str(body.get("message") or "")
    for prefix, pattern, _why in RUNTIME_CHECKED.get(operation.label, []):
        named = field == prefix or field.startswith((f"{prefix}.", f"{prefix}[")) or field.endswith(prefix)
        if named and re.search(pattern, message):
            return None
    return f"{operation.label} {case.path_parameters} {case.query} {case.body!r} -> {body}"


@pytest.mark.parametrize("operation", OPERATIONS, ids=[operation.label for operation in OPERATIONS])
def test_coverage_phase_schema_valid_requests_are_accepted(operation, server):
    refused = []
    for case in _coverage(operation, GenerationMode.POSITIVE):
        response = case.call(base_url=server.base_url, headers=_headers(operation), timeout=10)
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
        if (why := refused_without_cause(operation, case, response)) is not None:
            refused.append(why)
    assert refused == [], "\n".join(refused)


@pytest.mark.parametrize("operation", OPERATIONS, ids=[operation.label for operation in OPERATIONS])
def test_coverage_phase_schema_invalid_requests_are_client_errors(operation, server):
    for case in _coverage(operation, GenerationMode.NEGATIVE)[:NEGATIVE_CAP]:
        response = case.call(base_url=server.base_url, headers=_headers(operation), timeout=10)
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
        assert response.status_code < 500


def test_stateful_phase_finds_no_server_error_and_no_schema_violation(server):
    refused: list[str] = []

    class Machine(schema.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"base_url": server.base_url, "headers": _headers(case.operation), "timeout": 10}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=[not_a_server_error, response_schema_conformance],
                                   transport_kwargs=kwargs)
            if case.meta is not None and case.meta.generation.mode is GenerationMode.POSITIVE:
                if (why := refused_without_cause(case.operation, case, response)) is not None:
                    refused.append(why)

    Machine.run(settings=settings(
        max_examples=int(os.environ.get("TK_SCHEMATHESIS_STATEFUL", "8")), stateful_step_count=6,
        derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck)))
    assert refused == [], "\n".join(refused)

