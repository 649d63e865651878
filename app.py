#!/usr/bin/env python3
"""The CDK app: every Timekeeper stack, checked by cdk-nag's AwsSolutions pack.

``cdk synth`` / ``cdk deploy`` run this (cdk.json: "app"); the stacks live in infra/.
"""

import sys
from pathlib import Path

# The layer package, for a checkout where requirements.txt's "-e ./shared" is not installed.
sys.path.insert(0, str(Path(__file__).resolve().parent / "shared"))

import aws_cdk as cdk  # noqa: E402

from infra.stacks import build  # noqa: E402

app = cdk.App()
build(app)
app.synth()
