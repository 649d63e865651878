"""The tables ``python -m timekeeper chaos`` prints: the faults injected, the crash points
reached and the audit's checks."""

from __future__ import annotations

from typing import Any

from timekeeper import faults
from timekeeper.local.chaos.records import ChaosResult


def print_chaos(result: ChaosResult, console: Any) -> None:
    """Render the campaign's faults, crash-point hits and audit as rich tables."""
    from rich.table import Table

    options = result.options
    console.print(f"[bold]Chaos[/] seed {options.seed}: {options.days} day{'s' if options.days != 1 else ''} of "
                  f"faults (crash rate "
                  f"{options.crash_rate:g}, disconnect rate {options.disconnect_rate:g}, duplicate rate "
                  f"{options.duplicate_rate:g}, refuse rate {options.refuse_rate:g}, stall rate "
                  f"{options.stall_rate:g}, SES throttle rate {options.ses_throttle_rate:g}, SES reject rate "
                  f"{options.ses_reject_rate:g}, {options.db_restarts:g} database restart"
                  f"{'s' if options.db_restarts != 1 else ''} a day, {options.cut_rate:g} connection cuts a "
                  f"second) then {options.quiet_hours} quiet hours; "
                  f"{result.simulation.wall_seconds:.1f}s wall time; "
                  f"{sum(s.taken_over for s in result.stalls)} of {len(result.stalls)} stalled attempts taken over.")
    faults_table = Table(title="Injected faults")
    for column in ("kind", "where", "count"):
        faults_table.add_column(column, justify="right" if column == "count" else "left")
    for (kind, where), count in sorted(result.faults.items()):
        faults_table.add_row(kind, where, f"{count:,}")
    if result.skipped_restarts:
        faults_table.add_row("db_restart", "[yellow]skipped: the server cannot be restarted (see below)[/]",
                             f"0 of {result.skipped_restarts}")
    faults_table.add_row("[bold]total[/]", "", f"[bold]{sum(result.faults.values()):,}[/]")
    console.print(faults_table)
    for at, point, seconds in result.restarts:
        console.print(f"Database restarted at {at:%Y-%m-%d %H:%M} UTC inside {point} ({seconds:.1f}s).")
    for note in result.notes:
        console.print(f"[yellow]{note}[/]")
    hits = Table(title="Crash points reached")
    hits.add_column("crash point")
    hits.add_column("reached", justify="right")
    hits.add_column("crashed", justify="right")
    for point in faults.CRASH_POINTS:
        hits.add_row(point, f"{result.point_hits[point]:,}", f"{result.faults[('crash', point)]:,}")
    console.print(hits)
    checks = Table(title="Audit")
    for column in ("invariant", "checked", "result"):
        checks.add_column(column, justify="right" if column == "checked" else "left")
    for check in result.checks:
        if not check.held:
            verdict = f"[red]FAILED[/] ({len(check.failures)})"
        else:  # an invariant with nothing to check in this campaign says so rather than "held"
            verdict = "[green]held[/]" if check.checked else "[yellow]nothing to check[/]"
        checks.add_row(check.name, f"{check.checked:,}", verdict)
    console.print(checks)
    for check in result.checks:
        for failure in check.failures[:20]:
            console.print(f"[red]{check.name}[/]: {failure}")
    errors = getattr(result.simulation, "scheduled_errors", {})
    console.print(f"Dispatcher and planner invocations that raised or died: {sum(errors.values()):,}; consumer "
                  f"invocations that raised or died: {result.simulation.consumer.get('function_errors', 0):,}; "
                  f"run messages dead-lettered after their consumer was killed on each receive (the run settled "
                  f"without them): {result.dead_lettered_killed}; delivery messages sent twice because the "
                  f"attempt died between the provider's acceptance and the record: {result.resent_in_window}.")
    if result.api_requests:
        kinds = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in sorted(result.api_requests.items()))
        answers = ", ".join(f"{status} x {n}" for status, n in sorted(result.api_answers.items()))
        console.print(f"API requests during the faults: {sum(result.api_requests.values())} ({kinds}); "
                      f"answers over every try: {answers}.")
    console.print("[green]All invariants held.[/]" if result.passed else "[red]An invariant failed.[/]")
