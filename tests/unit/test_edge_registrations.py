"""The edge knows no owner: what a pipeline's functions need beyond the generic path is
registered by its owner (the services its work kinds read, the metrics its maintenance
summaries carry) or declared by its topology entry (the people pass, the delivery
history), and the edge applies what is registered."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from timekeeper import observability as obs
from timekeeper.edge import runs
from timekeeper.edge.registries import assemble_work_kinds
from timekeeper.schedules.dispatcher import DispatchSettings, OfferLimits
from timekeeper.topology import ACCOUNTING, NOTICES_PIPELINE, PIPELINES, QUERIES, calls


def test_the_services_a_consumer_gets_are_those_its_owners_work_kinds_declare(monkeypatch):
    # Given the deployment's work kinds, and the edge's builders replaced by markers
    monkeypatch.setattr(runs, "RUN_SERVICES", {"delivery": lambda: "the delivery services"})
    kinds = assemble_work_kinds()
    # Then the queries owner's delivery declares its service and accounting's kinds none
    assert kinds.services(QUERIES.owner) == ("delivery",)
    assert kinds.services(ACCOUNTING.owner) == ()
    # And each pipeline's consumer is given exactly what its owner declared
    assert runs.pipeline_services(QUERIES.name) == {"delivery": "the delivery services"}
    assert runs.pipeline_services(ACCOUNTING.name) == {}


def test_a_maintenance_summary_carries_the_metrics_its_owner_registered():
    kinds = assemble_work_kinds()
    assert kinds.maintenance_metrics(ACCOUNTING.owner, "posting.sweep") == {"failed_waiting": obs.POSTING_JOBS_FAILED}
    assert kinds.maintenance_metrics(ACCOUNTING.owner, "history.retention") == {}


def test_one_pipeline_runs_the_people_pass_and_its_dispatcher_may_mail():
    assert [p.name for p in PIPELINES.values() if p.people_pass] == [NOTICES_PIPELINE] == [QUERIES.name]
    with pytest.raises(ValueError, match="people pass .* SES"):
        dataclasses.replace(ACCOUNTING, people_pass=True, dispatcher_services=calls("sqs", "sns"))


def test_the_dispatcher_settings_are_the_pipelines_numbers():
    # Given a pipeline whose every dispatcher number differs from the accounting pipeline's
    pipeline = dataclasses.replace(QUERIES, claim_batch=150, dispatcher_time_budget_s=25,
                                   unpublished_reoffer_after_s=45, max_publishes=4, failure_pause_threshold=2)
    # Then its dispatcher settings carry each of them, and nothing else
    settings = DispatchSettings.of(pipeline)
    assert (settings.owner, settings.claim_limit, settings.time_budget_s) == ("queries", 150, 25)
    assert settings.limits == OfferLimits(reoffer_after=pipeline.reoffer_after, unpublished_after=timedelta(seconds=45),
                                          max_attempts=pipeline.consumer.max_receive_count, max_publishes=4,
                                          failure_threshold=2)
