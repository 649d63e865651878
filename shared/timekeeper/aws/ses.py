"""Communications adapter: e-mail through Amazon SES (``send_email``)."""

from __future__ import annotations

from typing import Any


class SesMailer:
    """Sends one message per call from ``sender`` (a verified SES identity) with the
    ``client`` (a boto3 SES client), under ``configuration_set`` when given (the set whose
    event destination publishes each message's later states). ``send`` returns the
    provider's message id; an SES or network error propagates (the caller records it and
    retries)."""

    def __init__(self, client: Any, sender: str, configuration_set: str | None = None) -> None:
        self._client = client
        self.sender = sender
        self._extra: dict[str, Any] = {"ConfigurationSetName": configuration_set} if configuration_set else {}

    def send(self, *, to: str, subject: str, html: str, text: str) -> str:
        """Submit one message to ``to``; returns SES's ``MessageId``."""
        response = self._client.send_email(
            Source=self.sender, Destination={"ToAddresses": [to]},
            Message={"Subject": {"Data": subject, "Charset": "UTF-8"},
                     "Body": {"Html": {"Data": html, "Charset": "UTF-8"},
                              "Text": {"Data": text, "Charset": "UTF-8"}}},
            **self._extra)
        return str(response["MessageId"])
