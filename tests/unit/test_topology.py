"""The topology's own rules: a dispatcher pass ends inside its function timeout, and the
connection budget counts every function that holds a database connection."""

from __future__ import annotations

import dataclasses

import pytest

from timekeeper import topology
from timekeeper.topology import ACCOUNTING, PIPELINES, connection_budget


def test_a_dispatcher_whose_last_claim_could_outlive_its_function_is_refused():
    # Given the former numbers: a 40 s budget and a 60 s function, with a 15 s statement
    # timeout, 5 s to connect and 5 s to publish
    # When such a pipeline is described
    # Then the topology refuses it, naming every term
    with pytest.raises(ValueError, match="time budget 40 s .* statement timeout .* under its timeout 60 s"):
        dataclasses.replace(ACCOUNTING, dispatcher_time_budget_s=40)


def test_every_pipeline_ends_its_pass_before_its_timeout():
    for pipeline in PIPELINES.values():
        worst = (topology.CONNECT_TIMEOUT_S + pipeline.dispatcher_time_budget_s
                 + topology.WORKER_STATEMENT_TIMEOUT_S + topology.DISPATCHER_PUBLISH_ALLOWANCE_S)
        assert pipeline.dispatcher_worst_case_s == worst < pipeline.dispatcher_timeout_s


def test_the_connection_budget_sums_consumers_dispatchers_api_migration_and_renderers():
    # Given two pipelines with different consumer concurrency and dispatcher partitions
    other = dataclasses.replace(ACCOUNTING, name="other", owner="other", dispatch_partitions=3, claim_workers=1,
                                consumer=dataclasses.replace(ACCOUNTING.consumer, queue_name="timekeeper-other-runs",
                                                             max_concurrency=7))
    # When the budget is derived
    budget = connection_budget({"accounting": ACCOUNTING, "other": other}, {})
    # Then each function's concurrency bound is one connection: one per claim worker of
    # each dispatcher partition (accounting's two workers, the other pipeline's one)
    assert ACCOUNTING.claim_workers == 2
    dispatchers = ACCOUNTING.dispatch_partitions * 2 + 3
    assert (budget.consumers, budget.dispatchers) == (ACCOUNTING.consumer.max_concurrency + 7, dispatchers)
    assert budget.api == topology.API_RESERVED_CONCURRENCY and budget.migration == topology.MIGRATION_CONNECTIONS
    assert budget.snapshots == 2 + topology.SNAPSHOTS.consumer.max_concurrency  # planner, dispatcher, run jobs
    assert budget.renderers == topology.REPORT_RENDERER.reserved_concurrency
    assert budget.downloads == topology.DOWNLOADS.reserved_concurrency == topology.DOWNLOADS_RESERVED_CONCURRENCY
    assert budget.message_events == topology.MESSAGE_EVENTS.max_concurrency  # one connection each
    assert budget.total == (ACCOUNTING.consumer.max_concurrency + 7 + dispatchers + budget.api + budget.migration
                            + budget.snapshots + budget.renderers + budget.downloads + budget.message_events)


def test_the_connection_budget_counts_the_work_queue_consumers():
    # Given the accounting pipeline and the exports queue
    from timekeeper.topology import EXPORTS, WORK_QUEUES

    # When the deployment's budget is derived
    budget = connection_budget({"accounting": ACCOUNTING}, {"exports": EXPORTS})
    # Then the export consumers' concurrency is counted with the pipelines' consumers, and the default counts it too
    assert budget.consumers == ACCOUNTING.consumer.max_concurrency + EXPORTS.consumer.max_concurrency
    assert connection_budget().consumers == (
        sum(p.consumer.max_concurrency * p.consumer.connections for p in PIPELINES.values())
        + sum(q.consumer.max_concurrency for q in WORK_QUEUES.values()))


def test_the_exports_queue_numbers():
    from timekeeper.topology import EXPORTS

    assert EXPORTS.consumer.visibility_timeout_s == 6 * EXPORTS.consumer.timeout_s == 1800
    c = EXPORTS.consumer
    assert (c.max_receive_count, c.batch_size, c.max_concurrency) == (3, 1, 2)
    assert (EXPORTS.consumer.queue_name, EXPORTS.consumer.dlq_name) == ("timekeeper-exports", "timekeeper-exports-dlq")
    with pytest.raises(ValueError):
        dataclasses.replace(EXPORTS.consumer, max_receive_count=1)
    with pytest.raises(ValueError):
        dataclasses.replace(EXPORTS.consumer, timeout_s=901)


def test_each_pipeline_composes_its_queue_consumer_under_its_own_name():
    # Given a pipeline, a work queue and the snapshot pipeline whose consumer names another queue
    from timekeeper.topology import EXPORTS, SNAPSHOTS

    # Then each is refused, naming the queue it must compose
    with pytest.raises(ValueError, match="timekeeper-accounting-runs"):
        dataclasses.replace(ACCOUNTING, consumer=dataclasses.replace(ACCOUNTING.consumer,
                                                                     queue_name="timekeeper-other-runs"))
    with pytest.raises(ValueError, match="'timekeeper-exports'"):
        dataclasses.replace(EXPORTS, consumer=dataclasses.replace(EXPORTS.consumer, queue_name="timekeeper-other"))
    with pytest.raises(ValueError, match="timekeeper-snapshots-jobs"):
        dataclasses.replace(SNAPSHOTS, consumer=dataclasses.replace(SNAPSHOTS.consumer, queue_name="timekeeper-x"))
    # And the snapshot run job must hold every admitted run
    with pytest.raises(ValueError, match="every admitted run"):
        dataclasses.replace(SNAPSHOTS, consumer=dataclasses.replace(SNAPSHOTS.consumer, max_concurrency=3))


def test_claim_workers_are_one_or_two():
    for count in (0, 3):
        with pytest.raises(ValueError, match="claim_workers"):
            dataclasses.replace(ACCOUNTING, claim_workers=count)


def test_dispatch_partitions_are_bounded():
    # A pipeline runs 1..16 dispatcher partitions; anything else is refused at construction
    for count in (0, topology.MAX_DISPATCH_PARTITIONS + 1):
        with pytest.raises(ValueError, match="dispatch_partitions"):
            dataclasses.replace(ACCOUNTING, dispatch_partitions=count)
    assert list(dataclasses.replace(ACCOUNTING, dispatch_partitions=4).partitions) == [0, 1, 2, 3]


def test_a_pipeline_whose_capped_work_could_take_most_of_its_consumers_is_refused():
    from timekeeper.topology import QUERIES

    # Given the queries pipeline, whose deliveries are capped per workspace
    assert QUERIES.capped_work_kinds and topology.CONSUMERS_PER_CAPPED_RUN == 3
    # When its cap is raised to 2 while it keeps three consumers (one workspace at its cap
    # would leave a single consumer to every other workspace), or its consumers are cut below
    # three times its cap
    # Then the topology refuses it, naming the numbers
    with pytest.raises(ValueError, match="cap of 2 on queries.deliver needs at least 6 consumers .* "
                                         "not max_concurrency 3"):
        dataclasses.replace(QUERIES, max_in_flight_per_workspace=2)
    with pytest.raises(ValueError, match="needs at least 3 consumers"):
        dataclasses.replace(QUERIES, consumer=dataclasses.replace(QUERIES.consumer, max_concurrency=2))
    # And three consumers per unit of the cap are accepted, as is any cap without capped work kinds
    assert dataclasses.replace(QUERIES, max_in_flight_per_workspace=2, consumer=dataclasses.replace(
        QUERIES.consumer, max_concurrency=6)).max_in_flight_per_workspace == 2
    assert dataclasses.replace(ACCOUNTING, max_in_flight_per_workspace=5).capped_work_kinds == ()


def test_every_pipeline_with_capped_work_leaves_two_thirds_of_its_consumers_to_the_others():
    for pipeline in PIPELINES.values():
        if pipeline.capped_work_kinds:
            n, c = pipeline.consumer.max_concurrency, pipeline.max_in_flight_per_workspace
            # others' capped work drains at most n / (n - c) = 1.5 times slower than alone
            assert n >= 3 * c and n / (n - c) <= 1.5, pipeline.name
