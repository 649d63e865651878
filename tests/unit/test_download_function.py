"""``functions/downloads`` serves the public download route through the API's resolver and
nothing else: a link that does not verify answers 403 ``link_invalid`` (the route's own
answer), any other resource or method 404 without reaching the resolver."""

from __future__ import annotations

import json

import pytest

from timekeeper import edge
from timekeeper.edge import api as api_edge
from timekeeper.local.lambdas import invoke


@pytest.fixture
def environment(monkeypatch):
    for key, value in {"DATABASE_URL": "postgresql://unused.invalid/none", "LINK_SIGNING_KEY": "k" * 48,
                       "FILES_BUCKET": "files", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    edge.reset()
    api_edge.reset()
    yield
    edge.reset()
    api_edge.reset()


def _event(resource: str, path: str, method: str = "GET") -> dict:
    return {"resource": resource, "path": path, "httpMethod": method, "headers": {}, "multiValueHeaders": {},
            "queryStringParameters": None, "multiValueQueryStringParameters": None,
            "pathParameters": {"token": path.rsplit("/", 1)[-1]}, "stageVariables": None,
            "requestContext": {"resourcePath": resource, "httpMethod": method, "stage": "v1", "path": f"/v1{path}",
                               "requestId": "r-1"},
            "body": None, "isBase64Encoded": False}


def test_a_link_that_does_not_verify_is_refused_by_the_route(environment):
    answer = invoke("downloads", _event("/downloads/{token}", "/downloads/not-a-valid-token"))
    assert answer["statusCode"] == 403
    assert json.loads(answer["body"])["code"] == "link_invalid"


@pytest.mark.parametrize("resource, path, method", [
    ("/{proxy+}", "/schedules", "GET"), ("/downloads/{token}", "/downloads/x", "POST")])
def test_any_other_route_is_not_found(environment, resource, path, method):
    answer = invoke("downloads", _event(resource, path, method))
    assert answer["statusCode"] == 404 and json.loads(answer["body"])["code"] == "not_found"
