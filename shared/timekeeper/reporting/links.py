"""Personal signed download links of scheduled deliveries.

A link is ``<download base URL>downloads/<token>``; the token is an itsdangerous
``URLSafeTimedSerializer`` signature (HMAC-SHA1 over a salt of its own, so a token of
another purpose never verifies here) of a small JSON payload binding the link to one
recipient, one delivery (workspace, run) and one file (object key), with an explicit
expiry instant. The token is the credential: whoever holds a valid one may download the
file, after the access rule allows its recipient at the time of the download.

The expiry is carried in the payload and checked against the caller's clock (so the local
stack's simulated clock and the tests decide, not the host's), rather than with the
serializer's ``max_age``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from itsdangerous import BadSignature, URLSafeTimedSerializer

#: The serializer's salt: a key used for other tokens never signs a valid download link.
SALT = "timekeeper.delivery-download"


class LinkInvalid(ValueError):
    """The token is malformed or its signature does not verify (tampered, or another key)."""


class LinkExpired(ValueError):
    """The token verifies but its expiry instant has passed."""


@dataclass(frozen=True)
class DownloadLink:
    """What a token binds: the delivery (``workspace_id``, ``run_id``), its recipient
    (``user_id``), the file (``object_key`` in the files bucket) and ``expires_at``
    (aware UTC, whole seconds)."""

    workspace_id: UUID
    run_id: UUID
    user_id: str
    object_key: str
    expires_at: datetime


class LinkSigner:
    """Signs and verifies :class:`DownloadLink` tokens with ``secret_key`` (at least 32
    characters; ``ValueError`` otherwise)."""

    def __init__(self, secret_key: str) -> None:
        if len(secret_key) < 32:
            raise ValueError("the link signing key must have at least 32 characters")
        self._serializer = URLSafeTimedSerializer(secret_key, salt=SALT)

    def sign(self, link: DownloadLink) -> str:
        """The URL-safe token of ``link``."""
        return self._serializer.dumps({"w": str(link.workspace_id), "r": str(link.run_id), "u": link.user_id,
                                       "k": link.object_key, "e": int(link.expires_at.timestamp())})

    def verify(self, token: str, *, now: datetime) -> DownloadLink:
        """The link ``token`` binds, if its signature verifies and it has not expired at
        ``now`` (aware). Raises :class:`LinkInvalid` or :class:`LinkExpired`: a token whose
        payload is not what :meth:`sign` writes (an expiry outside the datetime range, a user
        id or object key that is not a non-empty string without NUL) is invalid, even with
        a valid signature."""
        try:
            payload = self._serializer.loads(token)
            user_id, key, expiry = payload["u"], payload["k"], payload["e"]
            if not all(isinstance(v, str) and v and "\x00" not in v for v in (user_id, key)):
                raise ValueError("user id and object key are non-empty text without NUL")
            if not isinstance(expiry, int) or isinstance(expiry, bool):
                raise ValueError("the expiry is whole seconds")
            link = DownloadLink(UUID(payload["w"]), UUID(payload["r"]), user_id, key,
                                datetime.fromtimestamp(expiry, UTC))
        except (BadSignature, KeyError, TypeError, ValueError, AttributeError, OverflowError, OSError) as error:
            raise LinkInvalid("the link is not valid") from error
        if now >= link.expires_at:
            raise LinkExpired("the link has expired")
        return link
