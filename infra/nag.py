"""cdk-nag (v3) wiring: the AwsSolutions pack and acknowledgments that carry a reason.

Acknowledge a rule on the narrowest construct that needs it, with :func:`acknowledge`;
:func:`acknowledgments` lists them all (the infra tests check each has a reason).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct


def acknowledge(construct: IConstruct, rule_id: str, reason: str) -> None:
    """Acknowledge ``rule_id`` (e.g. ``AwsSolutions-IAM5[Resource::*]``) on ``construct``
    and everything below it. ``reason`` must say why the finding is acceptable."""
    if len(reason.strip()) < 20:
        raise ValueError(f"acknowledging {rule_id} needs a written reason")
    Validations.of(construct).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def acknowledgments(scope: IConstruct) -> list[tuple[str, str, str]]:
    """(construct path, rule id, reason) of every acknowledgment at or below ``scope``."""
    found = []
    for construct in scope.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY and entry.data:
                for key, reason in dict(entry.data).items():
                    rule = key.split("::", 1)[1] if key.lower().startswith("annotation::") else key
                    found.append((construct.node.path, rule, str(reason)))
    return found


def attach_checks(app: App) -> AwsSolutionsChecks:
    """Register the AwsSolutions pack on ``app``: synthesis fails on any unacknowledged
    error-level finding. Returns the pack so tests can call ``validate_scope`` directly."""
    checks = AwsSolutionsChecks(app, verbose=True)
    Validations.of(app).add_plugins(checks)
    return checks
