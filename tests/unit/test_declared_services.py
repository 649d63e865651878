"""The edge creates AWS clients only for the services a function declares in the topology,
and builds them at cold start: a function whose code calls an undeclared service fails
when Lambda imports its handler, naming the service, not in the middle of its work."""

from __future__ import annotations

import importlib.util

import pytest

from timekeeper import topology
from timekeeper.edge import adapters, startup
from timekeeper.local.lambdas import FUNCTIONS_DIR
from timekeeper.settings import FUNCTION_VARIABLE

#: What infra sets on the functions (names only; no call is made at cold start).
ENVIRONMENT = {
    "AWS_DEFAULT_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "DB_HOST": "proxy.example", "DB_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf",
    "RUN_QUEUE_URL_ACCOUNTING": "https://sqs.eu-west-1.amazonaws.com/123456789012/timekeeper-accounting-runs",
    "RUN_QUEUE_URL_QUERIES": "https://sqs.eu-west-1.amazonaws.com/123456789012/timekeeper-queries-runs",
    "WORK_QUEUE_URL_EXPORTS": "https://sqs.eu-west-1.amazonaws.com/123456789012/timekeeper-exports",
    "SNAPSHOT_JOB_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/timekeeper-snapshots-jobs",
    "NOTIFICATION_TOPIC_ARN": "arn:aws:sns:eu-west-1:123456789012:timekeeper-notifications",
    "FILES_BUCKET": "timekeeper-files", "REPORT_RENDERER_FUNCTION": "timekeeper-report-renderer",
    "MAIL_SENDER": "reports@example.org", "LINK_SIGNING_KEY": "k" * 48,
    "JWT_ISSUER": "https://issuer.example", "JWT_AUDIENCE": "timekeeper-api",
}


@pytest.fixture
def aws_function(monkeypatch):
    """Run as the function named by the returned setter, with infra's variables."""
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    adapters.reset()

    def run_as(function: str) -> None:
        monkeypatch.setenv(FUNCTION_VARIABLE, function)
        adapters.reset()

    yield run_as
    monkeypatch.delenv(FUNCTION_VARIABLE, raising=False)
    adapters.reset()


@pytest.mark.parametrize("function", sorted(topology.function_services()))
def test_each_function_builds_at_cold_start_exactly_the_clients_it_declares(aws_function, function):
    # Given a function of the topology, as infra deploys it
    aws_function(function)
    # When its cold start runs
    startup.cold_start(function)
    # Then it asked for a client of every service it declares and of nothing else
    assert adapters.requested_services() == topology.function_services()[function]


def test_a_client_of_an_undeclared_service_fails_at_cold_start_naming_it(aws_function, monkeypatch):
    # Given the snapshot planner's declaration without Lambda (the service of its nudge)
    reduced = {**topology.function_services(), "snapshot_planner": topology.calls()}
    monkeypatch.setattr(adapters, "function_services", lambda: reduced)
    aws_function("snapshot_planner")
    # When Lambda imports its handler (the cold start)
    spec = importlib.util.spec_from_file_location("planner_handler", FUNCTIONS_DIR / "snapshot_planner" / "handler.py")
    module = importlib.util.module_from_spec(spec)
    # Then the import fails, naming the function and the service to declare
    refused = r"snapshot_planner asked for a lambda client.*declare 'lambda'"
    with pytest.raises(adapters.UndeclaredService, match=refused):
        spec.loader.exec_module(module)


def test_a_handler_deployed_under_another_function_name_fails_at_cold_start(aws_function):
    aws_function("snapshot_planner")
    with pytest.raises(adapters.UndeclaredService, match="the api handler"):
        startup.cold_start("api")


def test_a_name_outside_the_topology_fails(aws_function):
    aws_function("reporting_helper")
    with pytest.raises(adapters.UndeclaredService, match="names no function"):
        adapters.aws_client("sqs")


def test_without_a_function_name_every_service_is_allowed_and_nothing_is_built(monkeypatch):
    # Given the local stack, which hosts every function in one process (no TIMEKEEPER_FUNCTION)
    monkeypatch.delenv(FUNCTION_VARIABLE, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    adapters.reset()
    # Then a cold start builds nothing, and any service's client can be made
    startup.cold_start("snapshot_planner")
    assert adapters.requested_services() == frozenset()
    assert adapters.aws_client("ses").meta.service_model.service_name == "ses"
    adapters.reset()
