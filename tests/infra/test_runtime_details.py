"""Runtime details a deploy only shows under load or in a failure: the delivery consumer's
/tmp, S3's answer for a missing delivered file, the owner secret's first rotation, and how
the app stack reads the data stack's values."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.conftest import functions_by_folder, resources
from timekeeper.topology import EXPORTS, QUERIES, QUERY_FILE_STORAGE_MB


def _function(template: dict[str, Any], folder: str) -> dict[str, Any]:
    return template["Resources"][functions_by_folder(template)[folder]]["Properties"]


def _statements_of(template: dict[str, Any], folder: str) -> list[dict[str, Any]]:
    role = _function(template, folder)["Role"]["Fn::GetAtt"][0]
    return [s for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role} in p["Properties"]["Roles"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _actions(statement: dict[str, Any]) -> list[str]:
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


def _export_source(data: dict[str, Any], value: Any) -> Any:
    """The data stack's value behind an ``Fn::ImportValue`` of the app stack."""
    name = value["Fn::ImportValue"]
    return next(o["Value"] for o in data["Outputs"].values() if o.get("Export", {}).get("Name") == name)


def test_the_queries_consumer_gets_the_exports_consumers_tmp(synth):
    # Given the two consumers that write a saved query's whole result to /tmp
    template = synth.app_template
    queries = _function(template, QUERIES.consumer.function)
    exports = _function(template, EXPORTS.consumer.function)

    # Then both get the same room, from their topology descriptions (not Lambda's 512 MB)
    assert QUERIES.consumer.ephemeral_storage_mb == EXPORTS.consumer.ephemeral_storage_mb == QUERY_FILE_STORAGE_MB
    assert queries["EphemeralStorage"] == {"Size": QUERIES.consumer.ephemeral_storage_mb}
    assert exports["EphemeralStorage"] == queries["EphemeralStorage"]
    assert QUERY_FILE_STORAGE_MB > 512


def test_the_delivery_consumer_may_list_the_files_bucket_so_a_missing_file_is_a_404(synth):
    # Given the delivery consumer's grants
    statements = _statements_of(synth.app_template, QUERIES.consumer.function)

    # Then it may list the files bucket itself (the bucket's ARN, no prefix condition: a
    # HEAD request carries no s3:prefix), so S3 answers a missing deliveries/ key 404
    [listing] = [s for s in statements if "s3:ListBucket" in _actions(s)]
    assert _actions(listing) == ["s3:ListBucket"]
    assert listing["Effect"] == "Allow" and "Condition" not in listing
    bucket = _export_source(synth.data_template, listing["Resource"])
    assert bucket == {"Fn::GetAtt": [bucket["Fn::GetAtt"][0], "Arn"]}
    assert synth.data_template["Resources"][bucket["Fn::GetAtt"][0]]["Type"] == "AWS::S3::Bucket"
    # And it still reads and writes objects under deliveries/ only
    [files] = [s for s in statements if "s3:GetObject" in _actions(s) and "s3:PutObject" in _actions(s)]
    assert files["Resource"]["Fn::Join"][1][-1] == "/deliveries/*"


def test_the_owner_secret_rotates_only_once_the_writer_instance_exists(synth):
    # Given the data stack's rotation schedules and the cluster's writer instance
    data = synth.data_template
    [writer] = [lid for lid in resources(data, "AWS::RDS::DBInstance") if "Writer" in lid]
    schedules = resources(data, "AWS::SecretsManager::RotationSchedule").values()
    [owner] = [s for s in schedules if s["Properties"].get("RotateImmediatelyOnUpdate")]

    # Then the owner's schedule, which rotates as soon as it is created, waits for the writer
    assert writer in owner["DependsOn"]


def test_the_app_stack_reads_the_data_stacks_values_through_exports(synth):
    # Given every reference of the app stack to the data stack
    app, data = synth.app_template, synth.data_template
    text = json.dumps(app)
    imports = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "Fn::ImportValue" in value:
                imports.append(value)
            for child in value.values():
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    walk(app)

    # Then none is a weak Fn::GetStackOutput (it does not follow a changed output); every one
    # is an export CloudFormation keeps while the app stack imports it
    assert "Fn::GetStackOutput" not in text
    assert imports
    exported = {o["Export"]["Name"] for o in data["Outputs"].values() if "Export" in o}
    assert {i["Fn::ImportValue"] for i in imports} <= exported
    # And the secrets, security groups and subnets the functions use are among them
    sources = {json.dumps(_export_source(data, i)) for i in imports}
    kinds = {data["Resources"][json.loads(s).get("Ref") or json.loads(s)["Fn::GetAtt"][0]]["Type"]
             for s in sources}
    assert {"AWS::SecretsManager::SecretTargetAttachment", "AWS::EC2::SecurityGroup", "AWS::EC2::Subnet"} <= kinds


def test_no_function_traces_its_response(synth):
    # Given every function of the app stack (each has X-Ray tracing active)
    template = synth.app_template
    functions = resources(template, "AWS::Lambda::Function")

    # Then none lets Powertools' Tracer record a handler's response, which can carry addresses
    traced = {name: f["Properties"] for name, f in functions.items()
              if f["Properties"].get("TracingConfig", {}).get("Mode") == "Active"}
    assert traced
    assert {name: p["Environment"]["Variables"].get("POWERTOOLS_TRACER_CAPTURE_RESPONSE")
            for name, p in traced.items()} == {name: "false" for name in traced}
