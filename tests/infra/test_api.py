"""The HTTP API (when functions/api exists): a regional REST API whose every method needs
the Lambda authorizer, access logs and tracing on its stage, and a function that may publish
"Run now" messages to every pipeline's run queue."""

from __future__ import annotations

import pytest

from infra.api import API_FUNCTION
from infra.settings import FUNCTIONS_DIR, DeploymentConfig
from tests.infra.conftest import functions_by_folder, queue_by_name, resources, synthesize
from timekeeper.settings import run_queue_url_variable
from timekeeper.topology import PIPELINES

pytestmark = pytest.mark.skipif(not (FUNCTIONS_DIR / API_FUNCTION / "handler.py").is_file(),
                                reason="functions/api does not exist")


def test_every_method_needs_the_authorizer(synth):
    template = synth.app_template
    methods = resources(template, "AWS::ApiGateway::Method")
    [authorizer_id] = resources(template, "AWS::ApiGateway::Authorizer")
    assert methods
    # every method but the public download and opt-out routes (GET and POST /downloads/{token}, GET
    # and POST /opt-outs/{token}: which paths, tests/infra/test_delivery.py)
    public = [lid for lid, m in methods.items() if m["Properties"]["AuthorizationType"] == "NONE"]
    assert sorted(methods[lid]["Properties"]["HttpMethod"] for lid in public) == ["GET", "GET", "POST", "POST"]
    for method in (m for lid, m in methods.items() if lid not in public):
        assert method["Properties"]["AuthorizationType"] == "CUSTOM"
        assert method["Properties"]["AuthorizerId"] == {"Ref": authorizer_id}
    authorizer = template["Resources"][authorizer_id]["Properties"]
    assert authorizer["Type"] == "REQUEST"
    assert authorizer["IdentitySource"] == "method.request.header.Authorization"


def test_stage_has_access_logs_and_tracing(synth):
    [stage] = resources(synth.app_template, "AWS::ApiGateway::Stage").values()
    props = stage["Properties"]
    assert props["StageName"] == "v1"
    assert props["TracingEnabled"] is True
    assert props["AccessLogSetting"]["DestinationArn"]
    assert props["MethodSettings"][0]["LoggingLevel"] == "ERROR"
    assert props["MethodSettings"][0]["DataTraceEnabled"] is False


def test_api_function_publishes_to_every_run_queue(synth):
    template = synth.app_template
    api_id = functions_by_folder(template)[API_FUNCTION]
    variables = template["Resources"][api_id]["Properties"]["Environment"]["Variables"]
    for pipeline in PIPELINES.values():
        queue_id, _ = queue_by_name(template, pipeline.consumer.queue_name)
        assert variables[run_queue_url_variable(pipeline.name)] == {"Ref": queue_id}


def test_api_function_runs_in_the_deployments_environment(synth):
    # (the snapshot types staff may request are those the environment enables)
    from timekeeper.settings import ENVIRONMENT_VARIABLE

    def variables(template) -> dict:
        return template["Resources"][functions_by_folder(template)[API_FUNCTION]]["Properties"]["Environment"][
            "Variables"]

    assert variables(synth.app_template)[ENVIRONMENT_VARIABLE] == "production"
    development = synthesize({DeploymentConfig.KEY_ENVIRONMENT: "development"}).app_template
    assert variables(development)[ENVIRONMENT_VARIABLE] == "development"


def test_placeholder_authorizer_denies_everything(synth):
    placeholders = [r for r in resources(synth.app_template, "AWS::Lambda::Function").values()
                    if "ZipFile" in r["Properties"]["Code"]]
    [placeholder] = placeholders
    assert '"Effect": "Deny"' in placeholder["Properties"]["Code"]["ZipFile"]


def test_operator_authorizer_replaces_the_placeholder():
    arn = "arn:aws:lambda:eu-west-1:123456789012:function:idp-authorizer"
    template = synthesize({DeploymentConfig.KEY_AUTHORIZER: arn}).app_template
    assert not [r for r in resources(template, "AWS::Lambda::Function").values()
                if "ZipFile" in r["Properties"]["Code"]]
    [authorizer] = resources(template, "AWS::ApiGateway::Authorizer").values()
    assert arn in str(authorizer["Properties"]["AuthorizerUri"])
    permissions = resources(template, "AWS::Lambda::Permission").values()
    assert any(p["Properties"]["FunctionName"] == arn for p in permissions)
