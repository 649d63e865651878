"""SNS adapter: owner notifications (pause notices) and alarm fan-out share one topic."""

from __future__ import annotations

import json
from typing import Any


class SnsNotifier:
    """A :class:`~timekeeper.schedules.messages.Notifier` publishing JSON to an SNS topic."""

    def __init__(self, client: Any, topic_arn: str):
        self.client = client
        self.topic_arn = topic_arn

    def notify(self, *, subject: str, payload: dict) -> None:
        """Publish ``payload`` as JSON; raises botocore errors so the outbox retries."""
        self.client.publish(TopicArn=self.topic_arn, Subject=subject[:100], Message=json.dumps(payload, default=str))
