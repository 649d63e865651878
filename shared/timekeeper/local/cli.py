"""Command line of the local stack: ``python -m timekeeper simulate | chaos | serve | psql |
openapi | platform-data | export | ops | smoke`` (``ops`` and ``smoke`` are clients of any
stage's API).

Every bad option value is a one-line usage error (exit code 2) from an argparse ``type=``
validator. SIGINT (Ctrl-C) and SIGTERM stop a command cleanly: what it started is
stopped (moto, the HTTP server, the embedded PostgreSQL when this process was its last
user), one line goes to standard error and the exit code is 128 + the signal number
(130 or 143), without a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from timekeeper.db.sql import load_queries

SQL = load_queries("timekeeper.local", "cli.sql")

#: The latest ``--start``: its longest simulation (``MAX_DAYS``) and the rules' look-ahead
#: still end well before the last representable day (9999-12-31).
LAST_START = date(9000, 12, 31)
MAX_DAYS = 3660


def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``low..high`` (no upper bound when None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range {low}..{high}" if high is not None
                                             else f"{value} must be at least {low}")
        return value

    parse.__name__ = "whole number"
    return parse


def _number_in(low: float, high: float, what: str, example: str) -> Callable[[str], float]:
    """An argparse type: a number from ``low`` to ``high`` (``what`` and ``example`` word
    the refusal of text that is no number)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} such as {example}, not {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range {low:g}..{high:g}")
        return value

    return parse


#: A probability from 0 to 1 (``0.05``); a rate of events per second from 0 to 100 (``0.5``).
_rate = _number_in(0, 1, "a probability", "0.05")
_per_second = _number_in(0, 100, "events per second", "0.5")


def _day(text: str) -> date:
    """An argparse type: an ISO date (``2027-03-01``) from 1970 to :data:`LAST_START` (so
    that the longest simulation still ends on a representable day)."""
    try:
        value = date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date such as 2027-03-01, not {text!r}") from None
    if not date(1970, 1, 1) <= value <= LAST_START:
        raise argparse.ArgumentTypeError(f"{value} is out of range 1970-01-01..{LAST_START}")
    return value


def _outage(text: str) -> Any:
    """An argparse type: ``START/HOURS`` (an ISO instant, UTC when no offset, and a
    positive number of hours) as an :class:`~timekeeper.local.simulate.Outage`, or
    ``none`` (no outage: returns None)."""
    from timekeeper.local.simulate import Outage

    if text.strip().lower() == "none":
        return None
    start_text, slash, hours_text = text.partition("/")
    try:
        if not slash:
            raise ValueError("missing /HOURS")
        start = datetime.fromisoformat(start_text)
        hours = float(hours_text)
        if not 0 < hours <= 24 * 366:
            raise ValueError(f"HOURS must be above 0 and at most {24 * 366}, not {hours_text}")
        length = timedelta(hours=hours)
    except (ValueError, OverflowError) as error:
        raise argparse.ArgumentTypeError(f"expected START/HOURS such as 2027-03-20T10:00/3 or 'none' ({error})") \
            from None
    start = start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)
    return Outage(start, length)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (``signum``): unwinds like Ctrl-C, so cleanups run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The signal that interrupted this process, once one did: a cleanup interrupted half way
#: (e.g. a database transaction whose rollback fails because its query was cancelled) may
#: replace the KeyboardInterrupt by another error, which is then still an interruption.
_received: list[int] = []


def _interrupt(signum: int, frame: Any) -> None:
    _received.append(signum)
    raise Interrupted(signum)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m timekeeper`` argument parser."""
    parser = argparse.ArgumentParser(prog="python -m timekeeper", description="Timekeeper local stack")
    commands = parser.add_subparsers(dest="command", required=True)
    sim = commands.add_parser("simulate", help="drive the real handlers over simulated days and summarize")
    sim.add_argument("--start", type=_day, default=date(2027, 3, 1),
                     help="first simulated day, UTC (default 2027-03-01)")
    sim.add_argument("--days", type=_int_at_least(1, MAX_DAYS), default=41,
                     help=f"number of simulated days, 1-{MAX_DAYS} (default 41)")
    sim.add_argument("--seed", type=int, default=7, help="random seed of the sample data (default 7)")
    sim.add_argument("--outage", type=_outage, action="append", default=None, metavar="START/HOURS",
                     help="dispatcher silence, e.g. 2027-03-20T10:00/3 (repeatable; default: that one; "
                          "'none' for none)")
    sim.add_argument("--no-outage", action="store_true", help="simulate without a dispatcher outage")
    sim.add_argument("--poison", type=_int_at_least(0, 1000), default=1,
                     help="malformed messages sent at the start, 0-1000 (default 1)")
    sim.add_argument("--every-minute", action="store_true",
                     help="invoke the dispatcher at every simulated minute (default: idle minutes are "
                          "fast-forwarded)")
    sim.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    chaos = commands.add_parser("chaos", help="simulate under injected crashes, duplicate deliveries, publish "
                                "refusals, database disconnects and restarts, stalled consumers and SES throttling and "
                                "refusals, then audit the invariants")
    chaos.add_argument("--days", type=_int_at_least(1, 366), default=30,
                       help="simulated days with faults, 1-366 (default 30)")
    chaos.add_argument("--seed", type=int, default=1, help="random seed of the faults (default 1)")
    chaos.add_argument("--crash-rate", type=_rate, default=0.05,
                       help="probability that a crash point kills the process (default 0.05)")
    chaos.add_argument("--duplicate-rate", type=_rate, default=0.10,
                       help="probability that a received SQS message is delivered again (default 0.10)")
    chaos.add_argument("--refuse-rate", type=_rate, default=0.02,
                       help="probability that the queue refuses a published message (default 0.02)")
    chaos.add_argument("--disconnect-rate", type=_rate, default=0.01,
                       help="probability that a crash point drops every database connection (default 0.01)")
    chaos.add_argument("--stall-rate", type=_rate, default=0.02,
                       help="probability that a consumer invocation stalls past its lease as its first handler "
                            "starts, while another takes the run over (default 0.02)")
    chaos.add_argument("--ses-throttle-rate", type=_rate, default=0.1,
                       help="probability that SES throttles a mail submission (Throttling: retried) (default 0.1)")
    chaos.add_argument("--ses-reject-rate", type=_rate, default=0.1,
                       help="probability that SES refuses a mail submission permanently (MessageRejected) "
                            "(default 0.1)")
    chaos.add_argument("--db-restarts", type=_int_at_least(0, 96), default=1,
                       help="restarts of the embedded database server per simulated day of faults, at seeded "
                            "instants; skipped with a note when DATABASE_URL names the server (default 1)")
    chaos.add_argument("--cut-rate", type=_per_second, default=0.5,
                       help="database connections cut per wall-clock second by a TCP proxy in front of the "
                            "database, at arbitrary moments (0: no proxy; default 0.5)")
    chaos.add_argument("--api-requests", type=_int_at_least(0, 1440), default=24,
                       help="API requests per simulated day of faults (Run now, exports, renders, each with an "
                            "Idempotency-Key and a client's retries; default 24)")
    chaos.add_argument("--quiet-hours", type=_int_at_least(1, 24 * 30), default=6,
                       help="hours without faults at the end, for recovery (default 6)")
    chaos.add_argument("--load", type=_int_at_least(0, 20), default=1,
                       help="units of extra traffic: sweeps every 30 minutes and an hourly delivery (default 1)")
    chaos.add_argument("--start", type=_day, default=date(2027, 3, 1),
                       help="first simulated day, UTC (default 2027-03-01)")
    chaos.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    serve = commands.add_parser("serve", help="the HTTP API on localhost over the local stack (real clock)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=_int_at_least(0, 65535), default=8080,
                       help="port to listen on, 0-65535 (default 8080; 0 picks one)")
    serve.add_argument("--reset", action="store_true",
                       help="drop the serve database first (the samples are loaded again unless --empty)")
    serve.add_argument("--empty", action="store_true",
                       help="add no sample schedules or deliveries (the sample people and invoices are loaded)")
    serve.add_argument("--quiet", action="store_true", help="no access log")
    serve.add_argument("--mail-dir", type=Path, default=None,
                       help="keep a copy of every message sent here (default .timekeeper/serve-mail)")
    psql = commands.add_parser("psql", help="open a local database (kept by simulate or serve) in psql")
    psql.add_argument("--database", default="timekeeper_sim",
                      help="database name (default timekeeper_sim; serve's is timekeeper_serve)")
    psql.add_argument("psql_args", nargs=argparse.REMAINDER, metavar="-- PSQL ARGUMENTS",
                      help="passed on to psql after a --, e.g. -- -c 'SELECT count(*) FROM schedule_runs'")
    data = commands.add_parser("platform-data", help="load the Platform sample tenant set (and benchmark volume) "
                                                      "into a local database")
    data.add_argument("--seed", type=int, default=7, help="random seed of the sample set (default 7)")
    data.add_argument("--invoices", type=_int_at_least(0, 100_000_000), default=0,
                      help="benchmark invoices (with members and payments) added to the sample's first "
                           "workspace, 0-100000000 (default 0)")
    data.add_argument("--database", default="timekeeper_serve",
                      help="local database to load, created and migrated when missing (default timekeeper_serve, "
                           "serve's)")
    data.add_argument("--database-url", default=None,
                      help="load this database instead (migrated first); the schema owner's URL")
    spec = commands.add_parser("openapi", help="write the API's OpenAPI document (generated from its models)")
    spec.add_argument("--out", default="-", help="file to write (default: standard output)")
    export = commands.add_parser("export", help="export a saved query to a CSV or XLSX file through the local "
                                                "stack (queue, real consumer, S3 in moto)")
    export.add_argument("--workspace", type=_uuid, required=True, help="the workspace's id (a UUID)")
    export.add_argument("--user", required=True, help="who asks (the access rule is checked for this user)")
    which = export.add_mutually_exclusive_group(required=True)
    which.add_argument("--query", type=_uuid, help="the saved query's id")
    which.add_argument("--definition", type=_definition,
                       help="save this query definition (JSON, or @FILE) first and export it")
    export.add_argument("--version", type=_int_at_least(1, 2_147_483_647), help="the query version (default: current)")
    export.add_argument("--format", choices=("csv", "xlsx"), default="csv", help="file format (default csv)")
    export.add_argument("--out", required=True, help="file to write")
    export.add_argument("--demo", action="store_true",
                        help="first create whichever is missing of the workspace, the user, their membership "
                             "(queries:read) and 1,000 invoices; nothing that exists is changed")
    export.add_argument("--database", default="timekeeper_serve", help="database name (default timekeeper_serve)")
    ops = commands.add_parser("ops", help="staff's and workspace admins' operations through the API (serve's, or a "
                                          "deployed stage's with --api and a --token)")
    ops.add_argument("--api", default=None, type=_api_url,
                     help="the API's base URL (default $TIMEKEEPER_API or http://127.0.0.1:8080; a stage's URL "
                          "ends in /v1)")
    ops.add_argument("--token", default=None, type=_token,
                     help="bearer token (default $TIMEKEEPER_TOKEN): a staff member's; a workspace admin's for "
                          "settings, closures, posting-jobs and suppressions (serve: one token may hold both, "
                          "dev:<user>:<workspace>:platform:staff,workspace:admin,...)")
    actions = ops.add_subparsers(dest="action", required=True, metavar="ACTION")
    overview = actions.add_parser("overview",
                                  help="paused and failing schedules, stuck runs, overdue snapshot periods, "
                                       "dead-letter queues")
    overview.add_argument("--limit", type=_int_at_least(1, 500), default=100, help="rows of each kind, 1-500")
    overview.add_argument("--json", action="store_true", help="print the API's JSON body")
    redrive = actions.add_parser("redrive", help="move a dead-letter queue's messages back to its queue")
    redrive.add_argument("queue", help="the queue's name (accounting, queries, exports, snapshots, ...)")
    redrive.add_argument("--reason", required=True, help="why (recorded with the action)")
    redrive.add_argument("--json", action="store_true", help="print the API's JSON body")
    resume = actions.add_parser("resume", help="resume a paused schedule of any workspace")
    resume.add_argument("workspace", type=_uuid, help="the schedule's workspace id")
    resume.add_argument("schedule", type=_uuid, help="the schedule's id")
    resume.add_argument("--reason", required=True, help="why (recorded in the schedule's history)")
    resume.add_argument("--json", action="store_true", help="print the API's JSON body")
    erase = actions.add_parser("erase", help="erase a person's address, recipient lists, opt-outs and "
                                             "suppressions in every workspace")
    erase.add_argument("user", help="the platform's user id of the person")
    erase.add_argument("--reason", required=True, help="why, e.g. the request's reference (recorded with the action)")
    erase.add_argument("--json", action="store_true", help="print the API's JSON body")
    erase_member = actions.add_parser("erase-member", help="erase a workspace's member (the business data's) from "
                                                           "every snapshot version's rows")
    erase_member.add_argument("workspace", type=_uuid, help="the member's workspace id")
    erase_member.add_argument("member", type=_uuid, help="the member's id")
    erase_member.add_argument("--reason", required=True, help="why, e.g. the request's reference")
    erase_member.add_argument("--json", action="store_true", help="print the API's JSON body")
    smoke = commands.add_parser("smoke", help="check a deployed stage (or serve) end to end through its API: a "
                                              "scheduled run, a delivery sent, everything made deleted again")
    smoke.add_argument("--api", required=True, type=_api_url,
                       help="the API's base URL (a deployed stage's ends in /v1)")
    smoke.add_argument("--token", required=True, type=_token, help="bearer token of a member (roles: docs/deploy.md)")
    smoke.add_argument("--mail-to", default=None, metavar="ADDRESS",
                       help="the address of the workspace member the delivery is sent to (default: no delivery)")
    smoke.add_argument("--timeout", type=_int_at_least(10, 3600), default=300, metavar="SECONDS",
                       help="bound of the whole check, 10-3600 seconds (default 300)")
    _add_ops_group_parsers(actions)
    return parser


def _add_ops_group_parsers(actions: Any) -> None:
    """``ops runs show|retry|cancel|fail`` and ``ops dlq list|show|redrive|delete``
    (:mod:`timekeeper.local.ops_runs`), a workspace admin's ``settings``, ``closures``,
    ``posting-jobs`` and ``suppressions`` (:mod:`timekeeper.local.ops_workspace`) and
    staff's ``snapshots`` (:mod:`timekeeper.local.ops_snapshots`)."""
    from timekeeper.local.ops_snapshots import add_snapshot_parsers
    from timekeeper.local.ops_workspace import add_workspace_parsers

    add_workspace_parsers(actions, _uuid)
    add_snapshot_parsers(actions, _uuid)
    runs = actions.add_parser("runs", help="a run's page and the operators' actions on it")
    verbs = runs.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="runs, a line each with the whole id: a schedule's (--schedule), the "
                                            "token's workspace's failed runs (--state failed), or across workspaces "
                                            "the failing schedules' latest failed runs and the runs that wait too "
                                            "long (a staff token)")
    listing.add_argument("--state", choices=("failed", "queued", "running", "succeeded", "skipped"), default=None,
                         help="only runs in this state (failed: every failed run of the token's workspace, newest "
                              "first, a retried one with its retry; succeeded and skipped: with --schedule)")
    listing.add_argument("--schedule", type=_uuid, default=None,
                         help="the schedule's runs, newest first (a token of its workspace with schedules:read)")
    listing.add_argument("--limit", type=_int_at_least(1, 200), default=50, help="runs to print, 1-200")
    listing.add_argument("--json", action="store_true", help="print the runs as JSON ({\"items\": [...]})")
    show = verbs.add_parser("show", help="the run: schedule, occurrence, state, attempts, actions")
    show.add_argument("run", type=_uuid, help="the run's id")
    show.add_argument("--json", action="store_true", help="print the API's JSON body")
    for verb, text in (("retry", "queue a manual run of the run's schedule now"),
                       ("cancel", "cancel a queued run"), ("fail", "settle a stuck run as failed")):
        acting = verbs.add_parser(verb, help=text)
        acting.add_argument("run", type=_uuid, help="the run's id")
        acting.add_argument("--reason", required=True, help="why (recorded with the action)")
        acting.add_argument("--key", default=None, help="Idempotency-Key (default: a new one)")
        acting.add_argument("--json", action="store_true", help="print the API's JSON body")
    dlq = actions.add_parser("dlq", help="dead-letter queues: read messages, redrive or delete them")
    verbs = dlq.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="every dead-letter queue and its depth")
    listing.add_argument("--json", action="store_true", help="print the API's JSON body")
    show = verbs.add_parser("show", help="a queue's messages, decoded (they stay in the queue)")
    show.add_argument("queue", help="the queue's name (accounting, queries, exports, snapshots, ...)")
    show.add_argument("--limit", type=_int_at_least(1, 50), default=10, help="messages to read, 1-50")
    show.add_argument("--json", action="store_true", help="print the API's JSON body")
    redrive = verbs.add_parser("redrive", help="move a queue's messages (or one: --message) back to its queue")
    redrive.add_argument("queue", help="the queue's name")
    redrive.add_argument("--message", default=None, help="only this message id")
    redrive.add_argument("--reason", required=True, help="why (recorded with the action)")
    redrive.add_argument("--json", action="store_true", help="print the API's JSON body")
    delete = verbs.add_parser("delete", help="delete one message of a queue")
    delete.add_argument("queue", help="the queue's name")
    delete.add_argument("message", help="the message id")
    delete.add_argument("--reason", required=True, help="why (recorded with the action)")
    delete.add_argument("--json", action="store_true", help="print the API's JSON body")


def _api_url(text: str) -> str:
    """An argparse type: an http(s) URL with a host (the API's base URL)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        host = None
    if not text.startswith(("http://", "https://")) or not host:
        raise argparse.ArgumentTypeError(f"expected the API's http(s) URL, e.g. http://127.0.0.1:8080, not {text!r}")
    return text


def _token(text: str) -> str:
    """An argparse type: a bearer token (no white space or control characters)."""
    if not text or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError("a token has no spaces, line breaks or control characters")
    return text


def _uuid(text: str) -> Any:
    """An argparse type: a UUID."""
    import uuid

    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a UUID, not {text!r}") from None


def _definition(text: str) -> dict[str, Any]:
    """An argparse type: a query definition as a JSON object (or ``@FILE``)."""
    from timekeeper.local.export import parse_definition

    try:
        return parse_definition(text)
    except (ValueError, OSError) as error:
        raise argparse.ArgumentTypeError(f"expected a JSON object or @FILE ({error})") from None


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit code (2 for a
    usage error, 128 + signal number when interrupted)."""
    args = build_parser().parse_args(argv)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    _received.clear()
    try:
        return _run(args)
    except KeyboardInterrupt as stop:
        signum = getattr(stop, "signum", signal.SIGINT)
        print(f"stopped by {signal.Signals(signum).name}", file=sys.stderr)
        return 128 + signum
    except Exception:
        if not _received:
            raise
        # The interruption unwound through a cleanup that failed because of it.
        print(f"stopped by {signal.Signals(_received[0]).name}", file=sys.stderr)
        return 128 + _received[0]
    finally:
        for signum, previous in handlers.items():
            signal.signal(signum, previous)


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        from timekeeper.local.serve import ServeOptions, run_serve

        return run_serve(ServeOptions(host=args.host, port=args.port, reset=args.reset, access_log=not args.quiet,
                                      sample=not args.empty, mail_dir=args.mail_dir))
    if args.command == "openapi":
        from timekeeper.edge.api import openapi_text, write_openapi

        if args.out == "-":
            sys.stdout.write(openapi_text())
        else:
            write_openapi(args.out)
        return 0
    if args.command == "psql":
        extra = args.psql_args[1:] if args.psql_args[:1] == ["--"] else args.psql_args
        return _psql(args.database, extra)
    if args.command == "ops":
        import os

        from rich.console import Console

        from timekeeper.local.ops import OpsOptions, default_api, run_ops
        from timekeeper.local.ops_runs import run_runs_or_dlq
        from timekeeper.local.ops_snapshots import run_snapshots
        from timekeeper.local.ops_workspace import GROUPS, run_workspace

        api, token = args.api or default_api(), args.token or os.environ.get("TIMEKEEPER_TOKEN")
        if args.action in GROUPS:
            return run_workspace(args, api, token, Console())
        if args.action == "snapshots":
            return run_snapshots(args, api, token, Console())
        command = run_runs_or_dlq if args.action in ("runs", "dlq") else run_ops
        return command(OpsOptions(
            action=args.action, api=api, token=token,
            reason=getattr(args, "reason", None), queue=getattr(args, "queue", None),
            workspace=str(args.workspace) if getattr(args, "workspace", None) else None,
            schedule=str(args.schedule) if getattr(args, "schedule", None) else None, user=getattr(args, "user", None),
            member=str(args.member) if getattr(args, "member", None) else None,
            limit=getattr(args, "limit", 100), as_json=args.json, verb=getattr(args, "verb", None),
            run=str(args.run) if getattr(args, "run", None) else None, message=getattr(args, "message", None),
            key=getattr(args, "key", None), state=getattr(args, "state", None)), Console())
    if args.command == "smoke":
        from timekeeper.local.smoke import SmokeOptions, print_summary, run_smoke

        out = sys.stdout
        result = run_smoke(SmokeOptions(api=args.api, token=args.token, mail_to=args.mail_to,
                                        timeout_s=args.timeout), out)
        print_summary(result, out)
        return 0 if result.passed else 1
    if args.command == "export":
        from pathlib import Path

        from timekeeper.local.export import ExportOptions, run_export_command

        announce_new_state()

        return run_export_command(ExportOptions(
            workspace=args.workspace, user=args.user, format=args.format, out=Path(args.out), query=args.query,
            version=args.version, definition=args.definition, demo=args.demo, database=args.database))
    if args.command == "platform-data":
        return _platform_data(args)
    from rich.console import Console

    # Full-width tables when the output is a file or a pipe (no terminal to size them).
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.command == "chaos":
        from timekeeper.local.chaos.injector import run_chaos
        from timekeeper.local.chaos.printer import print_chaos
        from timekeeper.local.chaos.records import ChaosOptions

        chaos = run_chaos(ChaosOptions(
            days=args.days, seed=args.seed, crash_rate=args.crash_rate, duplicate_rate=args.duplicate_rate,
            refuse_rate=args.refuse_rate, disconnect_rate=args.disconnect_rate, stall_rate=args.stall_rate,
            ses_throttle_rate=args.ses_throttle_rate, ses_reject_rate=args.ses_reject_rate,
            db_restarts=args.db_restarts, cut_rate=args.cut_rate, api_requests=args.api_requests,
            quiet_hours=args.quiet_hours,
            start=args.start, load=args.load, show_progress=not args.no_progress), console)
        print_chaos(chaos, console)
        return 0 if chaos.passed else 1

    from timekeeper.local.simulate import print_summary, run_simulation

    result = run_simulation(simulation_options(args), console)
    print_summary(result, console)
    return 0


def simulation_options(args: argparse.Namespace) -> Any:
    """The :class:`~timekeeper.local.simulate.SimulationOptions` of parsed ``simulate``
    arguments: ``--no-outage`` or only ``--outage none`` is no outage; otherwise the
    outages given, or the default one."""
    from timekeeper.local.simulate import SimulationOptions

    outages = [o for o in args.outage or () if o is not None]
    no_outage = args.no_outage or (args.outage and not outages)
    return SimulationOptions(start=args.start, days=args.days, seed=args.seed,
                             outages=() if no_outage else tuple(outages) or SimulationOptions().outages,
                             poison=args.poison, show_progress=not args.no_progress,
                             fast_forward=not args.every_minute)


def _platform_data(args: argparse.Namespace, out: Any = None) -> int:
    """The ``platform-data`` command: migrate the database (``--database-url``, else
    ``--database`` on the local server as ``serve`` creates it), load the Platform sample
    set ending at midnight UTC today (idempotent) and, with ``--invoices N``, N benchmark
    invoices into its first workspace; print what was loaded and how long it took.
    Exit code 1 when the database cannot be reached."""
    import time

    import psycopg

    from timekeeper import clock
    from timekeeper.db.connection import connect
    from timekeeper.db.migrate import apply_migrations
    from timekeeper.local.platform_data import load_volume
    from timekeeper.local.stack import load_platform_sample, platform_sample_day, prepare_database

    out = out or sys.stdout
    try:
        if args.database_url:
            url = args.database_url
            with connect(url) as conn:
                apply_migrations(conn)
        else:
            url = prepare_database(args.database, reset=False)
        started = time.monotonic()
        sample = load_platform_sample(url, now=platform_sample_day(clock.now()), seed=args.seed)
        print(f"Platform sample (seed {args.seed}, data up to {sample.now:%Y-%m-%d}) in "
              f"{time.monotonic() - started:.1f}s: " + ", ".join(f"{n} {t}" for t, n in sample.counts.items()),
              file=out)
        for key, workspace_id in sample.workspaces.items():
            print(f"  workspace {key}: {workspace_id}", file=out)
        print("  users: " + ", ".join(f"{persona}={user}" for persona, user in sample.users.items()), file=out)
        if args.invoices:
            started = time.monotonic()
            with connect(url) as conn:
                loaded = load_volume(conn, workspace_id=sample.first_workspace, invoices=args.invoices,
                                     seed=args.seed + 4)
            print(f"volume: {loaded} invoices into workspace {sample.first_workspace} in "
                  f"{time.monotonic() - started:.1f}s" + ("" if loaded else " (already there)"), file=out)
    except (psycopg.Error, OSError, RuntimeError) as error:
        print(f"cannot load the Platform data: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


def _where(home: Any, how: str) -> str:
    """How the state folder ``home`` was chosen, for a message (``how`` from
    :func:`timekeeper.local.embedded.find_state_home`)."""
    return {"variable": f"{home} (TIMEKEEPER_HOME)",
            "found": f"{home} (the nearest .timekeeper folder up from here)"}.get(
        how, f"{home} (no .timekeeper folder here or in a parent folder)")


def announce_new_state(err: Any = None) -> bool:
    """Say on ``err`` (standard error) when the embedded server about to start has no data
    yet: a command run outside the checkout would otherwise answer from a new, empty
    server without a word. Returns whether it said so (never with ``DATABASE_URL``)."""
    import os

    from timekeeper.local import embedded

    if os.environ.get("DATABASE_URL"):
        return False
    home, how = embedded.find_state_home()
    if embedded.holds_server(home / "pgdata"):
        return False
    print(f"note: the local state folder {_where(home, how)} holds no database yet; starting a new, empty one "
          f"(run from the checkout, or set TIMEKEEPER_HOME to its .timekeeper folder, to use its data)",
          file=err or sys.stderr)
    return True


def _psql(database: str, extra: list[str] | None = None) -> int:
    """Open ``database`` on the local server in psql, with ``extra`` arguments after the
    connection (``-c``, ``-f``, ...); the embedded server runs while psql does.
    Exit code 1, with one line saying why, when the state folder holds no server (none is
    started) or the server has no such database."""
    import os
    import subprocess

    import psycopg

    from timekeeper.local import embedded

    if not os.environ.get("DATABASE_URL"):
        home, how = embedded.find_state_home()
        if not embedded.holds_server(home / "pgdata"):
            print(f"no local database server in {_where(home, how)}: run simulate or serve first, from the "
                  f"checkout or with TIMEKEEPER_HOME naming its .timekeeper folder", file=sys.stderr)
            return 1
    try:
        server = embedded.server_url()
        with psycopg.connect(server, autocommit=True) as conn:
            names = [r[0] for r in conn.execute(SQL["database_names"]).fetchall()]
        url = embedded.with_database(server, database)
    except Exception as error:  # noqa: BLE001 - one line, not a traceback
        print(f"cannot start the local database server: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if database not in names:
        where = "DATABASE_URL's server" if os.environ.get("DATABASE_URL") else \
            f"the local server in {embedded.state_home()}"
        print(f"no database {database} on {where} (it has: {', '.join(names)}); simulate makes timekeeper_sim, "
              f"serve timekeeper_serve", file=sys.stderr)
        return 1
    # Ctrl-C belongs to psql while it runs (it cancels the query there), not to this process.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.call([*embedded.psql_command(url), *(extra or [])])
    except FileNotFoundError:
        print(f"psql not found; connect with any PostgreSQL client to: {url}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
