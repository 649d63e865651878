"""An operator in a real browser against ``serve``'s samples: a dead-letter message is read
(its body decoded, the failed run it names linked), the run's page shows the failed
attempt's error, and one message is redriven alone with a reason and a confirmation; the
pages pass axe-core and fit a 360 px screen."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import boto3
import pytest

from timekeeper.settings import dead_letter_queue_arn_variable

WIDTH_PHONE = 360


@pytest.fixture
def page(browser):
    context = browser.new_context()
    tab = context.new_page()
    yield tab
    context.close()


def _sign_in_as(page: Any, server: Any, label: str) -> None:
    page.goto(f"{server.base_url}/")
    page.get_by_role("button", name=label).click()
    page.wait_for_url("**/console/schedules")


def _clean(page: Any) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    return [v["id"] for v in Axe().run(page).response["violations"] if v.get("impact") in ("serious", "critical")]


def _fits(page: Any) -> bool:
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    fits = page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
    page.set_viewport_size({"width": 1280, "height": 800})
    return fits


def test_a_dead_letter_is_read_its_runs_error_shown_and_it_is_redriven_alone(page, server):
    # Given serve's sample dead letter (naming the failed run) and one more message in the
    # accounting dead-letter queue
    sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    dlq = sqs.get_queue_url(QueueName=os.environ[dead_letter_queue_arn_variable("accounting")].split(":")[-1])
    other = str(uuid.uuid4())
    sqs.send_message(QueueUrl=dlq["QueueUrl"], MessageBody=json.dumps({"note": other}))
    # When the sample's staff member opens Operations, then the accounting queue
    _sign_in_as(page, server, "Berlin admin")
    page.get_by_role("link", name="Operations").click()
    page.get_by_role("link", name="Accounting").first.click()
    page.wait_for_url("**/console/dead-letters/accounting")
    before = page.locator("section.card").count()  # (other tests' servers may have left dead letters too)
    assert before >= 2
    # (other tests' servers share serve's moto: the sample's message is the one whose run is this server's)
    # The message names its run by schedule and occurrence (local, UTC beside), linked
    run_link = "a[href*='/console/runs/']"
    naming = page.locator("section.card", has=page.locator(run_link))
    base = page.url.split("/console/")[0]
    named = next(naming.nth(i) for i in range(naming.count())
                 if "Bank feed sweep (failing)" in page.request.get(
                     base + naming.nth(i).locator(run_link).first.get_attribute("href")).text())
    assert "Bank feed sweep (failing), occurrence" in named.locator(run_link).first.inner_text()
    assert ("its consumer never acknowledged it on any receive allowed (it died or timed out each time)"
            in named.inner_text())
    assert _clean(page) == []
    assert _fits(page)
    message_text = named.locator("h3").inner_text()
    # Then the run it names shows why it failed: its consumer was killed on every receive
    named.locator(run_link).first.click()
    page.wait_for_url("**/console/runs/*")
    assert "Bank feed sweep (failing)" in page.locator("h1").inner_text()
    assert "5 attempts ended without an outcome" in page.locator("main").inner_text()
    assert _clean(page) == []
    assert _fits(page)
    # And back on the queue, that message alone is redriven with a reason
    page.go_back()
    named = page.locator("section.card", has_text=message_text)
    assert named.count() == 1
    page.once("dialog", lambda dialog: dialog.accept())
    named.get_by_label("Reason").first.fill("the bank feed is back")
    named.get_by_role("button", name="Redrive", exact=True).click()
    page.wait_for_url("**?done=redriven*")
    assert "the others stay here" in page.get_by_role("status").first.inner_text()
    assert page.locator("section.card").count() == before - 1
    assert page.locator("section.card", has_text=message_text).count() == 0
    # (the other message's body is in a closed <details>: its text, not its shown text)
    assert any(other in card.text_content() for card in page.locator("section.card").all())
    # And the confirmation links the run, whose page records the redrive and what follows
    page.get_by_role("link", name="Open its run").click()
    page.wait_for_url("**/console/runs/*")
    actions = page.locator("ul.events").first.inner_text()
    assert "Its dead-letter message moved back to its queue" in actions and "the bank feed is back" in actions
    assert "its consumer finds it settled and does nothing with the message" in actions
    assert _clean(page) == []
    assert _fits(page)
