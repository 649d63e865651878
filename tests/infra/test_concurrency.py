"""Reserved concurrency: what the functions reserve comes from the topology, the account
quota the documents print is the one the deployment needs (the reserved units plus the
100 executions AWS keeps unreserved), and a new account whose quota is still the default
deploys with reserved concurrency off."""

from __future__ import annotations

import re
from dataclasses import replace
from unittest.mock import patch

import pytest

from infra.settings import ROOT, DeploymentConfig
from tests.infra.conftest import functions_by_folder, functions_of_folder, synthesize
from timekeeper import topology
from timekeeper.topology import (
    ACCOUNTING,
    LAMBDA_UNRESERVED_MINIMUM,
    PIPELINES,
    required_account_concurrency,
    reserved_concurrency,
)

#: Where an operator reads the quota, and how it is written there.
QUOTA_DOCUMENTS = ("README.md", "docs/deploy.md")
QUOTA_FIGURE = re.compile(r"concurrency\s+quota\s+of\s+at\s+least\s+(\d+)")


def reserved_in(template) -> dict[str, int]:
    """functions/ folder -> the reserved concurrency of its functions summed (a pipeline's
    dispatcher code is one function per partition)."""
    found: dict[str, int] = {}
    for folder, logical_ids in functions_of_folder(template).items():
        for logical_id in logical_ids:
            properties = template["Resources"][logical_id]["Properties"]
            if "ReservedConcurrentExecutions" in properties:
                found[folder] = found.get(folder, 0) + properties["ReservedConcurrentExecutions"]
    return found


def test_the_functions_reserve_what_the_topology_says(synth):
    assert reserved_in(synth.app_template) == reserved_concurrency()


def test_each_dispatcher_partition_reserves_one_unit_and_the_quota_follows_the_partitions(synth):
    # Given every pipeline's dispatcher code, deployed once per partition
    template = synth.app_template
    for pipeline in PIPELINES.values():
        ids = functions_of_folder(template)[pipeline.dispatcher_function]
        # Then there is one function per partition, each reserving exactly one unit
        assert len(ids) == pipeline.dispatch_partitions
        assert [template["Resources"][i]["Properties"]["ReservedConcurrentExecutions"] for i in ids] == \
            [1] * pipeline.dispatch_partitions
        # And the derived figure counts one unit per partition
        assert reserved_concurrency()[pipeline.dispatcher_function] == pipeline.dispatch_partitions
    # And a pipeline with one more partition needs one more unit of the account's quota
    before = required_account_concurrency()
    with_more = {**PIPELINES, "accounting": replace(ACCOUNTING, dispatch_partitions=ACCOUNTING.dispatch_partitions + 1)}
    with patch.dict(topology.PIPELINES, with_more):
        assert required_account_concurrency() == before + 1


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
