-- Staff act on one snapshot version: cancel a waiting request, finalize a published
-- version. PostgreSQL 15 compatible.
--
-- A cancelled run is in the new terminal state `cancelled` (it is no longer active, so a
-- new request of the period may be made; it is not `skipped`, so the period stays overdue
-- until a version publishes). Who cancelled it, why and when are kept on the row, as a
-- request's requester and reason are. `finalized` protection existed since 0009 but
-- nothing set it: staff set it on a published version with a reason, kept on the row too.
--
-- The API's login may not update snapshot_runs (0010 grants a lock-only column). These two
-- functions are its only way to make these changes: SECURITY DEFINER, one fixed statement
-- each, bound to the workspace the caller entered (timekeeper_current_workspace(), so
-- another workspace's run matches nothing), executable by the API's login only. Each
-- returns the changed row, or nothing when the run was not in a state that allows it.

ALTER TABLE snapshot_runs DROP CONSTRAINT snapshot_runs_state_check;
ALTER TABLE snapshot_runs ADD CONSTRAINT snapshot_runs_state_check
    CHECK (state IN ('planned', 'queued', 'running', 'retry_wait', 'published', 'failed', 'skipped', 'cancelled'));

ALTER TABLE snapshot_runs
    ADD COLUMN cancelled_at timestamptz,
    ADD COLUMN cancelled_by text,
    ADD COLUMN cancel_reason text,
    ADD COLUMN finalized_at timestamptz,
    ADD COLUMN finalized_by text,
    ADD COLUMN finalize_reason text,
    ADD CONSTRAINT snapshot_runs_cancel_recorded
        CHECK ((state = 'cancelled') = (cancelled_at IS NOT NULL AND cancelled_by IS NOT NULL
                                        AND cancel_reason IS NOT NULL)),
    ADD CONSTRAINT snapshot_runs_finalize_recorded
        CHECK (finalized_at IS NULL OR (protection = 'finalized' AND finalized_by IS NOT NULL
                                        AND finalize_reason IS NOT NULL));

CREATE FUNCTION snapshot_cancel_run(p_run uuid, p_actor text, p_reason text, p_now timestamptz)
RETURNS SETOF snapshot_runs
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    UPDATE snapshot_runs
       SET state = 'cancelled', job_id = NULL, offered_at = NULL, retry_due_at = NULL,
           cancelled_at = p_now, cancelled_by = p_actor, cancel_reason = p_reason, updated_at = p_now
     WHERE id = p_run AND workspace_id = timekeeper_current_workspace() AND state IN ('planned', 'queued')
    RETURNING *
$$;

CREATE FUNCTION snapshot_finalize_run(p_run uuid, p_actor text, p_reason text, p_now timestamptz)
RETURNS SETOF snapshot_runs
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    UPDATE snapshot_runs
       SET protection = 'finalized', finalized_at = p_now, finalized_by = p_actor, finalize_reason = p_reason,
           updated_at = p_now
     WHERE id = p_run AND workspace_id = timekeeper_current_workspace() AND state = 'published'
       AND protection IS DISTINCT FROM 'finalized'
    RETURNING *
$$;

REVOKE ALL ON FUNCTION snapshot_cancel_run(uuid, text, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapshot_finalize_run(uuid, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapshot_cancel_run(uuid, text, text, timestamptz) TO timekeeper_api;
GRANT EXECUTE ON FUNCTION snapshot_finalize_run(uuid, text, text, timestamptz) TO timekeeper_api;
