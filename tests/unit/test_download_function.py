"""``functions/downloads`` serves the public link routes (the download route, the one-click
opt-out's page and POST) through the API's resolver and nothing else: a link that does
not verify answers the route's own refusal (403 ``link_invalid``; the opt-out's 403
page), any other resource or method 404 without reaching the resolver."""

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


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_opt_out_link_that_does_not_verify_is_refused_by_the_opt_out_route(environment, method):
    event = _event("/opt-outs/{token}", "/opt-outs/not-a-valid-token", method)
    if method == "POST":  # the one-click request's form (RFC 8058)
        event.update(headers={"Content-Type": "application/x-www-form-urlencoded"},
                     body="List-Unsubscribe=One-Click")
    answer = invoke("downloads", event)
    assert answer["statusCode"] == 403
    multi = answer.get("multiValueHeaders") or {}
    headers = {**(answer.get("headers") or {}), **{k: v[-1] for k, v in multi.items()}}
    assert headers["Content-Type"].startswith("text/html") and "not valid" in answer["body"]


@pytest.mark.parametrize("resource, path, method", [
    ("/{proxy+}", "/schedules", "GET"), ("/downloads/{token}", "/downloads/x", "DELETE"),
    ("/opt-outs/{token}", "/opt-outs/x", "DELETE"), ("/{proxy+}", "/mail-suppressions", "GET")])
def test_any_other_route_is_not_found(environment, resource, path, method):
    answer = invoke("downloads", _event(resource, path, method))
    assert answer["statusCode"] == 404 and json.loads(answer["body"])["code"] == "not_found"
