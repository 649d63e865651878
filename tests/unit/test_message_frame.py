"""What a recipient gets: a body template must name its link; the message around it is a
complete HTML document and a plain-text part with the workspace's and schedule's names,
the file's kind and rows, the link's expiry in the workspace's zone for people, why the
recipient gets it and the opt-out link; every value is escaped."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from timekeeper.aws.ses import mime_message
from timekeeper.reporting.templates import (
    Message,
    MessageContext,
    TemplateInvalid,
    check_template,
    format_instant,
    frame_message,
    html_to_text,
    require_link,
)

BODY = "<p>Hello {{ recipient_name }},</p><p>Your file: <a href=\"{{ link }}\">download</a>.</p>"


def _context(**changes) -> MessageContext:
    values = {"workspace_name": "Acme <Berlin>", "schedule_name": "Open invoices", "owner_name": "Olga Owner",
              "recipient_name": "Rita", "format": "csv", "row_count": 1234,
              "link": "https://api.test/downloads/tok", "link_expires": "Monday, 8 March 2027, 07:00 CET",
              "opt_out_url": "https://api.test/opt-outs/opt"}
    values.update(changes)
    return MessageContext(**values)


@pytest.mark.parametrize("body", ["<p>Hello {{ recipient_name }}</p>", "<p>link</p>", "{{ link_expires_at }}"])
def test_a_body_without_the_link_placeholder_is_refused_naming_the_field(body):
    check_template(body, "body_template", html=True)  # valid markup and placeholders ...
    with pytest.raises(TemplateInvalid) as refused:  # ... but no link
        require_link(body, "body_template")
    assert refused.value.field == "body_template" and "{{ link }}" in refused.value.reason


def test_a_body_with_the_link_is_accepted():
    require_link(BODY, "body_template")


def test_link_expiry_reads_as_people_write_it_in_the_workspace_zone():
    instant = datetime(2027, 3, 14, 6, 0, tzinfo=UTC)
    assert format_instant(instant, "Europe/Berlin") == "Sunday, 14 March 2027, 07:00 CET"
    assert format_instant(datetime(2027, 7, 1, 6, tzinfo=UTC), "Europe/Berlin") == "Thursday, 1 July 2027, 08:00 CEST"
    assert format_instant(instant, "America/New_York") == "Sunday, 14 March 2027, 01:00 EST"
    assert format_instant(instant, "Not/AZone") == "Sunday, 14 March 2027, 06:00 UTC"


def test_the_complete_message_has_both_parts_names_reason_expiry_and_opt_out():
    subject, body, _ = Message("{{ schedule_name }}", BODY).render({
        "schedule_name": "Open invoices", "recipient_name": "Rita <R>", "link": "https://api.test/downloads/tok"})
    html, text = frame_message(subject, body, _context())
    assert html.startswith("<!DOCTYPE html>") and "<title>Open invoices</title>" in html
    assert "Acme &lt;Berlin&gt;" in html and "Acme <Berlin>" not in html  # escaped
    assert "Rita &lt;R&gt;" in html
    assert "CSV file, 1,234 rows" in html and "works until Monday, 8 March 2027, 07:00 CET" in html
    assert "because Olga Owner added you to the recipients" in html
    assert 'href="https://api.test/opt-outs/opt"' in html and "Unsubscribe" in html
    # the text part: no markup, the same facts, every link written out
    assert not any(tag in text for tag in ("<p", "<a ", "</", "<table", "&lt;", "&amp;"))
    assert "Hello Rita <R>," in text and "download <https://api.test/downloads/tok>" in text
    assert "Acme <Berlin> - Open invoices" in text
    assert "Download the file: https://api.test/downloads/tok" in text
    assert "CSV file, 1,234 rows. The link is personal and works until Monday, 8 March 2027, 07:00 CET." in text
    assert "Unsubscribe from \"Open invoices\": https://api.test/opt-outs/opt" in text


def test_a_report_reads_as_a_report_and_no_empty_row_count_is_shown():
    html, text = frame_message("s", "<p>x</p>", _context(format="pdf", row_count=None))
    assert "Download the report" in html and "PDF report." in text and "rows" not in text
    _, one = frame_message("s", "<p>x</p>", _context(format="xlsx", row_count=1))
    assert "Excel workbook (XLSX), 1 row." in one


def test_html_to_text_keeps_blocks_lists_and_link_targets():
    assert html_to_text("<h2>T</h2><p>a <b>b</b></p><ul><li>x</li><li>y</li></ul><p>go <a href=\"u\">here</a></p>") \
        == "T\n\na b\n\n- x\n- y\n\ngo here <u>"


def test_the_mime_message_is_text_then_html_with_the_headers():
    message = mime_message(sender="r@x.test", to="a@x.test", subject="S", html="<p>h</p>", text="t",
                           headers={"List-Unsubscribe": "<https://x/o>",
                                    "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"})
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert [p.get_content_type() for p in message.iter_parts()] == ["text/plain", "text/html"]
    with pytest.raises(ValueError):
        mime_message(sender="r@x.test", to="a@x.test", subject="S", html="h", text="t",
                     headers={"X-Injected": "a\r\nBcc: b@x.test"})
