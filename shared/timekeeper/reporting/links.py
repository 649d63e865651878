"""Personal signed download links of scheduled deliveries.

A link is ``<download base URL>downloads/<token>``; the token is an itsdangerous
``URLSafeTimedSerializer`` signature (HMAC-SHA256, key derived with SHA-256, over a salt of
its own, so a token of another purpose never verifies here) of a small JSON payload binding the link to one
recipient, one delivery (workspace, run) and one file (object key), with an explicit
expiry instant. The token is the credential: whoever holds a valid one may download the
file, after the access rule allows its recipient at the time of the download.

The expiry is carried in the payload and checked against the caller's clock (so the local
stack's simulated clock and the tests decide, not the host's), rather than with the
serializer's ``max_age``.

Keys rotate: a signer holds a list of keys, oldest first and newest last. New tokens are
signed with the newest; every key of the list verifies, so a link signed before a rotation
keeps working while its key stays listed (at least as long as the longest link lives), and
a link whose key was removed is invalid. Tokens of the former HMAC-SHA1 signer are invalid
(no fallback signer).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from itsdangerous import BadSignature, URLSafeTimedSerializer

#: The serializer's salt: a key used for other tokens never signs a valid download link.
SALT = "timekeeper.delivery-download"


class LinkInvalid(ValueError):
    """The token is malformed or its signature does not verify (tampered, or another key)."""


class LinkExpired(ValueError):
    """The token verifies but its expiry instant has passed; ``link`` is what it binds
    (the signature holds, so who it was sent to is known: e.g. to offer a fresh one)."""

    def __init__(self, message: str, link: DownloadLink | None = None) -> None:
        super().__init__(message)
        self.link = link


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


#: The HMAC's digest (and the key derivation's).
DIGEST = hashlib.sha256
#: The shortest signing key accepted (characters).
MIN_KEY_CHARS = 32


class LinkSigner:
    """Signs and verifies :class:`DownloadLink` tokens with ``keys``: one key, or a list of
    keys oldest first and newest last (new tokens are signed with the newest, every listed
    key verifies). Raises ``ValueError`` for an empty list, a key shorter than
    :data:`MIN_KEY_CHARS` characters or a key listed twice."""

    def __init__(self, keys: str | Sequence[str]) -> None:
        key_list = [keys] if isinstance(keys, str) else list(keys)
        if not key_list:
            raise ValueError("the link signer needs at least one key")
        if any(not isinstance(k, str) or len(k) < MIN_KEY_CHARS for k in key_list):
            raise ValueError(f"every link signing key must be text of at least {MIN_KEY_CHARS} characters")
        if len(set(key_list)) != len(key_list):
            raise ValueError("a link signing key is listed twice")
        self.key_count = len(key_list)
        # itsdangerous signs with the last key of the list and verifies with every one.
        self._serializer = URLSafeTimedSerializer(key_list, salt=SALT, signer_kwargs={"digest_method": DIGEST})

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
            raise LinkExpired("the link has expired", link)
        return link


def keys_of_secret(secret: dict) -> list[str]:
    """The signing keys a Secrets Manager secret holds, oldest first: JSON
    ``{"keys": [oldest, ..., newest]}``, or ``{"key": k}`` (the secret as first generated: a
    list of one). Raises ``ValueError`` when it holds neither (or ``keys`` is no list of text)."""
    if "keys" in secret:
        keys = secret["keys"]
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError('the link signing secret\'s "keys" must be a list of text, newest last')
        return keys
    if isinstance(secret.get("key"), str):
        return [secret["key"]]
    raise ValueError('the link signing secret holds neither "keys" nor "key"')


class RotatingLinkSigner:
    """A :class:`LinkSigner` over keys that rotate while the execution environment lives.

    ``load_keys(force)`` returns the current key list (oldest first; ``force`` True bypasses
    its cache, e.g. Secrets Manager's); it is called for every :meth:`sign` and
    :meth:`verify` (its own cache keeps that cheap). A token that does not verify makes
    one forced reload, at most every ``refresh_after_s`` seconds (``monotonic`` is the
    clock), so a link signed with a key added moments ago (by a function whose cache
    already holds it) verifies here too, and a flood of bad tokens does not become a
    flood of secret reads.
    """

    def __init__(self, load_keys, *, refresh_after_s: float = 60.0, monotonic=None) -> None:
        import time

        self._load = load_keys
        self._refresh_after_s = refresh_after_s
        self._monotonic = monotonic or time.monotonic
        self._forced_at: float | None = None
        self._signers: dict[tuple[str, ...], LinkSigner] = {}

    def _signer(self, *, force: bool = False) -> LinkSigner:
        keys = tuple(self._load(force))
        if keys not in self._signers:
            self._signers = {keys: LinkSigner(keys)}
        return self._signers[keys]

    def sign(self, link: DownloadLink) -> str:
        """The token of ``link``, signed with the newest key (see :meth:`LinkSigner.sign`)."""
        return self._signer().sign(link)

    def verify(self, token: str, *, now: datetime) -> DownloadLink:
        """As :meth:`LinkSigner.verify`, reloading the keys once when ``token`` is invalid."""
        try:
            return self._signer().verify(token, now=now)
        except LinkInvalid:
            clock = self._monotonic()
            if self._forced_at is not None and clock - self._forced_at < self._refresh_after_s:
                raise
            self._forced_at = clock
            return self._signer(force=True).verify(token, now=now)
