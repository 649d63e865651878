"""Command line of the local stack: ``python -m timekeeper simulate | serve | openapi`` (DESIGN section 7)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, date, datetime, timedelta


def _outage(text: str):
    from timekeeper.local.simulate import Outage

    try:
        start_text, hours = text.split("/")
        start = datetime.fromisoformat(start_text)
        start = start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)
        return Outage(start, timedelta(hours=float(hours)))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected START/HOURS such as 2027-03-20T10:00/3 ({error})") from error


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m timekeeper", description="Timekeeper local stack")
    commands = parser.add_subparsers(dest="command", required=True)
    sim = commands.add_parser("simulate", help="drive the real handlers over simulated days and summarize")
    sim.add_argument("--start", type=date.fromisoformat, default=date(2027, 3, 1),
                     help="first simulated day, UTC (default 2027-03-01)")
    sim.add_argument("--days", type=int, default=41, help="number of simulated days (default 41)")
    sim.add_argument("--seed", type=int, default=7, help="random seed of the sample data (default 7)")
    sim.add_argument("--outage", type=_outage, action="append", default=None, metavar="START/HOURS",
                     help="dispatcher silence, e.g. 2027-03-20T10:00/3 (default: that one; 'none' for none)")
    sim.add_argument("--no-outage", action="store_true", help="simulate without a dispatcher outage")
    sim.add_argument("--poison", type=int, default=1, help="malformed messages sent at the start (default 1)")
    sim.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    serve = commands.add_parser("serve", help="the HTTP API on localhost over the local stack (real clock)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080; 0 picks one)")
    serve.add_argument("--reset", action="store_true", help="start from an empty serve database")
    serve.add_argument("--quiet", action="store_true", help="no access log")
    spec = commands.add_parser("openapi", help="write the API's OpenAPI document (generated from its models)")
    spec.add_argument("--out", default="-", help="file to write (default: standard output)")
    args = parser.parse_args(argv)

    if args.command == "serve":
        from timekeeper.local.serve import ServeOptions, run_serve

        return run_serve(ServeOptions(host=args.host, port=args.port, reset=args.reset, access_log=not args.quiet))
    if args.command == "openapi":
        from timekeeper.api.app import openapi_text, write_openapi

        if args.out == "-":
            sys.stdout.write(openapi_text())
        else:
            write_openapi(args.out)
        return 0

    if args.command == "simulate":
        if args.days < 1:
            parser.error("--days must be at least 1")
        from rich.console import Console

        from timekeeper.local.simulate import SimulationOptions, print_summary, run_simulation

        defaults = SimulationOptions()
        outages = () if args.no_outage else tuple(args.outage) if args.outage else defaults.outages
        options = SimulationOptions(start=args.start, days=args.days, seed=args.seed, outages=outages,
                                    poison=args.poison, show_progress=not args.no_progress)
        # Full-width tables when the output is a file or a pipe (no terminal to size them).
        console = Console(width=None if sys.stdout.isatty() else 160)
        result = run_simulation(options, console)
        print_summary(result, console)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
