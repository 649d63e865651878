"""Communications adapter: e-mail through Amazon SES (``send_email``)."""

from __future__ import annotations

from typing import Any


class SesMailer:
    """Sends one message per call from ``sender`` (a verified SES identity) with the
    ``client`` (a boto3 SES client). ``send`` returns the provider's message id; an SES
    or network error propagates (the caller records it and retries)."""

    def __init__(self, client: Any, sender: str) -> None:
        self._client = client
        self.sender = sender

    def send(self, *, to: str, subject: str, html: str, text: str) -> str:
        """Submit one message to ``to``; returns SES's ``MessageId``."""
        response = self._client.send_email(
            Source=self.sender, Destination={"ToAddresses": [to]},
            Message={"Subject": {"Data": subject, "Charset": "UTF-8"},
                     "Body": {"Html": {"Data": html, "Charset": "UTF-8"},
                              "Text": {"Data": text, "Charset": "UTF-8"}}})
        return str(response["MessageId"])
