-- Every attempt of a run, not only its latest. PostgreSQL 15 compatible.
--
-- The run row keeps its current attempt: `attempts` (its number), and for a run started
-- one by one the instant it started (`attempt_started_at`) and the receive of the message
-- that started it (`attempt_receive_count`), written by the start statement it already
-- runs (a batch's first attempt writes neither: its start is the run's started_at).
-- An attempt is copied into schedule_run_attempts only when another supersedes it: the
-- failure that gives the lease back for a retry writes its attempt (ended `retried`, with
-- its error) in that same statement, and the start that takes over a lease that ran out
-- writes the stalled attempt (ended `taken_over`) unless it was written already. A run
-- that settles on its first attempt writes no row here. The rows go with their run (the
-- retention sweep's delete cascades). Tenant data: the workspace policy applies; the API
-- only reads.
ALTER TABLE schedule_runs ADD COLUMN attempt_started_at timestamptz,
                          ADD COLUMN attempt_receive_count integer;

CREATE TABLE schedule_run_attempts (
    run_id         uuid NOT NULL REFERENCES schedule_runs (id) ON DELETE CASCADE,
    attempt        integer NOT NULL CHECK (attempt >= 1),
    workspace_id   uuid NOT NULL,
    receive_count  integer,
    started_at     timestamptz,
    ended_at       timestamptz NOT NULL,
    ended          text NOT NULL CHECK (ended IN ('retried', 'taken_over')),
    error          text,
    PRIMARY KEY (run_id, attempt)
);
SELECT timekeeper_enable_tenant_rls('schedule_run_attempts');
GRANT SELECT ON schedule_run_attempts TO timekeeper_api;
