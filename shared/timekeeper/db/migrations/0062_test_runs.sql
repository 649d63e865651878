-- A delivery's test send: "Send a test to me" is a run of trigger 'test', the Run now path
-- with the requester as its only recipient. PostgreSQL 15 compatible.
--
-- Settlement leaves the schedule as it was for a test run (no failure streak, no last
-- outcome, no pause, no notice; next_due_at is never moved by a manual or test run).
-- The partial index serves the rate limit's counts: a person's test runs of the last hour
-- in their workspace, and a delivery's (schedule_runs_schedule_idx serves the latter).

ALTER TABLE schedule_runs DROP CONSTRAINT schedule_runs_trigger_check;
ALTER TABLE schedule_runs ADD CONSTRAINT schedule_runs_trigger_check
    CHECK (trigger IN ('scheduled', 'manual', 'test'));

CREATE INDEX schedule_runs_test_requester_idx ON schedule_runs (workspace_id, requested_by, queued_at)
    WHERE trigger = 'test';
