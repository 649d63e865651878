"""The invitation back closes its loop: when a delivery's owner invites an opted-out
recipient back, the recipient gets a notice linking to a page where they accept (also
offered on the delivery's own page); accepting takes them off the owner's opt-out list,
and their next run sends to them again (real API resolver and database)."""

from __future__ import annotations

import re

from tests.api.test_console import Browser, _header
from tests.api.test_console_workspace_pages import OWNER_ROLES, _browser, _csrf, _opted_out
from tests.api.test_people_routes import workspace_with_schedule
from timekeeper.reporting.notice_mail import notice_line, notice_title

READER_ROLES = ("queries:read",)


def test_an_invited_recipient_is_told_accepts_and_leaves_the_opt_out_list(db_url, call, console):
    admin, owner, reader, _, schedule_id = workspace_with_schedule(db_url)
    _opted_out(db_url, admin.workspace_id, schedule_id, reader.user_id)
    recipient = _browser(console, reader, READER_ROLES)
    # Before any invitation: no notice, and the page says only the owner can invite them back
    assert call("GET", "/notices", as_=reader).body["items"] == []
    waiting = recipient.request("GET", f"/console/deliveries/{schedule_id}/invitation")["body"]
    assert "You opted out of its messages" in waiting and "Only its owner can invite you back" in waiting
    assert "Accept the invitation" not in waiting

    # When the owner invites them back (twice: the second tells nobody again)
    owner_browser = _browser(console, owner, OWNER_ROLES)
    opt_outs_path = f"/console/deliveries/{schedule_id}/opt-outs"
    token = _csrf(owner_browser.request("GET", opt_outs_path)["body"])
    for _ in range(2):
        invited = owner_browser.request("POST", f"{opt_outs_path}/invite", {"csrf": token, "user_id": reader.user_id})
        assert invited["statusCode"] == 303

    # Then the recipient has one notice, in words, linking to the invitation
    (notice,) = call("GET", "/notices", as_=reader).body["items"]
    assert (notice["kind"], notice["audience"], notice["schedule_id"]) == ("resubscribe_invited", "recipient",
                                                                            str(schedule_id))
    assert notice["detail"] == {"name": "Daily", "invited_by": owner.user_id}
    notices_html = recipient.request("GET", "/console/notices")["body"]
    assert "You were invited back to a delivery&#39;s messages" in notices_html
    link = f"/console/deliveries/{schedule_id}/invitation"
    assert f'href="{link}"' in notices_html
    # The invitation page and the delivery's own page offer Accept
    page = recipient.request("GET", link)
    assert page["statusCode"] == 200
    assert f"{owner.user_id} invited you back on" in page["body"] and ">Accept the invitation</button>" in page["body"]
    delivery = recipient.request("GET", f"/console/deliveries/{schedule_id}")["body"]
    assert f'action="/console/deliveries/{schedule_id}/invitation/accept"' in delivery
    # A forged form accepts nothing
    accept = f"/console/deliveries/{schedule_id}/invitation/accept"
    assert recipient.request("POST", accept, {"csrf": "forged"})["statusCode"] == 403
    assert reader.user_id in owner_browser.request("GET", opt_outs_path)["body"]

    # When the recipient accepts
    done = recipient.request("POST", accept, {"csrf": _csrf(page["body"])})
    assert done["statusCode"] == 303 and _header(done, "Location") == f"{link}?done=accepted"
    after = recipient.request("GET", _header(done, "Location"))["body"]
    assert "You receive its messages again." in after and "Accept the invitation" not in after
    # Then the owner's opt-out list no longer has them, through the API and on the page
    assert call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=owner).body["items"] == []
    listing = owner_browser.request("GET", opt_outs_path)["body"]
    assert "No one has opted out." in listing
    assert call("GET", f"/query-schedules/{schedule_id}/subscription", as_=reader).body["opted_out"] is False
    # And accepting again is the API's refusal on the page, not an error page
    again = recipient.request("POST", accept, {"csrf": _csrf(page["body"])})
    assert again["statusCode"] == 404 and "Refused: you have not opted out of this schedule" in again["body"]


def test_another_person_s_invitation_is_not_theirs_to_accept(db_url, call, console):
    admin, owner, reader, viewer, schedule_id = workspace_with_schedule(db_url)
    _opted_out(db_url, admin.workspace_id, schedule_id, reader.user_id)
    call("POST", f"/query-schedules/{schedule_id}/opt-outs/{reader.user_id}/invitation", as_=owner)
    # The owner (who did not opt out) is offered nothing and accepting is refused
    browser = _browser(console, owner, OWNER_ROLES)
    page = browser.request("GET", f"/console/deliveries/{schedule_id}/invitation")["body"]
    assert "You receive this delivery's messages." in page and "Accept the invitation" not in page
    refused = browser.request("POST", f"/console/deliveries/{schedule_id}/invitation/accept", {"csrf": _csrf(page)})
    assert refused["statusCode"] == 404
    assert [o["user_id"] for o in call("GET", f"/query-schedules/{schedule_id}/opt-outs",
                                       as_=owner).body["items"]] == [reader.user_id]
    # A person without a role that reads the source sees the API's refusal
    stranger = Browser(console)
    stranger.sign_in(viewer, ("schedules:read",))
    assert stranger.request("GET", f"/console/deliveries/{schedule_id}/invitation")["statusCode"] == 403
    assert re.search(r"needs the role queries:read", stranger.request(
        "GET", f"/console/deliveries/{schedule_id}/invitation")["body"])


def test_the_invitation_notice_e_mail_says_it_in_words():
    notice = {"kind": "resubscribe_invited", "schedule_name": "Daily", "detail": {"invited_by": "olga"},
              "reason": None}
    assert notice_title(notice) == "You are invited back to \u201cDaily\u201d"
    assert notice_line(notice).startswith("olga invited you back to the messages of \u201cDaily\u201d")
