"""``python -m timekeeper ops settings|closures|posting-jobs|suppressions``: a workspace
admin's routes from the command line, as a client of the API (the same routes as the
console's Settings, Closures, Posting jobs and Suppressed addresses pages); the token
names the workspace (``dev:<user>:<workspace>:workspace:admin,...`` against serve):

* ``ops settings show`` -- the zone, the locale, whether admins get a copy of every
  notice, and each member's notice e-mails (``GET /settings``);
* ``ops settings set [--timezone ZONE [--move-schedules]] [--locale LOCALE]
  [--notify-admins yes|no] [--preview]`` -- with a zone, first what it changes for the
  schedules (``POST /settings/zone-preview``), then the change (``PATCH /settings``);
  ``--preview`` changes nothing;
* ``ops settings notice-mail USER on|off`` -- a member's notice e-mails
  (``PUT /settings/notice-mail/{user}``);
* ``ops closures list | add DATE [--reason TEXT] | remove DATE`` -- closed local dates
  (``/closures``);
* ``ops posting-jobs list | retry JOB`` -- failed posting jobs (``/posting-jobs``);
* ``ops suppressions list | remove ADDRESS --reason TEXT | removals`` -- the mail
  suppression list (``/mail-suppressions``; the address travels in the body).

Each prints a line per item; ``--json`` prints the API's body as it came (``settings set``:
the change's answer, or the preview's with ``--preview``). Exit codes as
:mod:`timekeeper.local.ops`: 0 when the API answered 2xx, 1 for its refusal (status, code,
field and message printed), 2 when it cannot be reached or nothing was asked.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

from timekeeper.local.ops import answered

#: The command groups of this module (``ops <group> <verb>``).
GROUPS = ("settings", "closures", "posting-jobs", "suppressions")


def add_workspace_parsers(actions: Any, uuid_type: Callable[[str], Any]) -> None:
    """Add the ``settings``, ``closures``, ``posting-jobs`` and ``suppressions`` command
    groups to the ``ops`` sub-parsers ``actions``."""

    def verb(group: Any, name: str, text: str) -> Any:
        parser = group.add_parser(name, help=text)
        parser.add_argument("--json", action="store_true", help="print the API's JSON body")
        return parser

    settings = actions.add_parser("settings", help="a workspace's zone, locale and who gets notices (admins)")
    verbs = settings.add_subparsers(dest="verb", required=True, metavar="VERB")
    verb(verbs, "show", "the settings and each member's notice e-mails")
    change = verb(verbs, "set", "change the zone (its preview first), the locale, the admins' copies")
    change.add_argument("--timezone", default=None, help="the new IANA zone, e.g. America/New_York")
    change.add_argument("--move-schedules", action="store_true",
                        help="with --timezone: move the schedules whose rule is in the current zone to the new one")
    change.add_argument("--locale", default=None, help="locale of files and messages, e.g. de_DE")
    change.add_argument("--notify-admins", choices=("yes", "no"), default=None,
                        help="the admins get a copy of every notice about the workspace's schedules")
    change.add_argument("--preview", action="store_true", help="only show what the zone change would do")
    mail = verb(verbs, "notice-mail", "turn a member's notice e-mails on or off")
    mail.add_argument("user", help="the member's user id")
    mail.add_argument("mail", choices=("on", "off"))

    closures = actions.add_parser("closures", help="a workspace's closed local dates (business-day rules skip them)")
    verbs = closures.add_subparsers(dest="verb", required=True, metavar="VERB")
    verb(verbs, "list", "the closed dates")
    add = verb(verbs, "add", "close a local date (business-day schedules are recomputed)")
    add.add_argument("date", help="the local date, YYYY-MM-DD")
    add.add_argument("--reason", default="", help="shown beside the date (optional, at most 200 characters)")
    remove = verb(verbs, "remove", "reopen a closed date")
    remove.add_argument("date", help="the local date, YYYY-MM-DD")

    jobs = actions.add_parser("posting-jobs", help="a workspace's failed posting jobs (admins)")
    verbs = jobs.add_subparsers(dest="verb", required=True, metavar="VERB")
    verb(verbs, "list", "the failed posting jobs, oldest failure first")
    retry = verb(verbs, "retry", "put a failed job back to pending (the next posting sweep starts it)")
    retry.add_argument("job", type=uuid_type, help="the posting job's id")

    suppressions = actions.add_parser("suppressions", help="a workspace's mail suppression list")
    verbs = suppressions.add_subparsers(dest="verb", required=True, metavar="VERB")
    verb(verbs, "list", "the addresses the workspace's sends skip")
    take = verb(verbs, "remove", "take an address off the list, with a reason (admins)")
    take.add_argument("address", help="the suppressed address")
    take.add_argument("--reason", required=True, help="why it may be sent to again (recorded)")
    removals = verb(verbs, "removals", "the addresses taken off the list: who, when, why (admins)")
    removals.add_argument("--limit", type=int, choices=range(1, 101), default=50, metavar="1-100",
                          help="how many, newest first (default 50)")


def run_workspace(args: argparse.Namespace, api: str, token: str | None, console: Any) -> int:
    """Run one parsed command of :data:`GROUPS` against ``api`` with ``token``; print its
    outcome on ``console`` (rich); returns the exit code."""
    if args.action == "settings" and args.verb == "set":
        return _set_settings(args, api, token, console)
    method, path, body = _request(args)
    code, answer = answered(api, token, console, method, path, body)
    if code:
        return code
    if args.json:
        console.print_json(data=answer)
        return 0
    for line in _lines(args, answer):
        console.print(line, markup=False, highlight=False)
    return 0


def _q(value: Any) -> str:
    return quote(str(value), safe="")


def _request(args: argparse.Namespace) -> tuple[str, str, Any]:
    """The API request ``(method, path, body)`` of a command other than ``settings set``."""
    group, verb = args.action, args.verb
    if group == "settings":
        if verb == "show":
            return "GET", "/settings", None
        return "PUT", f"/settings/notice-mail/{_q(args.user)}", {"mail": args.mail == "on"}
    if group == "closures":
        if verb == "list":
            return "GET", "/closures", None
        if verb == "add":
            return "POST", "/closures", {"date": args.date, "reason": args.reason}
        return "DELETE", f"/closures/{_q(args.date)}", None
    if group == "posting-jobs":
        if verb == "list":
            return "GET", "/posting-jobs/failed", None
        return "POST", f"/posting-jobs/{_q(args.job)}/retry", None
    if verb == "list":
        return "GET", "/mail-suppressions", None
    if verb == "remove":
        return "POST", "/mail-suppressions/removals", {"address": args.address, "reason": args.reason}
    return "GET", f"/mail-suppressions/removals?limit={args.limit}", None


def at(instant: str | None, zone: str | None) -> str:
    """An API instant (ISO 8601, UTC) as ``YYYY-MM-DD HH:MM <zone's abbreviation> (HH:MM
    UTC)`` in ``zone`` (an IANA name; UTC alone when it is UTC or unknown); ``-`` for None."""
    if not instant:
        return "-"
    moment = datetime.fromisoformat(instant.replace("Z", "+00:00"))
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    utc = f"{moment:%Y-%m-%d %H:%M} UTC"
    try:
        local = moment.astimezone(ZoneInfo(zone)) if zone and zone != "UTC" else None
    except (KeyError, ValueError):
        local = None
    return f"{local:%Y-%m-%d %H:%M %Z} ({utc})" if local is not None else utc


def _lines(args: argparse.Namespace, body: Any) -> list[str]:
    """What a command prints: one line per item (or the one outcome)."""
    group, verb, zone = args.action, args.verb, (body or {}).get("timezone")
    if group == "settings" and verb == "show":
        return [*_settings_lines(body), *(_member_line(m) for m in body["members"])]
    if group == "settings":
        return [f"notice e-mails of {body['user_id']}: {'on' if body['mail'] else 'off'}"]
    if group == "closures" and verb == "list":
        return [f"{c['date']}  {c['reason'] or '-'}  (closed by {c['created_by']}, {at(c['created_at'], zone)})"
                for c in body["items"]] or ["no closed dates"]
    if group == "closures":
        what = {"add": "closed" if body["changed"] else "already closed (its first reason is kept)",
                "remove": "open again"}[verb]
        return [f"{body['closure']['date']} {what}; {body['schedules_recomputed']} business-day schedules recomputed"]
    if group == "posting-jobs" and verb == "list":
        return [f"{j['id']}  batch {j['batch_id']}  {j['status']}  {j['attempts']} attempts  failed "
                f"{at(j['finished_at'], zone)}: {j['error'] or '-'}"
                for j in body["items"]] or ["no failed posting jobs"]
    if group == "posting-jobs":
        return [f"posting job {body['id']} of batch {body['batch_id']}: {body['status']} (the next posting sweep, "
                "within five minutes, starts it)" if body["status"] == "pending" else
                f"posting job {body['id']} of batch {body['batch_id']}: {body['status']} (not failed: unchanged)"]
    if verb == "list":
        return [f"{s['address']}  {s['reason']}  since {at(s['suppressed_at'], zone)}" for s in body["items"]] or [
            "no suppressed addresses"]
    if verb == "remove":
        return [f"{body['address']} is off the suppression list (it was {body['suppression_reason']} since "
                f"{body['suppressed_at']}); the next run sends to it again"]
    return [f"{r['address']}  removed by {r['removed_by']} {at(r['removed_at'], zone)}: {r['reason']} (was "
            f"{r['suppression_reason']})" for r in body["items"]] or ["no removals"]


def _settings_lines(body: dict[str, Any]) -> list[str]:
    return [f"time zone {body['timezone']}; locale {body['locale']}; the admins get a copy of every notice: "
            f"{'yes' if body['notify_admins'] else 'no'}"]


def _member_line(member: dict[str, Any]) -> str:
    if member["mail"]:
        state = "on"
    else:
        state = f"off since {member['opted_out_at']} ({'by an admin' if member['off_by_admin'] else 'by themselves'})"
    return f"notice e-mails {state}: {member['display_name']} ({member['user_id']})"


def _set_settings(args: argparse.Namespace, api: str, token: str | None, console: Any) -> int:
    """``settings set``: a zone change's preview first (what it does to the schedules),
    then the change (unless ``--preview``)."""
    change: dict[str, Any] = {}
    if args.timezone is not None:
        change["timezone"] = args.timezone
        change["move_schedules"] = bool(args.move_schedules)
    if args.locale is not None:
        change["locale"] = args.locale
    if args.notify_admins is not None:
        change["notify_admins"] = args.notify_admins == "yes"
    if not change or (args.preview and args.timezone is None):
        console.print("nothing to change: give --timezone, --locale or --notify-admins (--preview needs --timezone)",
                      markup=False, highlight=False)
        return 2
    if args.timezone is not None:
        code, preview = answered(api, token, console, "POST", "/settings/zone-preview", {"timezone": args.timezone})
        if code:
            return code
        if args.preview and args.json:
            console.print_json(data=preview)
        elif not args.json:
            for line in preview_lines(preview, moving=bool(args.move_schedules)):
                console.print(line, markup=False, highlight=False)
        if args.preview:
            return 0
    code, answer = answered(api, token, console, "PATCH", "/settings", change)
    if code:
        return code
    if args.json:
        console.print_json(data=answer)
        return 0
    for line in [*_settings_lines(answer), f"{answer['schedules_moved']} schedules moved to {answer['timezone']}"]:
        console.print(line, markup=False, highlight=False)
    return 0


def preview_lines(preview: dict[str, Any], *, moving: bool) -> list[str]:
    """A zone preview (``POST /settings/zone-preview``'s body) in lines: how many schedules
    have their rule in the current zone, each shown one with its next run now and once
    moved, and those that would not run in the new zone."""
    old, new = preview["old"], preview["new"]
    if old == new:
        return [f"{new} is the current zone: nothing changes"]
    lines = [f"zone {old} -> {new}: {preview['affected']} schedules have their rule in {old}; "
             + ("they move to the new zone (next runs below)" if moving else
                "they keep their rules and runs (--move-schedules moves them)")]
    for s in preview["schedules"]:
        after = (f"would not run: {s['would_not_run']}" if s.get("would_not_run") else
                 f"once moved {at(s['next_due_after'], new)}")
        lines.append(f"  {s['name']} ({s['id']}, {s['status']}): next now {at(s['next_due_before'], old)}; {after}")
    if preview["affected"] > len(preview["schedules"]):
        lines.append(f"  ... and {preview['affected'] - len(preview['schedules'])} more")
    for r in preview["would_not_run"]:
        lines.append(f"  refused when moving: {r['name']} ({r['id']}) would not run in {new}: {r['reason']}")
    return lines
