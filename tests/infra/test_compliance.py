"""cdk-nag's AwsSolutions pack finds no unacknowledged error (every acknowledgment has a
reason), and cfn-lint finds no error in any synthesized template."""

from __future__ import annotations

import json

import pytest
from cfnlint.api import ManualArgs, lint_file

from infra.nag import acknowledgments

#: Regions the templates are linted for (resource types and properties differ by region).
LINT_REGIONS = ["us-east-1", "eu-west-1"]


def test_cdk_nag_finds_no_unacknowledged_error(synth):
    # Given the AwsSolutions pack attached by infra.stacks.build (synthesis passed through it)
    report = synth.stacks.checks.validate_scope(synth.app)

    # Then no error-level finding is left unacknowledged
    errors = [(v.rule_name, [r.construct_path for r in v.violating_resources])
              for v in report.violations if v.severity == "error"]
    assert errors == []


def test_cdk_nag_warnings_are_acknowledged_too(synth):
    report = synth.stacks.checks.validate_scope(synth.app)
    assert [v.rule_name for v in report.violations] == []


def test_every_acknowledgment_has_a_written_reason(synth):
    found = [a for a in acknowledgments(synth.app) if a[1].startswith("AwsSolutions-")]
    assert found, "expected the acknowledgments made in infra/"
    for path, rule, reason in found:
        assert len(reason) >= 40, (path, rule, reason)


def test_the_validation_report_has_no_failure(synth):
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    for plugin in report.get("pluginReports", []):
        assert plugin.get("summary", {}).get("status") != "failure", plugin


@pytest.mark.parametrize("stack", ["TimekeeperData", "TimekeeperApp"])
def test_cfn_lint_finds_no_error(synth, stack):
    # Given the synthesized template
    path = synth.outdir / f"{stack}.template.json"
    assert path.is_file()

    # When cfn-lint checks it
    matches = lint_file(path, ManualArgs(regions=LINT_REGIONS))

    # Then there is no error (CDK's redundant DependsOn warnings, W3005, are not errors)
    errors = [f"{m.rule.id} {m.message} @ {m.path}" for m in matches if m.rule.id.startswith("E")]
    assert errors == []


def test_teardown_configuration_passes_cdk_nag():
    # Given deletion protection switched off for a teardown (Aurora created)
    from infra.settings import DeploymentConfig
    from tests.infra.conftest import synthesize

    # When synthesized (cdk-nag runs during synthesis and fails it on an unacknowledged error)
    result = synthesize({DeploymentConfig.KEY_DELETION_PROTECTION: "false"})

    # Then the cluster is destroyable, and the acknowledgment says why
    [cluster] = [r for r in result.data_template["Resources"].values() if r["Type"] == "AWS::RDS::DBCluster"]
    assert cluster["Properties"]["DeletionProtection"] is False
    assert cluster["DeletionPolicy"] == "Delete"
    assert any(rule == "AwsSolutions-RDS10" for _, rule, _ in acknowledgments(result.app))


def test_the_lean_profile_passes_cdk_nag_and_cfn_lint():
    # Given the lean profile (a NAT instance instead of the endpoints), synthesized: cdk-nag
    # runs during synthesis and fails it on an unacknowledged error
    from infra.settings import DeploymentConfig
    from tests.infra.conftest import synthesize

    result = synthesize({DeploymentConfig.KEY_EGRESS: DeploymentConfig.EGRESS_NAT_INSTANCE})

    # Then cfn-lint finds no error in either template
    for stack in ("TimekeeperData", "TimekeeperApp"):
        matches = lint_file(result.outdir / f"{stack}.template.json", ManualArgs(regions=LINT_REGIONS))
        assert [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")] == [], stack
