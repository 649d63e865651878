"""Reserved concurrency: what the functions reserve comes from the topology, the account
quota the documents print is the one the deployment needs (the reserved units plus the
100 executions AWS keeps unreserved), and a new account whose quota is still the default
deploys with reserved concurrency off."""

from __future__ import annotations

import re

import pytest

from infra.settings import ROOT, DeploymentConfig
from tests.infra.conftest import functions_by_folder, synthesize
from timekeeper.topology import LAMBDA_UNRESERVED_MINIMUM, required_account_concurrency, reserved_concurrency

#: Where an operator reads the quota, and how it is written there.
QUOTA_DOCUMENTS = ("README.md", "docs/deploy.md")
QUOTA_FIGURE = re.compile(r"concurrency\s+quota\s+of\s+at\s+least\s+(\d+)")


def reserved_in(template) -> dict[str, int]:
    return {folder: template["Resources"][logical_id]["Properties"]["ReservedConcurrentExecutions"]
            for folder, logical_id in functions_by_folder(template).items()
            if "ReservedConcurrentExecutions" in template["Resources"][logical_id]["Properties"]}


def test_the_functions_reserve_what_the_topology_says(synth):
    assert reserved_in(synth.app_template) == reserved_concurrency()


def test_the_printed_quota_is_the_derived_one():
    # Given the quota the deployment needs: its reserved units plus AWS's unreserved minimum
    needed = sum(reserved_concurrency().values()) + LAMBDA_UNRESERVED_MINIMUM
    assert required_account_concurrency() == needed
    # Then every document an operator reads before deploying prints that figure, and only it
    for document in QUOTA_DOCUMENTS:
        figures = {int(f) for f in QUOTA_FIGURE.findall((ROOT / document).read_text())}
        assert figures == {needed}, f"{document} prints {sorted(figures)}, the topology needs {needed}"


@pytest.fixture(scope="module")
def unreserved():
    return synthesize({DeploymentConfig.KEY_RESERVED_CONCURRENCY: "false"})


def test_with_reserved_concurrency_off_no_function_reserves_any(unreserved, synth):
    # Given an account whose quota is still the default, deploying with the documented setting
    # Then the app synthesizes (cdk-nag included), with every function, none reserving concurrency
    assert reserved_in(unreserved.app_template) == {}
    assert functions_by_folder(unreserved.app_template).keys() == functions_by_folder(synth.app_template).keys()
