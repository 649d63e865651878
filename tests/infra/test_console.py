"""The console deployed (``timekeeper:console=true``): API Gateway sends ``/console`` and
below to the API function without the API's authorizer while every other path keeps it;
the session key is a Secrets Manager secret the stack creates and the function reads at
its cold start (never a key in the environment); with the stack's user pool, a hosted
domain and an app client for the authorization-code flow whose callback is the console's;
with the operator's issuer, its client id (and client secret's grant). The answers of the
function with the synthesized environment carry the CSP without ``unsafe-inline``,
``frame-ancestors 'none'``, HSTS and ``HttpOnly; Secure; SameSite=Lax`` cookies under the
stage's path. Each configuration passes cdk-nag (synthesis fails on an unacknowledged
finding); a console in the endpoints-only VPC, or without an issuer, is refused at synth."""

from __future__ import annotations

import json
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

import pytest

from infra.settings import DeploymentConfig
from tests.api.conftest import proxy_event
from tests.infra.conftest import functions_by_folder, resources, synthesize
from timekeeper.console.context import CONTENT_SECURITY_POLICY
from timekeeper.console.sessions import SESSION_COOKIE
from timekeeper.console.sign_in import FLOW_COOKIE
from timekeeper.settings import (
    CONSOLE_BASE_PATH_VARIABLE,
    CONSOLE_OIDC_CLIENT_ID_VARIABLE,
    CONSOLE_OIDC_CLIENT_SECRET_VARIABLE,
    CONSOLE_OIDC_ISSUER_VARIABLE,
    CONSOLE_SESSION_KEY_VARIABLE,
    CONSOLE_SESSION_SECRET_VARIABLE,
)
from timekeeper.topology import API

COGNITO_CONSOLE = {DeploymentConfig.KEY_COGNITO: "true", DeploymentConfig.KEY_CONSOLE: "true",
                   DeploymentConfig.KEY_COGNITO_DOMAIN_PREFIX: "acme-timekeeper",
                   DeploymentConfig.KEY_EGRESS: DeploymentConfig.EGRESS_NAT_INSTANCE}
ISSUER = "https://login.acme-saas.dev/realms/timekeeper"
CLIENT_SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:console-client-AbCdEf"
OPERATOR_CONSOLE = {DeploymentConfig.KEY_JWT_ISSUER: ISSUER, DeploymentConfig.KEY_JWT_AUDIENCE: "timekeeper-api",
                    DeploymentConfig.KEY_CONSOLE: "true", DeploymentConfig.KEY_CONSOLE_CLIENT_ID: "tk-console",
                    DeploymentConfig.KEY_CONSOLE_CLIENT_SECRET_ARN: CLIENT_SECRET_ARN,
                    DeploymentConfig.KEY_EGRESS: DeploymentConfig.EGRESS_NAT}


@pytest.fixture(scope="module")
def cognito_console():
    return synthesize(COGNITO_CONSOLE)


@pytest.fixture(scope="module")
def operator_console():
    return synthesize(OPERATOR_CONSOLE)


def _api_function(template) -> tuple[str, dict]:
    logical_id = functions_by_folder(template)[API.function]
    return logical_id, template["Resources"][logical_id]["Properties"]


def _header(response: dict, name: str) -> str | None:
    for key, values in (response.get("multiValueHeaders") or {}).items():
        if key.lower() == name.lower():
            return values[-1]
    return next((v for k, v in (response.get("headers") or {}).items() if k.lower() == name.lower()), None)


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def _methods(template) -> dict[str, dict]:
    """Path part of each method's resource ('' for the root) -> the method's properties."""
    parts = {k: r["Properties"]["PathPart"] for k, r in resources(template, "AWS::ApiGateway::Resource").items()}
    parents = {k: r["Properties"]["ParentId"] for k, r in resources(template, "AWS::ApiGateway::Resource").items()}

    def path(resource_id) -> str:
        if isinstance(resource_id, dict) and "Ref" in resource_id:
            ref = resource_id["Ref"]
            return f"{path(parents[ref])}/{parts[ref]}"
        return ""  # the root (Fn::GetAtt RootResourceId)

    return {f"{m['Properties']['HttpMethod']} {path(m['Properties']['ResourceId']) or '/'}": m["Properties"]
            for m in resources(template, "AWS::ApiGateway::Method").values()}


def test_the_console_reaches_the_api_function_without_the_authorizer_and_the_api_keeps_it(cognito_console):
    template = cognito_console.app_template
    function_id, _ = _api_function(template)
    methods = _methods(template)
    for route in ("ANY /console", "ANY /console/{proxy+}", "GET /favicon.ico"):
        props = methods[route]
        assert props["AuthorizationType"] == "NONE" and "AuthorizerId" not in props, route
        assert function_id in json.dumps(props["Integration"]["Uri"]), route
    for route in ("ANY /", "ANY /{proxy+}"):
        props = methods[route]
        assert props["AuthorizationType"] == "CUSTOM" and "AuthorizerId" in props, route
    # Only the console and the public link routes (a delivery's download and its opt-out) are open
    assert sorted(r for r, p in methods.items() if p["AuthorizationType"] == "NONE") == [
        "ANY /console", "ANY /console/{proxy+}", "GET /downloads/{token}", "GET /favicon.ico",
        "GET /opt-outs/{token}", "POST /downloads/{token}", "POST /opt-outs/{token}"]


def test_without_the_console_its_paths_keep_the_authorizer(synth):
    methods = _methods(synth.app_template)
    assert not [r for r in methods if "/console" in r or "favicon" in r]
    _, props = _api_function(synth.app_template)
    assert CONSOLE_SESSION_SECRET_VARIABLE not in props["Environment"]["Variables"]


def test_the_session_key_is_a_secret_the_function_may_read_never_a_variable(cognito_console):
    template = cognito_console.app_template
    function_id, props = _api_function(template)
    variables = props["Environment"]["Variables"]
    assert CONSOLE_SESSION_KEY_VARIABLE not in variables
    secret_ref = variables[CONSOLE_SESSION_SECRET_VARIABLE]["Ref"]
    secret = template["Resources"][secret_ref]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    generated = secret["Properties"]["GenerateSecretString"]
    assert generated["GenerateStringKey"] == "key" and generated["PasswordLength"] >= 32
    role = props["Role"]["Fn::GetAtt"][0]
    grants = [s for p in resources(template, "AWS::IAM::Policy").values()
              if {"Ref": role} in p["Properties"]["Roles"] for s in p["Properties"]["PolicyDocument"]["Statement"]]
    assert any({"Ref": secret_ref} in _listed(s["Resource"]) and "secretsmanager:GetSecretValue" in s["Action"]
               for s in grants)
    assert variables[CONSOLE_BASE_PATH_VARIABLE] == "/v1"


def test_the_user_pool_gets_a_hosted_domain_and_a_code_flow_client_for_the_console(cognito_console):
    template = cognito_console.app_template
    [domain] = resources(template, "AWS::Cognito::UserPoolDomain").values()
    assert domain["Properties"]["Domain"] == "acme-timekeeper"
    _, function = _api_function(template)
    variables = function["Environment"]["Variables"]
    console_id = variables[CONSOLE_OIDC_CLIENT_ID_VARIABLE]["Ref"]
    props = resources(template, "AWS::Cognito::UserPoolClient")[console_id]["Properties"]
    assert props["AllowedOAuthFlows"] == ["code"] and props["AllowedOAuthFlowsUserPoolClient"] is True
    assert set(props["AllowedOAuthScopes"]) >= {"openid"} and props.get("GenerateSecret") in (None, False)
    [callback] = props["CallbackURLs"]
    # The API's own client offers no OAuth flow at the hosted domain (no implicit grant,
    # no callback but the console's)
    others = [c["Properties"] for k, c in resources(template, "AWS::Cognito::UserPoolClient").items()
              if k != console_id]
    assert others and all(not c.get("AllowedOAuthFlows") and not c.get("CallbackURLs") for c in others)
    assert json.dumps(callback).endswith('"/v1/console/callback"]]}')
    # The same issuer the API's authorizer trusts
    authorizer_id = functions_by_folder(template)["authorizer"]
    authorizer_env = template["Resources"][authorizer_id]["Properties"]["Environment"]["Variables"]
    assert variables[CONSOLE_OIDC_ISSUER_VARIABLE] == authorizer_env["JWT_ISSUER"]
    # The hosted domain's endpoints
    hosted = ".amazoncognito.com/oauth2/"
    assert json.dumps(variables["CONSOLE_OIDC_AUTHORIZATION_ENDPOINT"]).endswith(hosted + 'authorize"]]}')
    assert json.dumps(variables["CONSOLE_OIDC_TOKEN_ENDPOINT"]).endswith(hosted + 'token"]]}')
    assert "/logout?client_id=" in json.dumps(variables["CONSOLE_OIDC_LOGOUT_URL"])
    assert variables["JWT_WORKSPACE_CLAIM"] == "custom:workspace_id"
    assert variables["JWT_ROLES_CLAIM"] == "cognito:groups"


def test_the_operators_issuer_gets_its_client_id_and_its_client_secrets_grant(operator_console):
    template = operator_console.app_template
    _, props = _api_function(template)
    variables = props["Environment"]["Variables"]
    assert variables[CONSOLE_OIDC_ISSUER_VARIABLE] == ISSUER
    assert variables[CONSOLE_OIDC_CLIENT_ID_VARIABLE] == "tk-console"
    assert variables[CONSOLE_OIDC_CLIENT_SECRET_VARIABLE] == CLIENT_SECRET_ARN
    assert not resources(template, "AWS::Cognito::UserPoolClient")
    role = props["Role"]["Fn::GetAtt"][0]
    grants = [s for p in resources(template, "AWS::IAM::Policy").values()
              if {"Ref": role} in p["Properties"]["Roles"] for s in p["Properties"]["PolicyDocument"]["Statement"]]
    assert any(CLIENT_SECRET_ARN in _listed(s["Resource"]) and "secretsmanager:GetSecretValue" in s["Action"]
               for s in grants)


@pytest.mark.parametrize("name", ["cognito_console", "operator_console"])
def test_the_api_function_has_its_route_to_the_identity_provider(name, request):
    # The topology says what the API function calls on the internet; its subnets route
    # there through the NAT (instance or gateway) and its security group lets it out.
    from tests.infra.test_reachability import Network

    result = request.getfixturevalue(name)
    assert "token endpoint" in API.internet
    _, props = _api_function(result.app_template)
    network = Network(result.data_template)
    subnets = [network.resolve(s) for s in props["VpcConfig"]["SubnetIds"]]
    groups = [network.resolve(g) for g in props["VpcConfig"]["SecurityGroupIds"]]
    assert subnets and all(network._nat_route(s) for s in subnets)
    assert any(network._egress_open(g) for g in groups)


@pytest.mark.parametrize("context, message", [
    ({DeploymentConfig.KEY_CONSOLE: "true", DeploymentConfig.KEY_EGRESS: "nat"}, "JWT authorizer's issuer"),
    ({**COGNITO_CONSOLE, DeploymentConfig.KEY_EGRESS: "endpoints"}, "no route to the internet"),
    ({**COGNITO_CONSOLE, DeploymentConfig.KEY_COGNITO_DOMAIN_PREFIX: "my-cognito"}, "hosted domain"),
    ({**OPERATOR_CONSOLE, DeploymentConfig.KEY_CONSOLE_CLIENT_ID: ""}, "needs its client id"),
    ({DeploymentConfig.KEY_CONSOLE_CLIENT_ID: "x"}, "add timekeeper:console=true"),
], ids=["no-issuer", "endpoints-egress", "reserved-domain-word", "no-client-id", "client-without-console"])
def test_a_console_that_could_not_sign_anyone_in_is_refused_at_synth(context, message):
    with pytest.raises(ValueError, match=message):
        synthesize(context)


def test_the_deployed_function_reads_the_session_key_at_cold_start_and_answers_with_the_flags(
        cognito_console, monkeypatch):
    # Given the API function's environment as synthesized (values CloudFormation resolves
    # become placeholders; the session key secret is a real one, in moto), in an AWS-like process
    import boto3
    from moto import mock_aws

    from timekeeper import edge
    from timekeeper.edge import adapters, startup
    from timekeeper.edge import api as api_edge
    from timekeeper.local.lambdas import invoke

    _, props = _api_function(cognito_console.app_template)
    variables = props["Environment"]["Variables"]
    with mock_aws():
        monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
        for name in ("DATABASE_URL", "AWS_ENDPOINT_URL", CONSOLE_SESSION_KEY_VARIABLE, "CONSOLE_DEV_SIGN_IN"):
            monkeypatch.delenv(name, raising=False)
        secret = boto3.client("secretsmanager", region_name="eu-west-1").create_secret(
            Name="console-session", SecretString=json.dumps({"key": "s" * 64}))["ARN"]
        for name, value in variables.items():
            placeholder = f"https://{name.lower().replace('_', '-')}.example/api" if any(
                word in name for word in ("URL", "ENDPOINT", "URI", "ISSUER")) else f"{name}-of-api"
            monkeypatch.setenv(name, secret if name == CONSOLE_SESSION_SECRET_VARIABLE
                               else value if isinstance(value, str) else placeholder)
        edge.reset()
        api_edge.reset()
        try:
            # When Lambda imports the handler, its cold start reads the session key secret
            startup.cold_start(API.function)
            assert adapters.requested_services() == API.services
            assert api_edge._cached("console", lambda: None) is not None
            # Then sign-in sends the browser to the hosted domain, and each answer carries the flags
            event = proxy_event("GET", "/console/sign-in", claims=None)
            event["requestContext"]["path"] = "/v1/console/sign-in"
            sign_in = invoke(API.function, event)
            refused = invoke(API.function, proxy_event("GET", "/console/callback?code=c&state=s", claims=None))
            page = invoke(API.function, proxy_event("GET", "/console/schedules", claims=None))
        finally:
            edge.reset()
            api_edge.reset()
    assert sign_in["statusCode"] == 303
    location = urlsplit(_header(sign_in, "Location"))
    assert location.netloc == "console-oidc-authorization-endpoint.example"  # the synthesized variable
    query = parse_qs(location.query)
    assert query["code_challenge_method"] == ["S256"] and query["response_type"] == ["code"]
    [flow] = sign_in["multiValueHeaders"]["Set-Cookie"]
    assert SimpleCookie(flow).get(FLOW_COOKIE) is not None
    assert {"HttpOnly", "Secure", "SameSite=Lax", "Path=/v1/console"} <= {p.strip() for p in flow.split(";")}
    assert refused["statusCode"] == 403 and page["statusCode"] == 303
    assert _header(page, "Location") == "/v1/console/sign-in?next=%2Fconsole%2Fschedules"
    for answer in (sign_in, refused, page):
        assert _header(answer, "Content-Security-Policy") == CONTENT_SECURITY_POLICY
        assert "unsafe-inline" not in CONTENT_SECURITY_POLICY and "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
        assert _header(answer, "Strict-Transport-Security").startswith("max-age=")
    refused_cookies = (refused.get("multiValueHeaders") or {}).get("Set-Cookie", [])
    assert not [c for c in refused_cookies if c.startswith(f"{SESSION_COOKIE}=")]
    assert [c for c in refused_cookies if c.startswith(f"{FLOW_COOKIE}=;") and "Max-Age=0" in c]


@pytest.mark.parametrize("name", ["cognito_console", "operator_console"])
def test_the_console_templates_pass_cfn_lint(name, request):
    from cfnlint.api import ManualArgs, lint_file

    result = request.getfixturevalue(name)
    matches = lint_file(result.outdir / "TimekeeperApp.template.json", ManualArgs(regions=["us-east-1", "eu-west-1"]))
    assert [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")] == []


def test_the_console_client_may_not_write_the_workspace_attribute(cognito_console):
    # Both app clients of the pool name their write attributes; neither names a custom one.
    for client in resources(cognito_console.app_template, "AWS::Cognito::UserPoolClient").values():
        writable = client["Properties"].get("WriteAttributes")
        assert writable and "custom:workspace_id" not in writable
