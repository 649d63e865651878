"""Download links: HMAC-SHA256 over a key list that rotates (newest signs, every listed key
verifies), read from Secrets Manager the way the edge reads it, with the reload that lets a
freshly added key verify at once; links of the former SHA-1 signer and of removed keys are
refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from uuid import UUID

import boto3
import pytest
from itsdangerous import URLSafeTimedSerializer
from moto import mock_aws

from timekeeper import edge
from timekeeper.edge import adapters
from timekeeper.reporting.links import SALT, DownloadLink, LinkInvalid, LinkSigner, keys_of_secret

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
OLD, NEW, NEWER = "o" * 40, "n" * 40, "w" * 40
LINK = DownloadLink(UUID(int=1), UUID(int=2), "rita", "deliveries/r.csv", NOW + timedelta(days=7))


def _payload(link: DownloadLink) -> dict:
    return {"w": str(link.workspace_id), "r": str(link.run_id), "u": link.user_id, "k": link.object_key,
            "e": int(link.expires_at.timestamp())}


def test_new_links_are_signed_with_the_newest_key_and_older_keys_still_verify():
    # Given a link signed before a rotation, with the key that was then the only one
    before = LinkSigner([OLD]).sign(LINK)
    # When the key list gains a newer key
    rotated = LinkSigner([OLD, NEW])
    # Then the old link still verifies, and new links are signed with the newest key only
    assert rotated.verify(before, now=NOW) == LINK
    after = rotated.sign(LINK)
    assert LinkSigner([NEW]).verify(after, now=NOW) == LINK
    with pytest.raises(LinkInvalid):
        LinkSigner([OLD]).verify(after, now=NOW)


def test_a_link_whose_key_was_removed_is_refused():
    before = LinkSigner([OLD, NEW]).sign(LINK)  # signed with NEW
    oldest = LinkSigner([OLD]).sign(LINK)
    later = LinkSigner([NEW, NEWER])
    assert later.verify(before, now=NOW) == LINK
    with pytest.raises(LinkInvalid):
        later.verify(oldest, now=NOW)


def test_a_link_of_the_former_sha1_signer_is_refused_even_with_a_listed_key():
    # Given a token as the former signer wrote it (itsdangerous' default HMAC-SHA1), same key
    sha1 = URLSafeTimedSerializer(OLD, salt=SALT).dumps(_payload(LINK))
    # Then the SHA-256 signer refuses it, while its own token with that key verifies
    with pytest.raises(LinkInvalid):
        LinkSigner([OLD]).verify(sha1, now=NOW)
    assert LinkSigner([OLD]).verify(LinkSigner([OLD]).sign(LINK), now=NOW) == LINK


def test_the_signature_is_sha256_sized():
    token = LinkSigner(OLD).sign(LINK)
    # 32 bytes of HMAC-SHA256 are 43 URL-safe base64 characters (SHA-1: 27)
    assert len(token.rsplit(".", 1)[1]) == 43


@pytest.mark.parametrize("keys", [[], ["short"], [OLD, OLD]])
def test_bad_key_lists_are_refused(keys):
    with pytest.raises(ValueError):
        LinkSigner(keys)


def test_the_secret_holds_a_key_list_or_the_first_generated_key():
    assert keys_of_secret({"keys": [OLD, NEW]}) == [OLD, NEW]
    assert keys_of_secret({"key": OLD}) == [OLD]
    for bad in ({}, {"keys": OLD}, {"keys": [1]}):
        with pytest.raises(ValueError):
            keys_of_secret(bad)


@pytest.fixture
def link_secret(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "DATABASE_URL": "postgresql://unused/x"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("LINK_SIGNING_KEY", raising=False)
    with mock_aws():
        secrets = boto3.client("secretsmanager")
        arn = secrets.create_secret(Name="tk-links", SecretString=json.dumps({"key": OLD}))["ARN"]
        monkeypatch.setenv("LINK_SIGNING_SECRET_ARN", arn)
        edge.reset()
        yield secrets, arn
        edge.reset()


def test_a_rotation_in_secrets_manager_reaches_the_edge_signer(link_secret):
    secrets, arn = link_secret
    # Given the edge's signer on the secret as the stack first generates it
    signer = adapters.link_signer()
    before = signer.sign(LINK)
    # When the operator appends a new key (the procedure in docs/operations.md)
    secrets.put_secret_value(SecretId=arn, SecretString=json.dumps({"keys": [OLD, NEW]}))
    # Then a link signed with the new key elsewhere verifies here at once (the signer rereads
    # the secret on an invalid token instead of waiting for its cache), and so does the old one
    fresh = LinkSigner([OLD, NEW]).sign(LINK)
    assert signer.verify(fresh, now=NOW) == LINK
    assert signer.verify(before, now=NOW) == LINK
    # And when the old key is removed after its links expired, its links are refused
    secrets.put_secret_value(SecretId=arn, SecretString=json.dumps({"keys": [NEW]}))
    edge.reset()
    with pytest.raises(LinkInvalid):
        adapters.link_signer().verify(before, now=NOW)
    assert adapters.link_signer().verify(fresh, now=NOW) == LINK


def test_invalid_tokens_reload_the_keys_at_most_once_a_minute():
    # Given a rotating signer over a key source that counts its forced reads
    from timekeeper.reporting.links import RotatingLinkSigner

    forced, clock = [], {"t": 0.0}

    def load(force: bool) -> list[str]:
        if force:
            forced.append(clock["t"])
        return [OLD]

    signer = RotatingLinkSigner(load, refresh_after_s=60, monotonic=lambda: clock["t"])
    forged = LinkSigner([NEW]).sign(LINK)
    # When bad tokens keep coming
    for t in (0, 1, 30, 59, 61, 62):
        clock["t"] = t
        with pytest.raises(LinkInvalid):
            signer.verify(forged, now=NOW)
    # Then the secret was reread at the first and once the minute had passed, not per token
    assert forced == [0, 61]
    assert signer.verify(signer.sign(LINK), now=NOW) == LINK
