"""A group of console pages stands on its own: its router, included alone in a console
resolver, answers its pages against the real API resolver and database, and nothing else."""

from __future__ import annotations

from tests.api.conftest import CONSOLE_KEY, Caller
from tests.api.test_console import Browser
from timekeeper.console.context import Console, ConsoleResolver, ConsoleSettings
from timekeeper.console.pages import closures, session


def test_the_closures_pages_answer_from_their_router_alone(app, caller, db_url):
    # Given a console resolver with only the sign-in and the closures pages
    resolver = ConsoleResolver(Console.of(lambda event, context: app.resolve(event, context),
                                          ConsoleSettings(session_key=CONSOLE_KEY, dev_sign_in=True)))
    resolver.include_router(session.router)
    resolver.include_router(closures.router)
    resolver.db_url = db_url
    browser = Browser(resolver)
    admin = Caller(user_id="admin-1", workspace_id=caller.workspace_id, roles="schedules:read,schedules:admin")
    assert browser.sign_in(admin, ("schedules:read", "schedules:admin"))["statusCode"] == 303
    # When an admin closes a date through it
    csrf = browser.csrf("/console/closures")
    done = browser.request("POST", "/console/closures/add", {"csrf": csrf, "date": "2031-12-24", "reason": "office"})
    # Then the date is closed, as its page says
    assert done["statusCode"] == 303
    page = browser.request("GET", "/console/closures?done=added&date=2031-12-24")
    assert page["statusCode"] == 200 and "2031-12-24" in page["body"] and "office" in page["body"]
    # And a page of another group is not there
    assert browser.request("GET", "/console/schedules")["statusCode"] == 404
