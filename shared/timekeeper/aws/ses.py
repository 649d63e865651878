"""Communications adapter: e-mail through Amazon SES (``send_email``, or ``send_raw_email``
for a message with headers of its own)."""

from __future__ import annotations

from collections.abc import Mapping
from email.message import EmailMessage
from email.policy import SMTP
from typing import Any


def mime_message(*, sender: str, to: str, subject: str, html: str, text: str,
                 headers: Mapping[str, str] | None = None) -> EmailMessage:
    """The message as MIME: ``multipart/alternative`` with the text part first and the HTML
    part second (UTF-8), ``From``/``To``/``Subject`` and ``headers`` (e.g.
    ``List-Unsubscribe``). Raises ``ValueError`` for a header value with a line break."""
    message = EmailMessage(policy=SMTP)
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    for name, value in (headers or {}).items():
        message[name] = value
    message.set_content(text, subtype="plain", charset="utf-8")
    message.add_alternative(html, subtype="html", charset="utf-8")
    return message


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

    def send(self, *, to: str, subject: str, html: str, text: str, headers: Mapping[str, str] | None = None) -> str:
        """Submit one message to ``to``; returns SES's ``MessageId``. Without ``headers`` it
        is SES's simple content (``SendEmail``); with them the message is built as MIME
        (:func:`mime_message`) and sent with ``SendRawEmail``, since simple content in the
        SES v1 API carries no headers of the caller's."""
        if headers:
            raw = mime_message(sender=self.sender, to=to, subject=subject, html=html, text=text, headers=headers)
            # The recipient is the message's To header alone (SES reads the destinations from it).
            response = self._client.send_raw_email(Source=self.sender, RawMessage={"Data": raw.as_bytes()},
                                                   **self._extra)
            return str(response["MessageId"])
        response = self._client.send_email(
            Source=self.sender, Destination={"ToAddresses": [to]},
            Message={"Subject": {"Data": subject, "Charset": "UTF-8"},
                     "Body": {"Html": {"Data": html, "Charset": "UTF-8"},
                              "Text": {"Data": text, "Charset": "UTF-8"}}},
            **self._extra)
        return str(response["MessageId"])

    def max_send_rate(self) -> float:
        """The account's sending rate in this region (messages per second): SES
        ``GetSendQuota``'s ``MaxSendRate`` (moto answers 1.0). An SES error propagates."""
        return float(self._client.get_send_quota()["MaxSendRate"])
