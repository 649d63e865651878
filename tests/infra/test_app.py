"""``python3 app.py`` (what ``cdk synth`` runs) writes both templates, offline, with the
context the CDK CLI would pass (cdk.json's) and bundling skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from infra.settings import ROOT
from infra.stacks import APP_STACK, DATA_STACK
from tests.infra.conftest import DEPLOYMENT, SKIP_BUNDLING, cdk_json_context


def test_app_py_synthesizes_every_stack(tmp_path):
    # Given the environment the CDK CLI gives the app
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path),
           "CDK_CONTEXT_JSON": json.dumps({**cdk_json_context(), **SKIP_BUNDLING, **DEPLOYMENT})}

    # When app.py runs
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)

    # Then it succeeds (cdk-nag included) and writes both templates and the manifest
    assert result.returncode == 0, result.stderr[-4000:]
    for stack in (DATA_STACK, APP_STACK):
        template = json.loads((tmp_path / f"{stack}.template.json").read_text())
        assert template["Resources"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert {DATA_STACK, APP_STACK} <= set(manifest["artifacts"])


def test_app_py_without_a_mail_sender_fails_naming_the_setting(tmp_path):
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path),
           "CDK_CONTEXT_JSON": json.dumps({**cdk_json_context(), **SKIP_BUNDLING})}
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode != 0 and "timekeeper:mailSender" in result.stderr


def test_cdk_json_runs_app_py_with_the_feature_flags():
    cdk_json = json.loads((ROOT / "cdk.json").read_text())
    assert cdk_json["app"] == "python3 app.py"
    context = cdk_json["context"]
    assert context["@aws-cdk/aws-lambda:recognizeLayerVersion"] is True
    assert context["@aws-cdk/aws-iam:minimizePolicies"] is True
    assert len([k for k in context if k.startswith("@aws-cdk")]) > 50
