"""The console speaks words, not codes: every code the API answers that a page shows
(states, pause and skip reasons, outcomes, history events, refusals) is in the glossary,
each page shows the words with the code kept in the element's title, rules are shown in
words in the list as on their page, and a refusal says what happened. Against the real
API resolver and database."""

from __future__ import annotations

import re

from tests.api.conftest import Caller, new_schedule
from tests.api.test_console import Browser
from timekeeper.api import create_app, openapi_document
from timekeeper.console import glossary
from timekeeper.edge.api import unconfigured_adapters

#: Properties whose values are codes a page shows.
CODED = {"status", "state", "trigger", "skip_reason", "error_code", "pause_reason", "why", "action"}
#: Codes the pages show that the API's document leaves as free text.
ALSO = {"paused_by_owner", "consecutive_failures", "definition_invalid", "ownerless", "recurrence_ended",
        "source_access_lost", "run_requested", "created", "updated", "paused", "resumed", "owner_changed",
        "holidays_changed", "no_access", "no_address", "unsubscribed", "deactivated", "left_workspace", "removed",
        "suppressed", "forbidden", "not_found", "validation_error", "not_a_member", "missing_role",
        "user_deactivated", "succeeded", "skipped", "failed", "nothing_due", "skipped_stale", "skipped_dst_gap", "sent",
        "bounced", "complained", "delivered", "rejected", "delayed"}


def _enums(node, name=None, out=None):
    out = set() if out is None else out
    if isinstance(node, dict):
        if name in CODED and isinstance(node.get("enum"), list):
            out.update(v for v in node["enum"] if isinstance(v, str))
        for key, value in node.items():
            _enums(value, key if key not in ("anyOf", "oneOf", "items") else name, out)
    elif isinstance(node, list):
        for value in node:
            _enums(value, name, out)
    return out


def test_every_code_a_page_shows_has_words():
    coded = _enums(openapi_document(create_app(unconfigured_adapters()))) | ALSO
    assert coded >= {"active", "paused", "queued", "published", "scheduled", "manual", "requested"}
    missing = sorted(code for code in coded if code not in glossary.WORDS)
    assert missing == []
    assert glossary.words("paused_by_owner") == "Paused by its owner"
    assert glossary.words("some_new_code") == "Some new code"
    assert str(glossary.term_html('<x">')) == ('<span class="term" title="&lt;x&#34;&gt;" data-code="&lt;x&#34;&gt;">'
                                               '&lt;x&#34;&gt;</span>')


def _browser(console, caller, roles=("schedules:read", "schedules:write", "schedules:run")):
    browser = Browser(console)
    assert browser.sign_in(caller, roles)["statusCode"] == 303
    return browser


def test_a_schedule_s_codes_read_as_words_with_the_code_kept(call, caller, console):
    # Given a schedule run now once and paused by its owner
    schedule = call("POST", "/schedules", new_schedule()).body
    assert call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": "g1"}).status == 202
    assert call("POST", f"/schedules/{schedule['id']}/pause").status == 200
    browser = _browser(console, caller)
    page = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]
    # Then its state, pause reason, run trigger and history read as words, each code in a title
    for code, words in (("paused", "Paused"), ("paused_by_owner", "Paused by its owner"), ("manual", "Run now"),
                        ("run_requested", "Run now requested"), ("queued", "Queued"), ("created", "Created")):
        assert f'title="{code}" data-code="{code}">{words}</span>' in page, code
    # and no code stands alone as text
    text = re.sub(r"<[^>]+>", " ", page)
    for code in ("paused_by_owner", "run_requested"):
        assert code not in text, code
    listed = browser.request("GET", "/console/schedules")["body"]
    assert 'title="paused_by_owner" data-code="paused_by_owner">Paused by its owner</span>' in listed


def test_rules_are_in_words_in_the_list_as_on_their_page(call, caller, console):
    second_sunday = {"calendar": {"frequency": "monthly", "nth_weekday": [2, "SU"], "times": ["02:30"]},
                     "timezone": "America/New_York"}
    calendar = call("POST", "/schedules", new_schedule(name="second sunday", recurrence=second_sunday)).body
    cron = call("POST", "/schedules", new_schedule(name="nightly")).body
    browser = _browser(console, caller)
    listed = browser.request("GET", "/console/schedules")["body"]
    for schedule in (calendar, cron):
        assert schedule["description"] in listed
        page = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]
        assert schedule["description"] in page
    assert "#2 SU" not in listed and "monthly on the" not in listed
    # A cron rule keeps its expression in the words' title
    assert '<span title="cron 30 2 * * *">' in listed


def test_a_refusal_says_what_happened_not_a_bare_code(call, caller, console):
    schedule = call("POST", "/schedules", new_schedule()).body
    viewer = _browser(console, caller, ("schedules:read",))
    csrf = viewer.csrf(f"/console/schedules/{schedule['id']}")
    refused = viewer.request("POST", f"/console/schedules/{schedule['id']}/pause", {"csrf": csrf})
    assert refused["statusCode"] == 403
    problem = re.search(r'<p class="problem" role="alert">(.*?)</p>', refused["body"], re.S).group(1)
    assert re.sub(r"<[^>]+>", "", problem) == ("Your roles do not allow this: this action needs the role "
                                              "schedules:write (or schedules:admin)")
    assert 'title="forbidden"' in problem
    stranger = _browser(console, Caller(user_id="someone-else"))
    missing = stranger.request("GET", f"/console/schedules/{schedule['id']}")
    assert missing["statusCode"] == 404 and ">Not found</span>: no such schedule" in missing["body"]
