"""Every alarm names its runbook: its description ends with an address in
docs/operations.md whose anchor is one of that page's headings."""

from __future__ import annotations

import re

import pytest

from infra.alarms import RUNBOOK_PAGE, RUNBOOKS, runbook_anchor
from infra.settings import ROOT, DeploymentConfig
from tests.infra.conftest import resources, synthesize

_RUNBOOK = re.compile(r"Runbook: (\S+)#([a-z0-9-]+)$")


def _anchors() -> set[str]:
    """GitHub's anchors of docs/operations.md's headings."""
    anchors = set()
    for line in (ROOT / RUNBOOK_PAGE).read_text().splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 -]", "", text).replace(" ", "-"))
    return anchors


@pytest.fixture(scope="module")
def profiles(synth):
    """The default, nat and lean (nat-instance, with the JWT authorizer's alarm) profiles."""
    return {"default": synth, "nat": synthesize({DeploymentConfig.KEY_EGRESS: "nat"}),
            "lean": synthesize({DeploymentConfig.KEY_EGRESS: "nat-instance", DeploymentConfig.KEY_COGNITO: "true"})}


@pytest.mark.parametrize("profile", ["default", "nat", "lean"])
def test_every_alarms_description_names_a_runbook_heading_of_the_operations_page(profiles, profile):
    template = profiles[profile].app_template
    anchors = _anchors()
    alarms = {**resources(template, "AWS::CloudWatch::Alarm"), **resources(template, "AWS::CloudWatch::CompositeAlarm")}
    assert len(alarms) > 50
    for logical_id, alarm in alarms.items():
        description = alarm["Properties"]["AlarmDescription"]
        match = _RUNBOOK.search(description)
        assert match, (logical_id, description)
        assert match[1] == RUNBOOK_PAGE and match[2] in anchors, (logical_id, match[2])


def test_every_runbook_the_rules_name_is_a_heading():
    anchors = _anchors()
    assert {anchor for _, anchor in RUNBOOKS} <= anchors


def test_an_alarm_without_a_runbook_fails_the_synthesis():
    with pytest.raises(ValueError, match="no runbook"):
        runbook_anchor("Timekeeper-something-new")
    assert runbook_anchor("Timekeeper-queries-dispatcher-errors-p1") == "dispatchers-failing"
    assert runbook_anchor("Timekeeper-api-downloads-errors") == "public-links-failing"
    assert runbook_anchor("Timekeeper-queries-consumer-duration") == "function-near-its-timeout"
