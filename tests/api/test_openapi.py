"""The OpenAPI document: generated from the route models, valid, served at /openapi.json,
and the checked-in copy (shared/timekeeper/api/openapi.json) is current."""

from __future__ import annotations

import json
from pathlib import Path

from openapi_spec_validator import validate

from timekeeper.api import create_app, openapi_document
from timekeeper.edge.api import openapi_text, unconfigured_adapters
from timekeeper.local.cli import main

CHECKED_IN = Path(__file__).resolve().parents[2] / "shared" / "timekeeper" / "api" / "openapi.json"
OPERATIONS = {("get", "/schedules"), ("post", "/schedules"), ("get", "/schedules/{schedule_id}"),
              ("patch", "/schedules/{schedule_id}"), ("delete", "/schedules/{schedule_id}"),
              ("post", "/schedules/{schedule_id}/pause"), ("post", "/schedules/{schedule_id}/resume"),
              ("post", "/schedules/{schedule_id}/run"),
              ("get", "/catalogue"), ("get", "/queries"), ("post", "/queries"), ("get", "/queries/{query_id}"),
              ("delete", "/queries/{query_id}"), ("post", "/queries/{query_id}/versions"), ("post", "/queries/preview"),
              ("get", "/queries/{query_id}/versions/{version}")}
OPERATIONS |= {("post", "/reports"), ("get", "/reports"), ("get", "/reports/{report_id}"),
               ("put", "/reports/{report_id}"), ("post", "/reports/{report_id}/renders"),
               ("get", "/reports/{report_id}/renders/{render_id}"), ("get", "/reports/{report_id}/versions")}
OPERATIONS |= {("post", "/queries/{query_id}/exports"), ("get", "/exports/{export_id}")}
OPERATIONS |= {("post", "/snapshots/runs"), ("get", "/snapshots/periods"),
               ("get", "/snapshots/workspaces/{workspace_id}/periods")}
OPERATIONS |= {("post", "/snapshots/workspaces/{workspace_id}/runs/{run_id}/cancel"),
               ("post", "/snapshots/workspaces/{workspace_id}/runs/{run_id}/finalize"),
               ("get", "/snapshots/staff/workspaces"), ("post", "/snapshots/ranges/preview"),
               ("post", "/snapshots/ranges"), ("get", "/snapshots/ranges"), ("get", "/snapshots/ranges/{group_id}"),
               ("get", "/snapshots/staff/periods")}
OPERATIONS |= {("post", "/query-schedules"), ("get", "/query-schedules"), ("get", "/query-schedules/{schedule_id}"),
               ("patch", "/query-schedules/{schedule_id}"), ("post", "/query-schedules/{schedule_id}/run"),
               ("post", "/query-schedules/{schedule_id}/test"),
               ("get", "/query-schedules/{schedule_id}/runs"), ("get", "/downloads/{token}"),
               ("post", "/query-schedules/{schedule_id}/pause"), ("post", "/query-schedules/{schedule_id}/resume"),
               ("delete", "/query-schedules/{schedule_id}")}
OPERATIONS |= {("get", "/operations/overview"), ("post", "/operations/dead-letter-queues/{queue}/redrive"),
               ("post", "/operations/workspaces/{workspace_id}/schedules/{schedule_id}/resume"),
               ("get", "/operations/workspaces"), ("patch", "/operations/workspaces/{workspace_id}"),
               ("post", "/operations/erasures"), ("post", "/operations/member-erasures")}
OPERATIONS |= {("post", "/rules/preview"), ("get", "/closures"), ("post", "/closures"),
               ("delete", "/closures/{closed_on}")}
OPERATIONS |= {("get", "/notices"), ("post", "/notices/read"), ("get", "/notices/mail"), ("post", "/notices/mail"),
               ("get", "/ownerless-schedules"),
               ("post", "/ownerless-schedules/{schedule_id}/reassign"),
               ("get", "/query-schedules/{schedule_id}/history"), ("get", "/staff-reads"),
               ("get", "/posting-jobs/failed"), ("post", "/posting-jobs/{job_id}/retry")}
OPERATIONS |= {("get", "/opt-outs/{token}"), ("post", "/opt-outs/{token}"),
               ("get", "/query-schedules/{schedule_id}/opt-outs"),
               ("post", "/query-schedules/{schedule_id}/opt-outs/{user_id}/invitation"),
               ("post", "/query-schedules/{schedule_id}/subscription"), ("get", "/mail-suppressions"),
               ("post", "/mail-suppressions/removals"), ("get", "/mail-suppressions/removals"),
               ("get", "/query-schedules/{schedule_id}/message-preview"),
               ("get", "/members"), ("post", "/query-schedules/recipient-check"),
               ("post", "/query-schedules/message-preview"), ("post", "/query-schedules/rule-preview"),
               ("get", "/snapshots/workspaces/{workspace_id}/periods/{owner}/{snapshot_type}/{period}")}
OPERATIONS |= {("get", "/sessions/{session_id}"), ("post", "/sessions/{session_id}/revocation"),
               ("get", "/query-schedules/{schedule_id}/subscription"), ("post", "/downloads/{token}")}
OPERATIONS |= {("get", "/work-kinds"), ("get", "/work-kinds/{owner}/{kind}/subjects")}
OPERATIONS |= {("get", "/settings"), ("patch", "/settings"), ("post", "/settings/zone-preview"),
               ("put", "/settings/notice-mail/{user_id}"), ("get", "/audit-events")}
OPERATIONS |= {("get", "/runs"), ("get", "/runs/{run_id}"), ("post", "/runs/{run_id}/retry"),
               ("post", "/runs/{run_id}/cancel"), ("post", "/runs/{run_id}/fail"),
               ("get", "/operations/dead-letter-queues"),
               ("get", "/operations/dead-letter-queues/{queue}/messages"),
               ("post", "/operations/dead-letter-queues/{queue}/messages/{message_id}/redrive"),
               ("post", "/operations/dead-letter-queues/{queue}/messages/{message_id}/delete")}
#: The public operations: a delivery's link and its opt-out link, whose signed tokens are
#: the credential (the opt-out's answers are HTML pages for the recipient's browser).
PUBLIC = {("get", "/downloads/{token}"), ("post", "/downloads/{token}"), ("get", "/opt-outs/{token}"),
          ("post", "/opt-outs/{token}")}


def document() -> dict:
    return openapi_document(create_app(unconfigured_adapters()))


def test_the_document_is_a_valid_openapi_document():
    doc = document()
    validate(doc)  # raises OpenAPIValidationError
    assert doc["openapi"].startswith("3.1")
    assert {(m, p) for p, item in doc["paths"].items() for m in item} == OPERATIONS


def test_every_operation_needs_the_authorizer_and_documents_its_errors_as_error_bodies():
    doc = document()
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if (method, path) in PUBLIC:
                assert not operation.get("security"), (method, path)  # no authorizer
                # (a fresh link is asked for with an expired link: refused as too frequent, never as expired)
                expected = {"403", "429"} if (method, path) == ("post", "/downloads/{token}") else {"403", "410"}
                assert expected <= set(operation["responses"]), (method, path)
                continue
            assert operation["security"] == [{"authorizer": []}], (method, path)
            codes = set(operation["responses"])
            assert {"401", "403", "422"} <= codes, (method, path)
            if "{schedule_id}" in path or "{query_id}" in path:
                assert "404" in codes, (method, path)
            for code in codes - {"200", "201", "202", "204"}:
                schema = operation["responses"][code]["content"]["application/json"]["schema"]
                assert schema == _error_body(code), (method, path, code)
    assert doc["components"]["securitySchemes"]["authorizer"]["scheme"] == "bearer"
    # A deleted schedule's address documents its 410 (an ErrorBody with when and by whom)
    for method, path in (("get", "/schedules/{schedule_id}"), ("get", "/query-schedules/{schedule_id}")):
        assert "410" in doc["paths"][path][method]["responses"], (method, path)
    gone = doc["components"]["schemas"]["GoneBody"]
    assert {"code", "message", "deleted_at", "deleted_by", "deleted_by_name"} <= set(gone["properties"])


def _error_body(code: str) -> dict:
    """The schema of an authorized operation's error ``code``: an ErrorBody, but a 410's, a
    GoneBody (an ErrorBody with when and by whom the schedule was deleted)."""
    return {"$ref": "#/components/schemas/GoneBody" if code == "410" else "#/components/schemas/ErrorBody"}


def resolved(doc: dict, node: dict) -> dict:
    """``node`` with its ``$ref`` (if any) followed."""
    while "$ref" in node:
        node = doc["components"]["schemas"][node["$ref"].removeprefix("#/components/schemas/")]
    return node


def test_the_create_body_lists_the_owners_work_kinds():
    doc = document()
    body = doc["components"]["schemas"]["ScheduleCreateAccounting"]
    forms = [resolved(doc, form) for form in body["oneOf"]]
    assert [f["title"] for f in forms] == ["ScheduleCreateAccountingWithSubject",
                                           "ScheduleCreateAccountingSubjectOptional"]
    for form in forms:  # whole forms: every field in each
        assert form["properties"]["owner"]["const"] == "accounting"
        assert {"owner", "work_kind", "recurrence", "subject_id", "name", "active", "notify_on"} == set(
            form["properties"])
        assert form["properties"]["recurrence"] == {"$ref": "#/components/schemas/Recurrence"}
    assert {k for f in forms for k in f["properties"]["work_kind"]["enum"]} == {
        "batch.roll", "batch.auto_close", "reconciliation.sweep", "billing.prepare"}
    assert "subject_id" in forms[0]["required"] and "subject_id" not in forms[1].get("required", [])
    rule = doc["components"]["schemas"]["Recurrence"]
    assert [resolved(doc, f)["title"] for f in rule["oneOf"]] == ["CronRule", "CalendarRule", "IntervalRule",
                                                                  "RRuleRule"]


def test_the_query_definition_schema_is_the_catalogues_for_input_and_the_models_for_output():
    # A request's definition is described by the catalogue (what check_definition accepts);
    # an answered one by the model (a stored version may name a column since dropped)
    from timekeeper.reporting.catalogue import CATALOGUE
    from timekeeper.reporting.definition import QueryDefinition, definition_json_schema

    doc = document()
    schemas = doc["components"]["schemas"]
    assert schemas["QueryCreate"]["properties"]["definition"] == {"$ref": "#/components/schemas/QueryDefinition-Input"}
    assert schemas["VersionCreate"]["properties"]["definition"] == {
        "$ref": "#/components/schemas/QueryDefinition-Input"}
    assert schemas["VersionOut"]["properties"]["definition"] == {"$ref": "#/components/schemas/QueryDefinition-Output"}
    members = [resolved(doc, f) for f in schemas["QueryDefinition-Input"]["oneOf"]]
    assert [f["title"] for f in members] == [f["title"] for f in definition_json_schema()["oneOf"]]
    forms = {form["properties"]["entity"]["const"]: form for form in members}
    assert set(forms) == set(CATALOGUE)
    invoices = forms["invoices"]["properties"]
    assert invoices["columns"]["items"]["enum"] == list(CATALOGUE["invoices"].columns)
    filters = [resolved(doc, f) for f in invoices["filters"]["items"]["oneOf"]]
    due = [f for f in filters if f["properties"]["column"]["const"] == "due_date"]
    assert {op for f in due for op in f["properties"]["op"]["enum"]} == {
        "eq", "ne", "lt", "lte", "gt", "gte", "between", "is_null", "is_not_null"}
    assert [f["title"] for f in due] == ["InvoicesDueDateFilter", "InvoicesDueDateRangeFilter",
                                         "InvoicesDueDateNullFilter"]
    own = QueryDefinition.model_json_schema(ref_template="#/components/schemas/{model}", mode="serialization")
    generated = schemas["QueryDefinition-Output"]
    assert set(generated["properties"]) == set(own["properties"])
    assert set(schemas["Operator"]["enum"]) == {"eq", "ne", "lt", "lte", "gt", "gte", "between", "in", "not_in",
                                                "contains", "starts_with", "is_null", "is_not_null"}


def test_rule_zones_are_the_canonical_zones_and_calendars_have_one_form_per_frequency():
    from timekeeper.schedules.zones import canonical_zones

    doc = document()
    schemas = doc["components"]["schemas"]
    cron, calendar, interval, rrule = (resolved(doc, f) for f in schemas["Recurrence"]["oneOf"])
    for form in (cron, calendar, interval, rrule):
        assert form["properties"]["timezone"] == {"$ref": "#/components/schemas/TimeZone"}
    assert schemas["TimeZone"]["enum"] == sorted(canonical_zones())
    assert {"localtime", "Factory", "posixrules", "right/UTC"}.isdisjoint(canonical_zones())
    assert {"UTC", "America/New_York", "Asia/Kolkata"} <= canonical_zones()
    forms = [resolved(doc, f) for f in calendar["properties"]["calendar"]["oneOf"]]
    assert [(f["properties"]["frequency"]["const"], sorted(set(f["properties"]) - {
        "frequency", "interval", "start_date", "times"})) for f in forms] == [
        ("daily", []), ("weekly", ["weekdays"]), ("monthly", ["month_day"]), ("monthly", ["nth_weekday"]),
        ("monthly", ["business_day", "holidays", "weekdays"]), ("yearly", ["month", "month_day"]),
        ("yearly", ["month", "nth_weekday"])]


def test_the_document_is_served_at_openapi_json_without_credentials(call):
    reply = call("GET", "/openapi.json", claims=None)
    assert reply.status == 200 and reply.body == document()


def test_the_checked_in_document_is_current():
    # Regenerate with: python -m timekeeper openapi --out shared/timekeeper/api/openapi.json
    assert CHECKED_IN.read_text(encoding="utf-8") == openapi_text()


def test_the_openapi_command_writes_the_document(tmp_path):
    out = tmp_path / "openapi.json"
    assert main(["openapi", "--out", str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8")) == document()


def test_the_snapshot_request_documents_the_refusals_and_the_body():
    doc = document()
    operation = doc["paths"]["/snapshots/runs"]["post"]
    assert {"201", "401", "403", "409", "422"} <= set(operation["responses"])
    body = doc["components"]["schemas"]["SnapshotRunRequest"]
    assert set(body["required"]) == {"owner", "snapshot_type", "workspace_id", "period", "mode", "reason"}
    assert body["properties"]["mode"]["enum"] == ["manual", "backfill"]
    assert body["properties"]["reason"]["maxLength"] == 500
    for path in ("/snapshots/periods", "/snapshots/workspaces/{workspace_id}/periods"):
        assert "404" in doc["paths"][path]["get"]["responses"]


def _nodes(node, path=""):
    """Every JSON object under ``node`` with its JSON-pointer-like path."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _nodes(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _nodes(value, f"{path}[{i}]")


def test_the_document_is_shaped_for_client_generators():
    # What openapi-python-client and openapi-generator drop or cannot type: fields written
    # beside a oneOf (the union wins), anonymous union members (their generated names
    # collide), properties typed only null; and the zone list copied into every rule.
    from timekeeper.schedules.zones import canonical_zones

    doc = document()
    text = json.dumps(doc)
    assert text.count('"Etc/GMT0"') == 1 and text.count('"Etc/GMT+0"') == 1
    zones = doc["components"]["schemas"]["TimeZone"]
    assert len(set(zones["x-enum-varnames"])) == len(zones["enum"]) == len(canonical_zones())
    for path, node in _nodes(doc):
        assert not ("properties" in node and ("oneOf" in node or "anyOf" in node)), path
        for key in ("oneOf", "anyOf"):
            for i, member in enumerate(node.get(key, [])):
                assert "$ref" in member or "properties" not in member, f"{path}/{key}[{i}]"
        for name, prop in node.get("properties", {}).items() if isinstance(node.get("properties"), dict) else ():
            assert prop.get("type") != "null", f"{path}/properties/{name}"
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    # 476 KB with the zone list in every rule; 366 KB with the authoring routes, each schema once;
    # 417 KB with the run, dead-letter, settings and audit routes (the zone list still once)
    assert len(json.dumps(doc, separators=(",", ":"))) < 500_000


def test_every_operation_documents_500_and_503_and_the_headers_it_sets():
    doc = document()
    error = {"$ref": "#/components/schemas/ErrorBody"}
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            answers = operation["responses"]
            for code in ("500", "503"):
                assert answers[code]["content"]["application/json"]["schema"] == error, (method, path)
            assert "Retry-After" in answers["503"]["headers"], (method, path)
            for code, answer in answers.items():
                if code.startswith("4") and "application/json" in answer.get("content", {}):
                    expected = error if not operation.get("security") else _error_body(code)
                    assert answer["content"]["application/json"]["schema"] == expected, (method, path, code)
    created_once = {("/schedules", "201"), ("/queries", "201"), ("/queries/{query_id}/versions", "201"),
                    ("/reports", "201"), ("/query-schedules", "201")}
    for path, code in created_once:
        assert set(doc["paths"][path]["post"]["responses"][code]["headers"]) == {"Location", "Idempotent-Replayed"}
    assert "Location" in doc["paths"]["/reports/{report_id}/renders"]["post"]["responses"]["202"]["headers"]
    assert "Location" in doc["paths"]["/queries/{query_id}/exports"]["post"]["responses"]["202"]["headers"]
    redirect = doc["paths"]["/downloads/{token}"]["get"]["responses"]["302"]
    assert "Location" in redirect["headers"] and "content" not in redirect


def test_answers_type_the_rule_the_source_and_the_basis():
    schemas = document()["components"]["schemas"]
    assert schemas["ScheduleOut"]["properties"]["recurrence"]["$ref"] == "#/components/schemas/Recurrence"
    assert schemas["RulePreview"]["properties"]["recurrence"]["$ref"] == "#/components/schemas/Recurrence"
    assert schemas["QueryScheduleOut"]["properties"]["source"] == {"$ref": "#/components/schemas/SourceOut"}
    assert "query_version" in schemas["SourceOut"]["required"]
    basis = schemas["PeriodOut"]["properties"]["basis"]["anyOf"][0]
    assert basis == {"$ref": "#/components/schemas/SnapshotBasis"}
    assert {"as_of", "rows", "currency", "buckets"} <= set(schemas["SnapshotBasis"]["properties"])
