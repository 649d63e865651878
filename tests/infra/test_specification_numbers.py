"""The specification's figures, written out literally: each is stated by the workflows the
product implements (scheduled accounting work, scheduled delivery, monthly snapshots), so
an edit of the topology that changes one fails here, in the topology and in the
synthesized templates alike. The other infra tests compare the stacks with the topology,
which an edit of the topology would pass."""

from __future__ import annotations

from datetime import timedelta

from tests.infra.conftest import event_sources_of, functions_by_folder, queue_by_name, rule_targeting
from timekeeper.reporting.delivery import RENDER_POLL_S
from timekeeper.snapshots.jobs import MAX_RETRYABLE_FAILURES
from timekeeper.snapshots.ledger import OVERDUE_GRACE
from timekeeper.topology import ACCOUNTING, QUERIES, SNAPSHOTS


def _function(template, folder):
    return template["Resources"][functions_by_folder(template)[folder]]["Properties"]


def _rule_rate(template, folder):
    _, rule = rule_targeting(template, functions_by_folder(template)[folder])
    return rule["Properties"]["ScheduleExpression"]


def _max_concurrency(template, folder):
    (source,) = event_sources_of(template, functions_by_folder(template)[folder])
    return source["ScalingConfig"]["MaximumConcurrency"]


def test_scheduled_accounting_work(synth):
    template = synth.app_template
    # A claim takes at most two hundred due schedules
    assert ACCOUNTING.claim_batch == 200
    # The dispatcher runs on the minute, one at a time
    assert ACCOUNTING.rule_rate_minutes == 1 and _rule_rate(template, "accounting_dispatcher") == "rate(1 minute)"
    assert ACCOUNTING.dispatcher_reserved_concurrency == 1
    assert _function(template, "accounting_dispatcher")["ReservedConcurrentExecutions"] == 1
    # Its consumer's event source permits two concurrent invocations
    assert ACCOUNTING.consumer.max_concurrency == 2 and _max_concurrency(template, "accounting_consumer") == 2
    # Five consecutive recorded failures pause a schedule
    assert ACCOUNTING.failure_pause_threshold == 5


def test_scheduled_delivery(synth):
    template = synth.app_template
    # The dispatcher is single-concurrency; five failures in a row pause the schedule
    assert QUERIES.dispatcher_reserved_concurrency == 1
    assert _function(template, "queries_dispatcher")["ReservedConcurrentExecutions"] == 1
    assert QUERIES.failure_pause_threshold == 5
    # Three delivery consumers, three receives
    assert QUERIES.consumer.max_concurrency == 3 and _max_concurrency(template, "queries_consumer") == 3
    assert QUERIES.consumer.max_receive_count == 3
    _, queue = queue_by_name(template, "timekeeper-queries-runs")
    assert queue["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 3
    # The renderer is polled for up to twelve minutes of the consumer's fifteen-minute receive
    assert RENDER_POLL_S == 12 * 60
    assert QUERIES.consumer.timeout_s == 15 * 60 and _function(template, "queries_consumer")["Timeout"] == 900
    assert RENDER_POLL_S < QUERIES.consumer.timeout_s


def test_monthly_snapshots(synth):
    template = synth.app_template
    # The planner checks completed months every fifteen minutes
    assert SNAPSHOTS.planner_rate_minutes == 15 and _rule_rate(template, "snapshot_planner") == "rate(15 minutes)"
    # The default admission cap is four with one backfill; the run jobs can hold every admitted run
    assert (SNAPSHOTS.admission_cap, SNAPSHOTS.backfill_lane) == (4, 1)
    assert _max_concurrency(template, "snapshot_run_job") == 4
    # A queued run with no job started is re-offered after five minutes
    assert SNAPSHOTS.reoffer_after_s == 5 * 60
    # The fourth retryable failure is final
    assert MAX_RETRYABLE_FAILURES == 4
    # A period not published within twenty-four hours of month end is overdue (the ledger's
    # rule, which the planner's SnapshotOverdue metric and alarm count)
    assert SNAPSHOTS.overdue_grace_hours == 24 and OVERDUE_GRACE == timedelta(hours=24)
