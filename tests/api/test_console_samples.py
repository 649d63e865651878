"""The people ``serve``'s development sign-in offers, against the Platform sample: the
navigation offers each of them only pages they may open."""

from __future__ import annotations

import re

from tests.api.conftest import NOW, Caller
from tests.api.test_console import Browser
from timekeeper.db.connection import connect
from timekeeper.local.platform_data import load_sample
from timekeeper.local.serve import console_samples


def test_every_page_the_navigation_offers_a_sample_person_opens(console, db_url):
    with connect(db_url) as conn:
        sample = load_sample(conn, now=NOW)
    people = console_samples(sample)
    assert [p["label"] for p in people] == ["Berlin admin", "Berlin analyst", "Berlin viewer", "Sydney admin"]
    for person in people:
        browser = Browser(console)
        roles = tuple(person["roles"].split(","))
        browser.sign_in(Caller(user_id=person["user_id"], workspace_id=person["workspace_id"],
                               roles=person["roles"], enrol=False), roles)
        home = browser.request("GET", "/console/notices")
        assert home["statusCode"] == 200, (person["label"], home["body"][:300])
        nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', home["body"], re.S).group(1)
        links = re.findall(r'href="(/console/[^"]+)"', nav)
        assert links, person["label"]
        for link in links:
            page = browser.request("GET", link)
            assert page["statusCode"] == 200, (person["label"], link, page["body"][:300])


def test_the_sign_in_page_says_what_each_sample_person_may_do(app, db_url):
    from tests.api.conftest import CONSOLE_KEY
    from timekeeper.console.app import ConsoleSettings, create_console

    with connect(db_url) as conn:
        sample = load_sample(conn, now=NOW)
    people = console_samples(sample)
    resolver = create_console(lambda event, context: app.resolve(event, context),
                              ConsoleSettings(session_key=CONSOLE_KEY, dev_sign_in=True, secure_cookies=True,
                                              samples=tuple(people)))
    body = Browser(resolver).request("GET", "/console/sign-in")["body"]
    assert "workspace admin and platform staff" in body
    assert "no admin or staff pages" in body
    assert "changes nothing" in body
    box = '<input type="checkbox" name="role:schedules:run" checked>'
    assert f'<label class="check">{box} schedules:run</label>' in body
