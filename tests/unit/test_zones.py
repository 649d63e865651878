"""The one zone rule: the pinned IANA database's names, not the host's zoneinfo files."""

from __future__ import annotations

import pytest

from timekeeper.platform.directory import InvalidTimezone, check_timezone
from timekeeper.schedules.recurrence import InvalidRecurrence, parse_rule
from timekeeper.schedules.zones import canonical_zones, is_canonical_zone


@pytest.mark.parametrize("name", ["localtime", "Factory", "posixrules", "right/UTC", "posix/UTC", "europe/berlin",
                                  " UTC", "", None, 3])
def test_host_aliases_placeholders_and_other_spellings_are_not_zones(name):
    assert not is_canonical_zone(name)
    with pytest.raises(InvalidTimezone):
        check_timezone(name)  # type: ignore[arg-type]


def test_a_rule_names_a_canonical_zone():
    with pytest.raises(InvalidRecurrence) as refused:
        parse_rule({"cron": "0 7 * * *", "timezone": "localtime"})
    assert refused.value.field == "timezone"
    assert parse_rule({"cron": "0 7 * * *", "timezone": "Europe/Berlin"}) is not None


def test_the_set_is_the_iana_database():
    zones = canonical_zones()
    assert {"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "US/Eastern", "Etc/GMT+5"} <= zones
    assert len(zones) > 500
