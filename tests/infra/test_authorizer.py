"""The API's authorizer in its three configurations: with neither an issuer nor a user pool,
the deny-all placeholder; with an OpenID Connect issuer (context), the JWT authorizer
function configured for it, outside the VPC, calling no AWS service; with
``timekeeper:cognitoUserPool``, a user pool and app client whose issuer and client id the
authorizer trusts. Each configuration passes cdk-nag (synthesis fails on an unacknowledged
finding) and cfn-lint. (The token checks are unit tests: tests/unit/test_jwt_authorizer.py.)"""

from __future__ import annotations

import pytest
from cfnlint.api import ManualArgs, lint_file

from infra.settings import DeploymentConfig
from tests.infra.conftest import functions_by_folder, resources, synthesize
from timekeeper.topology import AUTHORIZER, OPTIONAL_FUNCTIONS

ISSUER = "https://login.acme-saas.dev/realms/timekeeper"
OIDC = {DeploymentConfig.KEY_JWT_ISSUER: ISSUER, DeploymentConfig.KEY_JWT_AUDIENCE: "timekeeper-api",
        DeploymentConfig.KEY_JWT_WORKSPACE_CLAIM: "tenant", DeploymentConfig.KEY_JWT_ROLES_CLAIM: "groups"}


@pytest.fixture(scope="module")
def oidc():
    return synthesize(OIDC)


@pytest.fixture(scope="module")
def cognito():
    return synthesize({DeploymentConfig.KEY_COGNITO: "true"})


def _authorizer_uri(template) -> str:
    [authorizer] = resources(template, "AWS::ApiGateway::Authorizer").values()
    assert authorizer["Properties"]["Type"] == "REQUEST"
    return str(authorizer["Properties"]["AuthorizerUri"])


def _jwt_function(template) -> tuple[str, dict]:
    logical_id = functions_by_folder(template)[AUTHORIZER.function]
    return logical_id, template["Resources"][logical_id]["Properties"]


def test_without_an_issuer_or_a_user_pool_the_placeholder_denies_everything(synth):
    template = synth.app_template
    assert AUTHORIZER.function not in functions_by_folder(template)
    assert not resources(template, "AWS::Cognito::UserPool")
    [placeholder] = [r for r in resources(template, "AWS::Lambda::Function").values()
                     if "ZipFile" in r["Properties"]["Code"]]
    assert '"Effect": "Deny"' in placeholder["Properties"]["Code"]["ZipFile"]


def test_an_issuer_gets_the_jwt_authorizer_with_its_claim_names(oidc):
    template = oidc.app_template
    logical_id, props = _jwt_function(template)
    assert logical_id in _authorizer_uri(template)
    assert AUTHORIZER.function in OPTIONAL_FUNCTIONS
    assert props["Environment"]["Variables"].items() >= {
        "JWT_ISSUER": ISSUER, "JWT_AUDIENCE": "timekeeper-api", "JWT_USER_CLAIM": "sub",
        "JWT_WORKSPACE_CLAIM": "tenant", "JWT_ROLES_CLAIM": "groups"}.items()
    # Outside the VPC (the JWKS is on the internet), without a database secret
    assert "VpcConfig" not in props and "DB_SECRET_ARN" not in props["Environment"]["Variables"]
    # No placeholder
    assert not [r for r in resources(template, "AWS::Lambda::Function").values()
                if "ZipFile" in r["Properties"]["Code"]]


def test_a_cognito_user_pool_is_created_and_trusted(cognito):
    template = cognito.app_template
    [(pool_id, pool)] = resources(template, "AWS::Cognito::UserPool").items()
    [(client_id, client)] = resources(template, "AWS::Cognito::UserPoolClient").items()
    assert client["Properties"]["UserPoolId"] == {"Ref": pool_id}
    assert client["Properties"].get("GenerateSecret") is False
    assert {"Name": "workspace_id", "AttributeDataType": "String", "Mutable": True,
            "StringAttributeConstraints": {"MinLength": "36", "MaxLength": "36"}} in pool["Properties"]["Schema"]
    _, props = _jwt_function(template)
    variables = props["Environment"]["Variables"]
    assert variables["JWT_ISSUER"] == {"Fn::Join": ["", ["https://cognito-idp.", {"Ref": "AWS::Region"}, ".",
                                                         {"Ref": "AWS::URLSuffix"}, "/", {"Ref": pool_id}]]}
    assert variables["JWT_AUDIENCE"] == {"Ref": client_id}
    assert (variables["JWT_WORKSPACE_CLAIM"], variables["JWT_ROLES_CLAIM"]) == ("custom:workspace_id",
                                                                              "cognito:groups")


def test_no_app_client_lets_a_user_write_their_workspace_attribute(cognito):
    # An app client without WriteAttributes lets its users write every attribute with their
    # own access token (UpdateUserAttributes), custom:workspace_id included: a user could
    # name another workspace and sign in to it. Only an administrator may set it.
    clients = resources(cognito.app_template, "AWS::Cognito::UserPoolClient").values()
    assert clients
    for client in clients:
        writable = client["Properties"].get("WriteAttributes")
        assert writable, "an app client without WriteAttributes may write every attribute"
        assert not [name for name in writable if name.startswith("custom:")]
        assert "custom:workspace_id" not in writable


@pytest.mark.parametrize("configuration", ["synth", "oidc", "cognito"])
def test_the_authorizer_answer_is_cached_briefly(configuration, request):
    # API Gateway reuses an Allow for the same header for the TTL: a token outlives its
    # expiry by that long (docs/deploy.md says why it is 30 s, not 0 and not the default 300).
    template = request.getfixturevalue(configuration).app_template
    [authorizer] = resources(template, "AWS::ApiGateway::Authorizer").values()
    assert 0 < authorizer["Properties"]["AuthorizerResultTtlInSeconds"] <= 60


@pytest.mark.parametrize("configuration", ["oidc", "cognito"])
def test_each_configuration_passes_cdk_nag_and_cfn_lint(configuration, request):
    result = request.getfixturevalue(configuration)
    report = result.stacks.checks.validate_scope(result.app)
    assert [v.rule_name for v in report.violations] == []
    matches = lint_file(result.outdir / "TimekeeperApp.template.json", ManualArgs(regions=["us-east-1", "eu-west-1"]))
    assert [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")] == []


@pytest.mark.parametrize("context, message", [
    ({DeploymentConfig.KEY_JWT_ISSUER: ISSUER}, "needs both"),
    ({DeploymentConfig.KEY_JWT_ISSUER: "http://insecure.example", DeploymentConfig.KEY_JWT_AUDIENCE: "a"}, "https"),
    ({**OIDC, DeploymentConfig.KEY_AUTHORIZER: "arn:aws:lambda:eu-west-1:123456789012:function:x"}, "exclude"),
    ({DeploymentConfig.KEY_COGNITO: "true", DeploymentConfig.KEY_JWT_AUDIENCE: "a"}, "creates the issuer"),
])
def test_inconsistent_authorizer_context_fails_the_synthesis(context, message):
    with pytest.raises(ValueError, match=message):
        synthesize(context)
