"""Synthesis for the infra tests: the real app (``infra.stacks.build``, cdk.json's feature
flags, cdk-nag attached) with asset bundling skipped, synthesized once per context and
shared by every test of the session."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# jsii's banner about Node 20's end of life, once per process, is noise in test output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk  # noqa: E402
import pytest  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402

from infra.settings import FUNCTION_TAG, ROOT  # noqa: E402
from infra.stacks import APP_STACK, DATA_STACK, Stacks, build  # noqa: E402

#: Skips every asset's bundling (the layer's pip step); CDK's own context key.
SKIP_BUNDLING = {"aws:cdk:bundling-stacks": []}
#: What every deployment must name (there is no default): the address delivery e-mail
#: comes from, at a domain the stack creates a DKIM-signed identity for.
DEPLOYMENT = {"timekeeper:mailSender": "reports@mail.acme-saas.dev", "timekeeper:mailDomain": "mail.acme-saas.dev"}


@dataclass
class Synth:
    """One synthesized app: its stacks, cloud assembly folder and raw templates."""

    app: cdk.App
    stacks: Stacks
    outdir: Path
    raw: dict[str, dict[str, Any]]

    def template(self, stack: str) -> Template:
        """The assertions view of ``stack``'s template."""
        return Template.from_json(self.raw[stack])

    @property
    def app_template(self) -> dict[str, Any]:
        return self.raw[APP_STACK]

    @property
    def data_template(self) -> dict[str, Any]:
        return self.raw[DATA_STACK]


def cdk_json_context() -> dict[str, Any]:
    """The context of cdk.json (the feature flags of the pinned aws-cdk-lib)."""
    return json.loads((ROOT / "cdk.json").read_text())["context"]


_WORKDIRS: list[Path] = []


def synthesize(extra_context: dict[str, Any] | None = None) -> Synth:
    """Build and synthesize the app with ``extra_context`` over cdk.json's, bundling skipped."""
    outdir = Path(tempfile.mkdtemp(prefix="tk-cdk-"))
    _WORKDIRS.append(outdir)
    app = cdk.App(context={**cdk_json_context(), **SKIP_BUNDLING, **DEPLOYMENT, **(extra_context or {})},
                  outdir=str(outdir))
    stacks = build(app)
    assembly = app.synth()
    raw = {stack.stack_name: stack.template for stack in assembly.stacks}
    return Synth(app=app, stacks=stacks, outdir=outdir, raw=raw)


@pytest.fixture(scope="session", autouse=True)
def _remove_cloud_assemblies():
    yield
    for folder in _WORKDIRS:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def synth() -> Synth:
    """The default deployment (Aurora created), synthesized once per test session."""
    return synthesize()


def resources(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    """Logical id -> resource of every resource of ``type_``."""
    return {k: r for k, r in template["Resources"].items() if r["Type"] == type_}


def tag_value(resource: dict[str, Any], key: str) -> str | None:
    """The value of tag ``key`` on ``resource`` (CloudFormation's list-of-pairs form)."""
    for tag in resource.get("Properties", {}).get("Tags", []):
        if tag.get("Key") == key:
            return tag.get("Value")
    return None


def functions_by_folder(template: dict[str, Any]) -> dict[str, str]:
    """functions/ folder name -> logical id of the (first) Lambda built from it (a
    pipeline's dispatcher partition 0; :func:`functions_of_folder` lists every one)."""
    return {folder: ids[0] for folder, ids in functions_of_folder(template).items()}


def functions_of_folder(template: dict[str, Any]) -> dict[str, list[str]]:
    """functions/ folder name -> logical ids of every Lambda built from it, in template
    order (a pipeline's dispatcher code is one function per partition)."""
    found: dict[str, list[str]] = {}
    for logical_id, resource in resources(template, "AWS::Lambda::Function").items():
        folder = tag_value(resource, FUNCTION_TAG)
        if folder:
            found.setdefault(folder, []).append(logical_id)
    return found


def queue_by_name(template: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    """(logical id, resource) of the SQS queue named ``name``; raises ``KeyError``."""
    for logical_id, resource in resources(template, "AWS::SQS::Queue").items():
        if resource["Properties"].get("QueueName") == name:
            return logical_id, resource
    raise KeyError(name)


def alarm_by_name(template: dict[str, Any], name: str) -> dict[str, Any]:
    """The properties of the alarm named ``name``; raises ``KeyError``."""
    for resource in resources(template, "AWS::CloudWatch::Alarm").values():
        if resource["Properties"].get("AlarmName") == name:
            return resource["Properties"]
    raise KeyError(name)


def rule_targeting(template: dict[str, Any], function_id: str) -> tuple[str, dict[str, Any]] | None:
    """(logical id, resource) of the EventBridge rule whose target is ``function_id``."""
    for logical_id, resource in resources(template, "AWS::Events::Rule").items():
        for target in resource["Properties"].get("Targets", []):
            if target.get("Arn") == {"Fn::GetAtt": [function_id, "Arn"]}:
                return logical_id, resource
    return None


def event_sources_of(template: dict[str, Any], function_id: str) -> list[dict[str, Any]]:
    """The properties of every event source mapping feeding ``function_id``."""
    return [r["Properties"] for r in resources(template, "AWS::Lambda::EventSourceMapping").values()
            if r["Properties"].get("FunctionName") == {"Ref": function_id}]


def notification_topic_id(template: dict[str, Any]) -> str:
    """The logical id of the operators' notification topic (alarms, pause notices)."""
    [topic] = [k for k, t in resources(template, "AWS::SNS::Topic").items()
               if t["Properties"].get("DisplayName") == "Timekeeper"]
    return topic


def notification_key_id(template: dict[str, Any]) -> str:
    """The logical id of the notification topic's KMS key."""
    topic = template["Resources"][notification_topic_id(template)]
    return topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
