"""The delivery sender's settings: read from the environment, validated at cold start."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from timekeeper.settings import RuntimeSettings

BASE = {"DATABASE_URL": "postgresql://x/y"}


def test_the_senders_pace_defaults_and_reads_its_variables():
    default = RuntimeSettings.from_environment(BASE)
    assert (default.mail_send_concurrency, default.mail_send_rate, default.mail_quota_ttl_s) == (4, None, 300.0)
    tuned = RuntimeSettings.from_environment({**BASE, "MAIL_SEND_CONCURRENCY": "8", "MAIL_SEND_RATE": "4.5",
                                              "MAIL_QUOTA_TTL_S": "60"})
    assert (tuned.mail_send_concurrency, tuned.mail_send_rate, tuned.mail_quota_ttl_s) == (8, 4.5, 60.0)


@pytest.mark.parametrize("name, value", [("MAIL_SEND_CONCURRENCY", "0"), ("MAIL_SEND_CONCURRENCY", "17"),
                                         ("MAIL_SEND_RATE", "0"), ("MAIL_SEND_RATE", "fast"),
                                         ("MAIL_QUOTA_TTL_S", "-1")])
def test_a_bad_pace_fails_the_cold_start_naming_the_setting(name, value):
    with pytest.raises(ValidationError, match=name.lower()):
        RuntimeSettings.from_environment({**BASE, name: value})
