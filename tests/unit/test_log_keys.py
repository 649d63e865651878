"""Log keys live in the context: pushed for one unit of work, gone once it is popped."""

from __future__ import annotations

import io
import json

from timekeeper import observability as obs


def _lines(action) -> dict[str, dict]:
    written = io.StringIO()
    previous = obs.logger.registered_handler.setStream(written)
    try:
        action()
    finally:
        obs.logger.registered_handler.setStream(previous)
    return {line["message"]: line for line in map(json.loads, written.getvalue().splitlines())}


def test_pushed_keys_are_on_the_lines_until_popped_and_nesting_restores_the_outer_ones():
    def work():
        outer = obs.push_log_keys(export_id="e-1", workspace_id="w-1")
        obs.logger.info("outer")
        inner = obs.push_log_keys(workspace_id="w-2", render_id="r-2")
        obs.logger.info("inner")
        obs.pop_log_keys(inner)
        obs.logger.info("outer again")
        obs.pop_log_keys(outer)
        obs.logger.info("none")

    lines = _lines(work)
    assert (lines["outer"]["export_id"], lines["outer"]["workspace_id"]) == ("e-1", "w-1")
    assert (lines["inner"]["export_id"], lines["inner"]["workspace_id"], lines["inner"]["render_id"]) == (
        "e-1", "w-2", "r-2")
    assert lines["outer again"]["workspace_id"] == "w-1" and "render_id" not in lines["outer again"]
    assert not {"export_id", "workspace_id", "render_id"} & set(lines["none"])
