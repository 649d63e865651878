-- Operators' actions on one run: retry now, cancel a queued run, settle a stuck one as
-- failed, each with its actor and reason, kept beside the run's history (tenant data:
-- the workspace policy applies; the API inserts and reads, never changes or deletes).
-- A dead-letter message deleted with a reason is recorded in operations_actions (a queue
-- has no workspace). PostgreSQL 15 compatible.
CREATE TABLE schedule_run_actions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        uuid NOT NULL REFERENCES schedule_runs (id),
    schedule_id   uuid NOT NULL REFERENCES schedules (id),
    workspace_id  uuid NOT NULL,
    action        text NOT NULL CHECK (action IN ('retry', 'cancel', 'fail')),
    actor         text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    reason        text NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    detail        jsonb NOT NULL DEFAULT '{}',
    at            timestamptz NOT NULL
);
CREATE INDEX schedule_run_actions_run_idx ON schedule_run_actions (run_id, id);
SELECT timekeeper_enable_tenant_rls('schedule_run_actions');
GRANT SELECT, INSERT ON schedule_run_actions TO timekeeper_api;

-- A run's page reads the history events naming the run (few: releases, re-offers, a
-- failure's settlement) by the run, not through its schedule's whole history.
CREATE INDEX schedule_events_run_idx ON schedule_events (run_id) WHERE run_id IS NOT NULL;

-- Operations actions also record a dead-letter message deleted or redriven alone.
ALTER TABLE operations_actions DROP CONSTRAINT operations_actions_action_check;
ALTER TABLE operations_actions ADD CONSTRAINT operations_actions_action_check
    CHECK (action IN ('redrive', 'resume', 'erase', 'redrive_message', 'delete_message'));

-- A run's workspace, for staff opening a run of any workspace by its id: the one narrow
-- way through the wall for it (SECURITY DEFINER, one row by primary key, the workspace id
-- only; executable by the API's login only). The API then enters that workspace.
CREATE FUNCTION operations_run_workspace(p_run_id uuid) RETURNS uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.workspace_id FROM schedule_runs r WHERE r.id = p_run_id
$$;
REVOKE ALL ON FUNCTION operations_run_workspace(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operations_run_workspace(uuid) TO timekeeper_api;

-- An operator settling a stuck scheduled run as failed settles it as the consumer does: the
-- failure notice or pause notice it may raise goes to the owner notifications' outbox.
GRANT SELECT, INSERT ON schedule_notifications TO timekeeper_api;
