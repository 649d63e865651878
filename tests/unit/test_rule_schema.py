"""The rule's JSON schema is generated from the models ``parse_rule`` validates with, so
the API document and the validation cannot drift apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise

import jsonschema
import pytest

from timekeeper.api.models import RECURRENCE_SCHEMA
from timekeeper.schedules.recurrence import RULE_EXAMPLES, InvalidRecurrence, parse_rule, rule_json_schema

ACCEPTED = [*RULE_EXAMPLES,
            {"calendar": {"frequency": "weekly", "interval": 2, "weekdays": ["MO", "TH"], "times": ["09:00"],
                          "start_date": "2027-01-04"}, "timezone": "Europe/London"},
            {"calendar": {"frequency": "yearly", "month": 2, "nth_weekday": [-1, "FR"], "times": ["18:30"]},
             "timezone": "UTC"},
            {"interval": {"minutes": 15}, "anchor": "2027-01-01T00:00:00Z", "timezone": "Asia/Kolkata"}]
REFUSED = [
    {"cron": "0 9 * * *"},                                                       # no timezone
    {"cron": "0 9 * * *", "timezone": "UTC", "color": "red"},                    # unknown key
    {"calendar": {"frequency": "hourly", "times": ["09:00"]}, "timezone": "UTC"},
    {"calendar": {"frequency": "daily", "times": ["9:00"]}, "timezone": "UTC"},
    {"calendar": {"frequency": "daily", "interval": 100_001, "times": ["09:00"]}, "timezone": "UTC"},
    {"calendar": {"frequency": "monthly", "month_day": 0, "times": ["09:00"]}, "timezone": "UTC"},
    {"interval": {"minutes": 5, "hours": 1}, "anchor": "2027-01-01T00:00:00Z"},
    {"interval": {"hours": 1}},                                                  # no anchor
]


def test_the_api_document_uses_the_generated_schema_tightened():
    from timekeeper.schedules.rule_schema import published_rule_schema

    assert RECURRENCE_SCHEMA == published_rule_schema()
    assert [f["title"] for f in RECURRENCE_SCHEMA["oneOf"]] == [f["title"] for f in rule_json_schema()["oneOf"]]
    assert [form["title"] for form in RECURRENCE_SCHEMA["oneOf"]] == ["CronRule", "CalendarRule", "IntervalRule",
                                                                      "RRuleRule"]
    assert "$ref" not in str(RECURRENCE_SCHEMA) and "'null'" not in str(RECURRENCE_SCHEMA)


@pytest.mark.parametrize("rule", ACCEPTED)
def test_rules_the_parser_accepts_match_exactly_one_form_of_the_schema(rule):
    parse_rule(rule)
    jsonschema.validate(rule, RECURRENCE_SCHEMA)


@pytest.mark.parametrize("rule", REFUSED)
def test_rules_the_schema_refuses_are_refused_by_the_parser(rule):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rule, RECURRENCE_SCHEMA)
    with pytest.raises(InvalidRecurrence):
        parse_rule(rule)


@pytest.mark.parametrize("interval", [2, 2.0])
def test_a_rule_integer_is_a_json_schema_integer(interval):
    rule = parse_rule({"calendar": {"frequency": "daily", "interval": interval, "times": ["09:00"]},
                       "timezone": "UTC"})
    assert jsonschema.Draft202012Validator(rule_json_schema()).is_valid(
        {"calendar": {"frequency": "daily", "interval": interval, "times": ["09:00"]}, "timezone": "UTC"})
    # every other day from the anchor: 2.0 is the interval 2
    after = datetime(2027, 1, 1, tzinfo=UTC)
    firsts = [o.at for o in islice(rule.occurrences_after(after), 3)]
    assert [b - a for a, b in pairwise(firsts)] == [timedelta(days=2)] * 2


@pytest.mark.parametrize("interval", [True, "2", 2.5])
def test_what_json_schema_does_not_call_an_integer_is_refused_naming_the_field(interval):
    with pytest.raises(InvalidRecurrence) as refused:
        parse_rule({"calendar": {"frequency": "daily", "interval": interval, "times": ["09:00"]}, "timezone": "UTC"})
    assert "interval" in str(refused.value)
