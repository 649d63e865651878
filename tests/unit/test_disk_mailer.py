"""The local stack's mail copies: each ``.html`` file's first line is a JSON header that a
browser opening the file shows as text (an ``<http://...>`` header value is no tag)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from timekeeper.local.delivery import DiskMailer


class _Inner:
    def send(self, **_: Any) -> str:
        return "message-1"


def test_the_header_line_is_html_safe_json_with_the_same_values(tmp_path: Path):
    headers = {"List-Unsubscribe": "<http://127.0.0.1:8080/opt-out/abc?a=1&b=2>",
               "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
    DiskMailer(_Inner(), tmp_path).send(to="ana@x.test", subject="A <b>", html="<p>Hi</p>", text="Hi",
                                        headers=headers)
    first, rest = (tmp_path / "message-1.html").read_text(encoding="utf-8").split("\n", 1)
    assert "<" not in first and ">" not in first and "&" not in first
    assert json.loads(first) == {"to": "ana@x.test", "subject": "A <b>", "headers": headers}
    assert rest == "<p>Hi</p>"
