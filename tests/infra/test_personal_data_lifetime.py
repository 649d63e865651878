"""Personal data's lifetime in the files bucket: every deployment profile expires rendered
reports after their own retention (``timekeeper:reportRetentionDays``), beside exports and
delivered files, and a setting of the key reaches the synthesized rule and the API
function (which tells a render past it as expired)."""

from __future__ import annotations

from infra import cost
from infra.api import API_FUNCTION
from infra.settings import DeploymentConfig
from infra.storage import LINK_MAX_LIFETIME_DAYS, REPORT_RETENTION_DAYS
from tests.infra.conftest import Synth, functions_by_folder, resources, synthesize
from timekeeper.settings import DELIVERIES_PREFIX, EXPORTS_PREFIX, REPORT_RETENTION_DAYS_VARIABLE, REPORTS_PREFIX


def _file_rules(synth: Synth) -> dict[str, dict]:
    [files] = [b["Properties"] for b in resources(synth.data_template, "AWS::S3::Bucket").values()
               if "LoggingConfiguration" in b["Properties"]]
    return {r["Id"]: r for r in files["LifecycleConfiguration"]["Rules"]}


def test_every_profile_expires_renders_exports_and_delivered_files(synth):
    for name, (context, _) in cost.PROFILES.items():
        rules = _file_rules(synth if name == "endpoints" else synthesize(context))
        # Each prefix the code writes personal data under has its own expiry rule
        assert {r.get("Prefix") for r in rules.values() if "ExpirationInDays" in r} == {
            EXPORTS_PREFIX, DELIVERIES_PREFIX, REPORTS_PREFIX}, name
        assert rules["expire-reports"] == {"Id": "expire-reports", "Prefix": REPORTS_PREFIX,
                                           "ExpirationInDays": REPORT_RETENTION_DAYS, "Status": "Enabled"}, name
    # A render outlives the longest link that points at it
    assert REPORT_RETENTION_DAYS > LINK_MAX_LIFETIME_DAYS


def test_the_report_retention_setting_reaches_the_rule_and_the_api():
    synth = synthesize({DeploymentConfig.KEY_REPORT_RETENTION: "60"})
    rules = _file_rules(synth)
    assert rules["expire-reports"]["ExpirationInDays"] == 60
    # The API tells a render past it as expired (no link S3 would refuse)
    template = synth.app_template
    api_id = functions_by_folder(template)[API_FUNCTION]
    assert template["Resources"][api_id]["Properties"]["Environment"]["Variables"][
        REPORT_RETENTION_DAYS_VARIABLE] == "60"
