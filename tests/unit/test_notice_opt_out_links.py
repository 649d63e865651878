"""Notice-mail opt-out tokens: the link signer's tokens, of their own purpose."""

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from timekeeper.reporting.links import DownloadLink, LinkExpired, LinkInvalid, LinkSigner
from timekeeper.reporting.opt_outs import (
    OPT_OUT_LINK_TTL,
    NoticeOptOutLink,
    OptOutLink,
    sign_notice_opt_out,
    sign_opt_out,
    verify_notice_opt_out,
    verify_opt_out,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SIGNER = LinkSigner("k" * 40)


def test_round_trip_binds_workspace_and_person():
    link = NoticeOptOutLink(uuid4(), "user-1")
    assert verify_notice_opt_out(SIGNER, sign_notice_opt_out(SIGNER, link, now=NOW), now=NOW) == link


def test_tampered_token_is_invalid():
    token = sign_notice_opt_out(SIGNER, NoticeOptOutLink(uuid4(), "user-1"), now=NOW)
    tampered = token[:-2] + ("AA" if token[-2:] != "AA" else "BB")
    with pytest.raises(LinkInvalid):
        verify_notice_opt_out(SIGNER, tampered, now=NOW)


def test_expired_token():
    token = sign_notice_opt_out(SIGNER, NoticeOptOutLink(uuid4(), "user-1"), now=NOW)
    with pytest.raises(LinkExpired):
        verify_notice_opt_out(SIGNER, token, now=NOW + OPT_OUT_LINK_TTL + timedelta(seconds=1))


def test_tokens_of_other_purposes_do_not_cross():
    schedule_token = sign_opt_out(SIGNER, OptOutLink(uuid4(), uuid4(), uuid4(), "user-1"), now=NOW)
    with pytest.raises(LinkInvalid):
        verify_notice_opt_out(SIGNER, schedule_token, now=NOW)
    download = SIGNER.sign(DownloadLink(uuid4(), uuid4(), "user-1", "files/a.csv", NOW + timedelta(hours=1)))
    with pytest.raises(LinkInvalid):
        verify_notice_opt_out(SIGNER, download, now=NOW)
    notice_token = sign_notice_opt_out(SIGNER, NoticeOptOutLink(uuid4(), "user-1"), now=NOW)
    with pytest.raises(LinkInvalid):
        verify_opt_out(SIGNER, notice_token, now=NOW)
