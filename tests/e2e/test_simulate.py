"""The local stack driven for simulated days (``python -m timekeeper simulate``): the real handlers,
moto queues with redrive, the embedded database; assertions on the final tables."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime

import pytest

from timekeeper.local.simulate import SimulationOptions, print_summary, run_simulation

DAYS = 31


@pytest.fixture(scope="module")
def simulated(pg_server_url, monkeypatch_module, tmp_path_factory):
    # 2027-03-06 .. 2027-04-05: New York's spring gap (03-14), a 3-hour dispatcher outage
    # (03-20), London's calendar coverage ending 03-21 and the fifth refusal (03-26), Lord
    # Howe's fall-back overlap (04-04).
    monkeypatch_module.setenv("DATABASE_URL", pg_server_url)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return run_simulation(SimulationOptions(start=date(2027, 3, 6), days=DAYS, show_progress=False,
                                            database=f"tk_e2e_{worker}",
                                            delivery_dir=tmp_path_factory.mktemp("deliveries")))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_every_run_finished_and_the_poison_message_is_dead_lettered(simulated):
    assert simulated.unfinished_runs == 0
    assert simulated.dlq_messages == {"accounting": 1, "queries": 1, "snapshots": 1}  # one poison message a queue
    assert simulated.dispatcher_invocations + simulated.silent_minutes + simulated.idle_minutes == DAYS * 24 * 60
    assert simulated.silent_minutes == 180


def test_the_spring_gap_shifts_new_yorks_0230_roll_to_0330(simulated):
    shifted = [r for r in simulated.dst_shifted if r["name"] == "ny.payables.roll"]
    assert len(shifted) == 1
    assert shifted[0]["occurrence_local"] == datetime(2027, 3, 14, 2, 30)
    assert shifted[0]["occurrence_at"] == datetime(2027, 3, 14, 7, 30, tzinfo=UTC)


def test_londons_sweep_skips_the_spring_gap_day_as_its_owner_chose(simulated):
    # London springs forward at 01:00 on 2027-03-28: its 01:30 sweep (dst gap "skip") is a
    # skipped run that day, not a run shifted to 02:30
    (gap,) = [r for r in simulated.dst_shifted if r["name"] == "london.reconciliation"]
    assert (gap["occurrence_local"], gap["state"], gap["outcome_code"]) == (
        datetime(2027, 3, 28, 1, 30), "skipped", "skipped_dst_gap")


def test_coverage_refusals_pause_londons_roll_on_the_fifth(simulated):
    refused = [r for r in simulated.runs_by_kind
               if r["work_kind"] == "batch.roll" and r["outcome_code"] == "outside_calendar_coverage"]
    assert sum(r["runs"] for r in refused) == 5
    (paused,) = [p for p in simulated.paused  # (the others are query schedules': lost access, the hand-off)
                 if p["pause_reason"] not in ("source_access_lost", "ownerless")]
    assert (paused["name"], paused["pause_reason"], paused["consecutive_failures"]) == (
        "london.sales.roll", "consecutive_failures", 5)
    assert paused["paused_at"] == datetime(2027, 3, 26, 7, 0, tzinfo=UTC)  # 07:00 London = UTC in March
    # It belongs to London's accountant, who was told of the first refusal and of the pause
    assert (paused["owner"], paused["owner_told"]) == ("Lena Ledger", "schedule_failed, schedule_paused")
    assert simulated.notifications_sent == 2  # this pause, and the query schedule whose owner was deactivated


def test_the_outage_backlog_is_collapsed_to_one_run_per_schedule(simulated):
    backlog = {r["name"]: r["skipped_backlog"] for r in simulated.backlog}
    # Lord Howe's hourly sweep at :40 missed 10:40 and 11:40 UTC and ran once for 12:40
    assert backlog == {"lord_howe.reconciliation.hourly": 2}


def test_succeeded_rolls_posted_their_closed_batches(simulated):
    assert simulated.posting_jobs.get("succeeded", 0) >= 3
    assert "failed" not in simulated.posting_jobs


def test_the_fall_back_overlap_runs_a_fixed_time_as_its_owner_chose_and_an_hourly_rule_at_each_instant(simulated):
    # Lord Howe falls back from 02:00 to 01:30 on 2027-04-04: 01:30-02:00 happens twice; the
    # daily sweep's owner chose both instants (dst overlap "both"), so it runs at each
    overlap = {(r["name"], r["occurrence_local"]): r for r in simulated.dst_overlap}
    daily = overlap[("lord_howe.reconciliation.daily", datetime(2027, 4, 4, 1, 45))]
    hourly = overlap[("lord_howe.reconciliation.hourly", datetime(2027, 4, 4, 1, 40))]
    assert (daily["runs"], daily["occurrence_at"]) == (2, datetime(2027, 4, 3, 14, 45, tzinfo=UTC))
    assert (hourly["runs"], hourly["occurrence_at"]) == (2, datetime(2027, 4, 3, 14, 40, tzinfo=UTC))
    assert set(overlap) == {("lord_howe.reconciliation.daily", datetime(2027, 4, 4, 1, 45)),
                            ("lord_howe.reconciliation.hourly", datetime(2027, 4, 4, 1, 40))}


def test_the_summary_draws_no_empty_table_explains_posting_and_counts_consumer_errors(simulated):
    # Given the summary of the simulation printed to a wide console
    from rich.console import Console

    console = Console(width=200, record=True)
    # When it is printed
    print_summary(simulated, console)
    text = console.export_text()
    # Then it explains the posting jobs, shows the consumer's failures and how to open the database
    assert "Posting jobs (a closed batch's entries posted to the ledger" in text
    assert f"{simulated.consumer['failed']} returned as batch item failures" in text
    assert simulated.consumer["failed"] >= 1  # the poison message, on every receive until dead-lettered
    assert f"psql '{simulated.database_url}'" in text  # DATABASE_URL names the server here
    assert "Occurrences in a repeated hour (DST overlap)" in text
    assert "Reports delivered from published snapshot periods (the render's basis)" in text
    # And a table without rows is one line instead of an empty frame
    empty = type(simulated)(database_url=simulated.database_url)
    console = Console(width=200, record=True)
    print_summary(empty, console)
    text = console.export_text()
    assert "Paused schedules: none." in text and "┏" not in text


def _periods(simulated, workspace: str, snapshot_type: str) -> dict[str, dict]:
    return {f"{r['period']:%Y-%m}": r for r in simulated.snapshot_periods
            if r["workspace"] == workspace and r["snapshot_type"] == snapshot_type}


def test_snapshots_publish_each_month_as_it_ends_in_the_workspaces_own_timezone(simulated):
    # March ends at 2027-03-31 10:00 UTC in Kiritimati (UTC+14) and at 2027-04-01 11:00 UTC in
    # Pago Pago (UTC-11); the planner runs every 15 minutes and the dispatcher at once after it.
    east = _periods(simulated, "Kiritimati Fishing Club", "ar_aging")["2027-03"]
    west = _periods(simulated, "Pago Pago Canoe Club", "ar_aging")["2027-03"]
    assert east["state"] == west["state"] == "published"
    assert datetime(2027, 3, 31, 10, tzinfo=UTC) <= east["published_at"] < datetime(2027, 3, 31, 10, 30, tzinfo=UTC)
    assert datetime(2027, 4, 1, 11, tzinfo=UTC) <= west["published_at"] < datetime(2027, 4, 1, 11, 30, tzinfo=UTC)
    # The only overdue period at the end is the failed drill (below), never re-run here.
    assert simulated.snapshot_overdue == ["Ruderverein Spree selftest 2027-03"]  # the workspace by its club


def test_snapshot_skip_reasons_staff_requests_and_the_failed_drill(simulated):
    reasons = {(r["workspace"], r["skip_reason"]) for r in simulated.snapshot_periods if r["state"] == "skipped"}
    assert {reason for _, reason in reasons} == {"workspace_loading", "workspace_disabled", "policy_disabled"}
    berlin = [r for r in simulated.snapshot_periods if r["timezone"] == "Europe/Berlin"]
    by_type = {(r["snapshot_type"], f"{r['period']:%Y-%m}"): r for r in berlin}
    # The staff backfill of an old month (outside the planner's horizon) and the re-run of February
    assert by_type[("ar_aging", "2026-07")]["mode"] == "backfill"
    assert by_type[("ar_aging", "2026-07")]["state"] == "published"
    rerun = by_type[("membership_counts", "2027-02")]
    assert (rerun["state"], rerun["version"], rerun["versions"], rerun["mode"]) == ("published", 2, 2, "manual")
    # The self-test drill: version 1 of Berlin's March fails validation, final at once
    drill = by_type[("selftest", "2027-03")]
    assert (drill["state"], drill["failure_code"], drill["versions"]) == ("failed", "selftest_mismatch", 1)
    planned, captured = simulated.staff_requests[:2], simulated.staff_requests[2:]
    assert len(planned) == 2 and all("planned" in line for line in planned)
    # The re-run of March's aging after the monthly aging report delivered it: captured history
    assert captured == ["2027-04-05 09:00 manual ar_aging Ruderverein Spree 2027-03: refused (protected_history)"]


def test_the_sample_query_schedules_deliver_skip_and_pause(simulated):
    from pathlib import Path

    runs = {(r["name"], r["state"], r["outcome"]): r["n"] for r in simulated.delivery["runs"]}
    # Daily: every day succeeded; weekly report: every Monday; monthly void invoices: empty, skipped
    assert runs[("Daily open invoices", "succeeded", "succeeded")] == DAYS
    assert runs[("Weekly invoice report", "succeeded", "succeeded")] == 5  # Mondays 03-08 .. 04-05
    assert runs[("Monthly void invoices", "skipped", "skipped_empty")] == 1  # 04-01
    # The board report, reassigned after its owner left, ran on 04-01; the ownerless list did not
    assert runs[("Board report", "succeeded", "succeeded")] == 1
    assert not any(name == "Board members list" for name, _, _ in runs)
    # The deactivated owner's schedule failed once and paused itself
    assert runs[("Owner deactivated", "failed", "source_access_lost")] == 1
    assert any(p["pause_reason"] == "source_access_lost" for p in simulated.paused)
    deliveries = {(r["status"], r["reason"]): r["n"] for r in simulated.delivery["deliveries"]}
    assert runs[("Monthly receivables aging", "succeeded", "succeeded")] == 1  # 04-02
    # The daily's admin opts out after her first message and the viewer's address bounces
    # on its first; on the weekly report the multi-membership user complains about the
    # first. The aging report and the reassigned board report (to the admin) are one
    # message each.
    assert deliveries == {("sent", ""): 2 + 5 + 1 + 1 + 1, ("skipped", "deactivated"): DAYS,
                          ("skipped", "left_workspace"): DAYS, ("skipped", "no_access"): DAYS,
                          ("skipped", "no_address"): DAYS, ("skipped", "unsubscribed"): DAYS - 1,
                          ("skipped", "suppressed"): (DAYS - 1) + 4}
    folder = Path(simulated.delivery_dir)
    # (and the four notice e-mails: the admin's notice, then a digest of two; London's
    # accountant's first refusal, then the pause, four days apart)
    assert len(list((folder / "mail").glob("*.html"))) == 2 + 5 + 1 + 1 + 1 + 4
    assert len(list((folder / "mail").glob("*.txt"))) == 2 + 5 + 1 + 1 + 1 + 4
    # daily CSVs, report PDFs, the empty XLSX, the aging PDF, the board's
    assert simulated.delivery_files == DAYS + 5 + 1 + 1 + 1


def test_the_monthly_aging_report_is_delivered_from_the_latest_published_period_with_its_basis(simulated):
    # The 2nd of April, 09:00 Berlin: the latest published aging month is March, version 1, now captured
    (delivered,) = simulated.snapshot_deliveries
    assert (delivered["name"], delivered["state"], delivered["snapshot_type"], delivered["period"],
            delivered["version"], delivered["choice"], delivered["protection"], delivered["version_changed"]) == (
        "Monthly receivables aging", "succeeded", "ar_aging", "2027-03", 1, "latest", "captured", False)
    assert delivered["occurrence_at"] == datetime(2027, 4, 2, 7, tzinfo=UTC)
    assert datetime.fromisoformat(delivered["published_at"]) < delivered["occurrence_at"]


def test_owners_are_told_with_one_digest_and_the_departed_owners_schedules_are_handed_off(simulated):
    # The deactivated owner's pause reaches the admin (the workspace asks for copies); the
    # secretary's departure pauses both board schedules as ownerless: two notices, one digest;
    # London's accountant hears of the roll's first refusal, and of its pause four days later
    notices = {(r["kind"], r["audience"], r["reason"]): (r["n"], r["mailed"]) for r in simulated.notices}
    assert notices == {("schedule_paused", "admin", "source_access_lost"): (1, 1),
                       ("schedule_ownerless", "admin", "ownerless"): (2, 2),
                       ("schedule_failed", "owner", "outside_calendar_coverage"): (1, 1),
                       ("schedule_paused", "owner", "consecutive_failures"): (1, 1)}
    assert sorted(m["notices"] for m in simulated.notice_messages) == [1, 1, 1, 2]
    ownerless = {r["name"]: (r["status"], r["pause_reason"], r["why"]) for r in simulated.ownerless}
    assert ownerless == {"Board members list": ("paused", "ownerless", "left_workspace"),
                         "Board report": ("active", None, "left_workspace")}
    # The summary names people by display name, never by user id
    assert simulated.hand_off == ["2027-03-07 09:00 UTC Bea Board left: their schedules paused as ownerless",
                                  "2027-03-08 09:00 UTC Ada Admin (the admin) reassigned Board report to Ana Analyst "
                                  "and resumed it"]
    assert {r["name"]: r["owner"] for r in simulated.ownerless} == {"Board members list": "Bea Board",
                                                                    "Board report": "Ana Analyst"}


def test_message_states_show_the_bounce_the_complaint_the_suppression_and_the_opt_out(simulated):
    from rich.console import Console

    states = {(r["state"], r["kind"]): r["n"] for r in simulated.delivery["message_states"]}
    # SES's events for every message sent: six delivered, one bounced, one complained
    # (its delivery event arrived after the complaint and did not overwrite it); and
    # delivered, the aging and board reports and the four owner notice e-mails (their
    # outbox rows have no run: their states are kept all the same)
    assert states == {("delivered", ""): 6 + 2 + 4, ("bounced", "Permanent"): 1, ("complained", "abuse"): 1}
    assert sum(1 for r in simulated.delivery["notice_message_states"] if r["state"] == "delivered") == 4
    assert sorted(r["reason"] for r in simulated.delivery["suppressions"]) == ["bounced", "complained"]
    assert [r["name"] for r in simulated.delivery["opt_outs"]] == ["Daily open invoices"]
    console = Console(width=200, record=True)
    print_summary(simulated, console)
    text = console.export_text()
    assert "Message states (SES events)" in text
    assert "Suppressed addresses" in text and "Opt-outs (one click)" in text
    assert "Owner notices by kind: schedule_failed 1, schedule_ownerless 2, schedule_paused 2" in text
    assert "Lena Ledger" in text
    # People by display name (the opt-out's, the digest's): no user id in the summary
    assert "sample-7-" not in text and "sim-board-secretary" not in text
