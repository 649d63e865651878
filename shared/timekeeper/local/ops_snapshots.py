"""``python -m timekeeper ops snapshots ...``: staff's monthly-snapshot requests from the
command line, as a client of the API (the same routes as the console's Snapshots pages;
a snapshot type's staff role, ``platform:staff``):

* ``ops snapshots periods [--search NAME] [--status S] [--type OWNER:TYPE] [--first M]
  [--through M] [--limit N]`` -- every workspace's periods by their newest version,
  failed first (``GET /snapshots/staff/periods``; ``--status overdue``: the overdue ones);
* ``ops snapshots show WORKSPACE MONTH --type OWNER:TYPE`` -- a period's every version
  with its attempts, chunks, failure, requester and reason, and what a planned one waits
  for (``GET /snapshots/workspaces/{id}/periods/{owner}/{type}/{month}``);
* ``ops snapshots request WORKSPACE MONTH --type OWNER:TYPE --mode manual|backfill
  --reason TEXT`` -- a re-run or a backfill of one period (``POST /snapshots/runs``);
* ``ops snapshots range --type OWNER:TYPE (--workspace ID ... | --all) --first M
  --through M --mode manual|backfill --reason TEXT [--preview]`` -- a month range: which
  periods it plans and which it refuses, and why (``--preview``: ``POST
  /snapshots/ranges/preview``, nothing recorded; else ``POST /snapshots/ranges``);
* ``ops snapshots ranges [--limit N]`` and ``ops snapshots progress GROUP`` -- the latest
  range requests, a range's progress;
* ``ops snapshots cancel|finalize WORKSPACE RUN --reason TEXT`` -- cancel a planned or
  queued request, finalize a published version.

A request and a range send an ``Idempotency-Key`` (``--key``, default a new one). Each
prints a line per item; ``--json`` prints the API's body as it came. Exit codes as
:mod:`timekeeper.local.ops`.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from timekeeper.local.ops import ApiUnreachable, answered, call_api
from timekeeper.local.ops_workspace import at

#: A month as the snapshot routes take it.
MONTH = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")
#: ``OWNER:TYPE`` of a snapshot type.
SNAPSHOT_TYPE = re.compile(r"([a-z][a-z0-9_]*):([a-z][a-z0-9_]*)")


def _month(text: str) -> str:
    """An argparse type: a month, YYYY-MM."""
    if not MONTH.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a month YYYY-MM, not {text!r}")
    return text


def _snapshot_type(text: str) -> tuple[str, str]:
    """An argparse type: ``OWNER:TYPE`` (``platform:ar_aging``)."""
    found = SNAPSHOT_TYPE.fullmatch(text)
    if not found:
        raise argparse.ArgumentTypeError(f"expected OWNER:TYPE, e.g. platform:ar_aging, not {text!r}")
    return found.group(1), found.group(2)


def add_snapshot_parsers(actions: Any, uuid_type: Callable[[str], Any]) -> None:
    """Add the ``snapshots`` command group to the ``ops`` sub-parsers ``actions``."""
    group = actions.add_parser("snapshots", help="staff: monthly snapshot periods, re-runs, backfills and ranges")
    verbs = group.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, text: str, *, typed: bool = False, reason: bool = False) -> Any:
        parser = verbs.add_parser(name, help=text)
        parser.add_argument("--json", action="store_true", help="print the API's JSON body")
        if typed:
            parser.add_argument("--type", dest="snapshot_type", type=_snapshot_type, required=True,
                                metavar="OWNER:TYPE", help="the snapshot type, e.g. platform:ar_aging")
        if reason:
            parser.add_argument("--reason", required=True, help="why (recorded with the request)")
        return parser

    periods = verb("periods", "every workspace's periods by their newest version, failed first")
    periods.add_argument("--search", default=None, help="a part of the workspace's name")
    periods.add_argument("--status", default=None,
                         choices=("failed", "in_progress", "planned", "published", "skipped", "cancelled", "overdue"))
    periods.add_argument("--type", dest="snapshot_type", type=_snapshot_type, default=None, metavar="OWNER:TYPE")
    periods.add_argument("--first", type=_month, default=None, help="the first month, YYYY-MM")
    periods.add_argument("--through", type=_month, default=None, help="the last month, YYYY-MM")
    periods.add_argument("--limit", type=int, choices=range(1, 501), default=100, metavar="1-500")
    periods.add_argument("--cursor", default=None, help="the next page's cursor a listing printed")
    show = verb("show", "a period's every version, attempts and failures", typed=True)
    show.add_argument("workspace", type=uuid_type, help="the workspace's id")
    show.add_argument("month", type=_month, help="the workspace-local month, YYYY-MM")
    one = verb("request", "request a re-run (manual) or a backfill of one period", typed=True, reason=True)
    one.add_argument("workspace", type=uuid_type, help="the workspace's id")
    one.add_argument("month", type=_month, help="the workspace-local month, YYYY-MM")
    one.add_argument("--mode", choices=("manual", "backfill"), required=True,
                     help="manual: a re-run (a new version); backfill: a month never generated")
    one.add_argument("--key", default=None, help="Idempotency-Key (default: a new one)")
    many = verb("range", "request (or --preview) a month range across workspaces", typed=True, reason=True)
    targets = many.add_mutually_exclusive_group(required=True)
    targets.add_argument("--workspace", dest="workspaces", type=uuid_type, action="append",
                         help="a workspace's id (repeat for several)")
    targets.add_argument("--all", action="store_true", help="every workspace")
    many.add_argument("--first", type=_month, required=True, help="the first month, YYYY-MM")
    many.add_argument("--through", type=_month, required=True, help="the last month, YYYY-MM")
    many.add_argument("--mode", choices=("manual", "backfill"), required=True)
    many.add_argument("--preview", action="store_true", help="only show what it would plan and refuse")
    many.add_argument("--key", default=None, help="Idempotency-Key (default: a new one)")
    ranges = verb("ranges", "the latest range requests, newest first, with their progress")
    ranges.add_argument("--limit", type=int, choices=range(1, 201), default=20, metavar="1-200")
    progress = verb("progress", "a range request's progress: its runs by state")
    progress.add_argument("group", type=uuid_type, help="the range's group id")
    for name, text in (("cancel", "cancel a planned or queued request"),
                       ("finalize", "finalize a published version (re-runs are then refused)")):
        acting = verb(name, text, reason=True)
        acting.add_argument("workspace", type=uuid_type, help="the workspace's id")
        acting.add_argument("run", type=uuid_type, help="the version's run id")


def _q(value: Any) -> str:
    return quote(str(value), safe="")


def request_of(args: argparse.Namespace) -> tuple[str, str, Any, dict[str, str] | None]:
    """The API request ``(method, path, body, headers)`` of a ``snapshots`` command."""
    verb = args.verb
    owner, kind = getattr(args, "snapshot_type", None) or (None, None)
    key = {"Idempotency-Key": getattr(args, "key", None) or str(uuid.uuid4())}
    if verb == "periods":
        query = {"search": args.search, "status": args.status, "owner": owner, "snapshot_type": kind,
                 "first": args.first, "through": args.through, "limit": args.limit, "cursor": args.cursor}
        return "GET", "/snapshots/staff/periods?" + urlencode({k: v for k, v in query.items() if v}), None, None
    if verb == "show":
        return ("GET", f"/snapshots/workspaces/{_q(args.workspace)}/periods/{_q(owner)}/{_q(kind)}/{args.month}",
                None, None)
    if verb == "request":
        return "POST", "/snapshots/runs", {"owner": owner, "snapshot_type": kind, "workspace_id": str(args.workspace),
                                           "period": args.month, "mode": args.mode, "reason": args.reason}, key
    if verb == "range":
        body = {"owner": owner, "snapshot_type": kind, "first": args.first, "through": args.through,
                "workspaces": "all" if args.all else [str(w) for w in args.workspaces], "mode": args.mode,
                "reason": args.reason}
        return ("POST", "/snapshots/ranges/preview", body, None) if args.preview else (
            "POST", "/snapshots/ranges", body, key)
    if verb == "ranges":
        return "GET", f"/snapshots/ranges?limit={args.limit}", None, None
    if verb == "progress":
        return "GET", f"/snapshots/ranges/{_q(args.group)}", None, None
    return ("POST", f"/snapshots/workspaces/{_q(args.workspace)}/runs/{_q(args.run)}/{verb}",
            {"reason": args.reason}, None)


def run_snapshots(args: argparse.Namespace, api: str, token: str | None, console: Any) -> int:
    """Run a parsed ``snapshots`` command against ``api`` with ``token``; print its outcome
    on ``console`` (rich); returns the exit code."""
    method, path, body, headers = request_of(args)
    code, answer = answered(api, token, console, method, path, body, headers=headers)
    if code:
        return code
    if args.json:
        console.print_json(data=answer)
        return 0
    labels = type_labels(api, token) if args.verb == "periods" else {}
    for line in lines_of(args.verb, answer, labels):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def token_workspace(token: str | None) -> str | None:
    """The caller's own workspace id as the token names it: a development token's
    (``dev:<user>:<workspace>:...``), or a JWT's ``workspace_id`` (or
    ``custom:workspace_id``) claim, read unverified (the API verifies it); None if neither."""
    if not token:
        return None
    if token.startswith("dev:"):
        parts = token.split(":", 3)
        return parts[2] if len(parts) > 2 and parts[2] else None
    pieces = token.split(".")
    if len(pieces) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(pieces[1] + "=" * (-len(pieces[1]) % 4)))
    except ValueError:
        return None
    found = claims.get("workspace_id") or claims.get("custom:workspace_id") if isinstance(claims, dict) else None
    return found if isinstance(found, str) else None


def type_labels(api: str, token: str | None) -> dict[str, str]:
    """``OWNER:TYPE`` -> the snapshot type's name in words, as the API lists the enabled
    types (``types`` of the caller's own workspace's period listing, the one a staff role
    reads without a staff read recorded); empty when the token names no workspace or the
    API does not answer 200 (the codes are printed then)."""
    workspace = token_workspace(token)
    if not workspace:
        return {}
    try:
        status, body = call_api(api, token, "GET", f"/snapshots/workspaces/{_q(workspace)}/periods?limit=1")
    except ApiUnreachable:
        return {}
    if status != 200 or not isinstance(body, dict):
        return {}
    return {f"{t['owner']}:{t['snapshot_type']}": t["label"] for t in body.get("types") or [] if t.get("label")}


def lines_of(verb: str, body: dict[str, Any], labels: dict[str, str] | None = None) -> list[str]:
    """What a ``snapshots`` command prints for the API's answer ``body``: a line per item;
    ``labels`` (``OWNER:TYPE`` -> name) names the periods' types (else their codes)."""
    labels = labels or {}
    if verb == "periods":
        lines = [f"{p['workspace_name']} ({p['workspace_id']})  "
                 f"{labels.get(p['owner'] + ':' + p['snapshot_type'], p['owner'] + ':' + p['snapshot_type'])} "
                 f"{p['period']}  "
                 f"{p['state']}{' (' + p['failure_code'] + ')' if p['failure_code'] else ''}"
                 f"{' overdue' if p['overdue'] else ''}  version {p['version'] or '-'}  run {p['run_id'] or '-'}"
                 for p in body["items"]] or ["no periods"]
        if body.get("never_planned_overdue"):
            lines.append(f"and {body['never_planned_overdue']} overdue months never planned (--status overdue)")
        return lines + ([f"next page: --cursor {body['next_cursor']}"] if body.get("next_cursor") else [])
    if verb == "show":
        return _period_lines(body)
    if verb == "request":
        return [f"{body['mode']} of {body['owner']}:{body['snapshot_type']} {body['period']} in workspace "
                f"{body['workspace_id']}: version {body['version']} {body['state']} (run {body['id']}); "
                f"reason: {body['reason']}"]
    if verb == "range":
        return _plan_lines(body)
    if verb == "ranges":
        return [f"{r['group_id']}  {r['owner']}:{r['snapshot_type']} {r['mode']} {r['first']}..{r['through']}  "
                f"{r['workspaces']} workspaces, {r['done']} of {r['runs']} runs done  requested "
                f"{at(r['requested_at'], body['timezone'])} by {r['requested_by_name'] or r['requested_by'] or '-'}: "
                f"{r['reason'] or '-'}" for r in body["items"]] or ["no range requests"]
    if verb == "progress":
        counts = ", ".join(f"{n} {state}" for state, n in sorted(body["counts"].items()))
        return [f"range {body['group_id']}: {counts or 'no runs'}", *(
            f"  {r['workspace_name']} ({r['workspace_id']})  {r['period']}  version {r['version']} {r['state']}"
            f"{' (' + r['failure_code'] + ')' if r['failure_code'] else ''}  run {r['run_id']}" for r in body["items"])]
    what = "cancelled" if verb == "cancel" else "finalized"
    return [f"version {body['version']} of {body['owner']}:{body['snapshot_type']} {body['period']} {what} "
            f"(state {body['state']}, run {body['id']}): {body.get('cancel_reason') or body.get('finalize_reason')}"]


#: A version's mode in words.
MODES = {"planned": "the planner's", "manual": "a staff re-run", "backfill": "a staff backfill"}


def _period_lines(body: dict[str, Any]) -> list[str]:
    zone = body["timezone"]
    lines = [f"{body['workspace_name']} ({body['workspace_id']}), {body['label'] or body['snapshot_type']} "
             f"{body['period']}; months end in {zone}"]
    for v in body["versions"]:
        lines.append(
            f"  version {v['version']}{' (current)' if v['current'] else ''}: {v['state']} "
            f"({MODES.get(v['mode'], v['mode'])})"
            f"{', ' + v['protection'] if v['protection'] else ''}; attempts {v['attempts']}, chunks "
            f"{v['chunks_committed']}; failure {v['failure_code'] or '-'}"
            f"{': ' + v['failure_message'] if v['failure_message'] else ''}; created {at(v['created_at'], zone)}, "
            f"published {at(v['published_at'], zone)}; run {v['run_id']}")
        if v["requested_by"]:
            lines.append(f"    requested by {v['requested_by_name'] or v['requested_by']}: {v['reason'] or '-'}")
        if v["cancelled_at"]:
            lines.append(f"    cancelled by {v['cancelled_by_name'] or v['cancelled_by']} "
                         f"{at(v['cancelled_at'], zone)}: {v['cancel_reason']}")
        if v["finalized_at"]:
            lines.append(f"    finalized by {v['finalized_by_name'] or v['finalized_by']} "
                         f"{at(v['finalized_at'], zone)}: {v['finalize_reason']}")
    admission = body.get("admission")
    if admission:
        lines.append(f"  waits for admission: {admission['in_flight']} of {admission['cap']} in flight "
                     f"({admission['backfills_in_flight']} backfills, lane {admission['backfill_lane']}), "
                     f"{admission['ahead']} ahead; a pass every {admission['pass_every_minutes']} minutes")
    return lines


def _plan_lines(body: dict[str, Any]) -> list[str]:
    head = (f"range {body['group_id']}: " if body["group_id"] else "preview: ") + (
        f"{body['planned']} planned, {body['refused']} refused (admission: {body['admission_cap']} at once, "
        f"{body['backfill_lane']} kept for backfills)")
    return [head, *(f"  {i['workspace_name']} ({i['workspace_id']})  {i['period']}  "
                    + (f"planned as version {i['version']}" if i["planned"] else
                       f"refused {i['refusal']}{': ' + i['message'] if i['message'] else ''}")
                    for i in body["items"])]
