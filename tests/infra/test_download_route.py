"""The public download route is fenced apart from the API: its own function
(``functions/downloads``) with the topology's reserved concurrency and the API's walled
login, behind a method throttle tighter than the stage's; the API function no longer holds
the link keys nor reads delivered files (the stage's WAF rate rule on these routes:
test_firewall.py)."""

from __future__ import annotations

import json

from infra import settings
from infra.api import API_FUNCTION
from tests.infra.conftest import functions_by_folder, resources
from timekeeper.settings import LINK_SECRET_VARIABLE
from timekeeper.topology import DOWNLOADS, DOWNLOADS_RESERVED_CONCURRENCY, reserved_concurrency


def _public_methods(template) -> dict[tuple[str, str], dict]:
    """(the first path part, the HTTP method) -> each method without the authorizer."""
    parts = resources(template, "AWS::ApiGateway::Resource")

    def first_part(resource_id: str) -> str:
        props = parts[resource_id]["Properties"]
        parent = props["ParentId"]
        return first_part(parent["Ref"]) if "Ref" in parent and parent["Ref"] in parts else props["PathPart"]

    return {(first_part(m["Properties"]["ResourceId"]["Ref"]), m["Properties"]["HttpMethod"]): m["Properties"]
            for m in resources(template, "AWS::ApiGateway::Method").values()
            if m["Properties"]["AuthorizationType"] == "NONE" and m["Properties"]["HttpMethod"] != "OPTIONS"}


def _download_method(template) -> dict:
    return _public_methods(template)[("downloads", "GET")]


def _policies_of(template, logical_id) -> str:
    role = template["Resources"][logical_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    return json.dumps([p["Properties"]["PolicyDocument"] for p in resources(template, "AWS::IAM::Policy").values()
                       if {"Ref": role} in p["Properties"]["Roles"]])


def test_the_download_route_runs_in_its_own_function_with_its_own_reserved_concurrency(synth):
    template = synth.app_template
    functions = functions_by_folder(template)
    downloads, api = functions[DOWNLOADS.function], functions[API_FUNCTION]
    # The public method integrates the download function, not the API's
    uri = json.dumps(_download_method(template)["Integration"]["Uri"])
    assert downloads in uri and api not in uri
    props = template["Resources"][downloads]["Properties"]
    assert props["ReservedConcurrentExecutions"] == DOWNLOADS_RESERVED_CONCURRENCY == \
        reserved_concurrency()[DOWNLOADS.function]
    # It holds the link keys and reads delivered files; the API function no longer does
    assert LINK_SECRET_VARIABLE in props["Environment"]["Variables"]
    assert LINK_SECRET_VARIABLE not in template["Resources"][api]["Properties"]["Environment"]["Variables"]
    assert "deliveries/" in _policies_of(template, downloads)
    assert "deliveries/" not in _policies_of(template, api)


def test_the_stage_and_the_download_method_are_throttled(synth):
    [stage] = resources(synth.app_template, "AWS::ApiGateway::Stage").values()
    settings_by_path = {(m["ResourcePath"], m["HttpMethod"]): m for m in stage["Properties"]["MethodSettings"]}
    every = settings_by_path[("/*", "*")]
    assert (every["ThrottlingRateLimit"], every["ThrottlingBurstLimit"]) == (settings.API_THROTTLE_RATE_RPS,
                                                                            settings.API_THROTTLE_BURST)
    download = settings_by_path[("/~1downloads~1{token}", "GET")]
    assert (download["ThrottlingRateLimit"], download["ThrottlingBurstLimit"]) == (
        settings.DOWNLOAD_THROTTLE_RATE_RPS, settings.DOWNLOAD_THROTTLE_BURST)
    assert settings.DOWNLOAD_THROTTLE_RATE_RPS < settings.API_THROTTLE_RATE_RPS


def test_the_opt_out_route_runs_in_the_download_function_throttled_like_the_download_route(synth):
    # Given the public methods: the download route's GET and the one-click opt-out's GET and POST
    template = synth.app_template
    functions = functions_by_folder(template)
    downloads, api = functions[DOWNLOADS.function], functions[API_FUNCTION]
    public = _public_methods(template)
    assert set(public) == {("downloads", "GET"), ("downloads", "POST"), ("opt-outs", "GET"), ("opt-outs", "POST")}
    # (the download link's POST is "send me a fresh link", in the same function)
    assert downloads in json.dumps(public[("downloads", "POST")]["Integration"]["Uri"])
    # Then the opt-out's methods integrate the download function (it holds the link keys), not the API's
    for verb in ("GET", "POST"):
        uri = json.dumps(public[("opt-outs", verb)]["Integration"]["Uri"])
        assert downloads in uri and api not in uri
    # And each has the download route's method throttle
    [stage] = resources(template, "AWS::ApiGateway::Stage").values()
    settings_by_path = {(m["ResourcePath"], m["HttpMethod"]): m for m in stage["Properties"]["MethodSettings"]}
    for verb in ("GET", "POST"):
        throttle = settings_by_path[("/~1opt-outs~1{token}", verb)]
        assert (throttle["ThrottlingRateLimit"], throttle["ThrottlingBurstLimit"]) == (
            settings.DOWNLOAD_THROTTLE_RATE_RPS, settings.DOWNLOAD_THROTTLE_BURST)
