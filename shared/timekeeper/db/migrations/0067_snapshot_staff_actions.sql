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

-- A range request: one staff request over a month range of one or several workspaces plans
-- many runs; each carries the group's id, so the group's progress is one indexed read.
ALTER TABLE snapshot_runs ADD COLUMN request_group uuid;
CREATE INDEX snapshot_runs_request_group ON snapshot_runs (request_group) WHERE request_group IS NOT NULL;

-- Staff choose workspaces by name: the directory's names, ids, zones and states (nothing
-- else), filtered by a part of the name or by ids, at most 1000 rows, by name.
CREATE FUNCTION snapshot_staff_workspaces(p_search text, p_ids uuid[], p_limit integer)
RETURNS TABLE (id uuid, name text, timezone text, status text, snapshots_enabled boolean, created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT w.id, w.name, w.timezone, w.status, w.snapshots_enabled, w.created_at
      FROM workspaces w
     WHERE (p_ids IS NULL OR w.id = ANY(p_ids))
       AND (p_search IS NULL OR strpos(lower(w.name), lower(p_search)) > 0)
     ORDER BY lower(w.name), w.id
     LIMIT least(greatest(p_limit, 0), 1000)
$$;

-- A range request's runs across workspaces, with each workspace's name (at most 2000).
CREATE FUNCTION snapshot_request_group_runs(p_group uuid)
RETURNS TABLE (id uuid, workspace_id uuid, workspace_name text, timezone text, owner text, snapshot_type text,
               period date, version integer, mode text, state text, is_current boolean, attempts integer,
               failure_code text, reason text, requested_by text, created_at timestamptz,
               published_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.id, r.workspace_id, w.name, w.timezone, r.owner, r.snapshot_type, r.period, r.version, r.mode,
           r.state, r.is_current, r.attempts, r.failure_code, r.reason, r.requested_by, r.created_at,
           r.published_at
      FROM snapshot_runs r
      JOIN workspaces w ON w.id = r.workspace_id
     WHERE r.request_group = p_group
     ORDER BY lower(w.name), r.workspace_id, r.owner, r.snapshot_type, r.period
     LIMIT 2000
$$;

REVOKE ALL ON FUNCTION snapshot_staff_workspaces(text, uuid[], integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapshot_request_group_runs(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapshot_staff_workspaces(text, uuid[], integer) TO timekeeper_api;
GRANT EXECUTE ON FUNCTION snapshot_request_group_runs(uuid) TO timekeeper_api;

-- Staff's periods across workspaces, what matters first: each period's newest version,
-- failed first, then running (queued, running, waiting to retry), planned, published,
-- and the rest (skipped, cancelled), the most recently changed first within each;
-- filtered by a part of the workspace's name, owner, type, states and a month range;
-- keyset pages after (rank, updated_at, id); at most 500 rows.
CREATE FUNCTION snapshot_staff_periods(p_search text, p_owner text, p_type text, p_states text[], p_first date,
                                       p_through date, p_after_rank integer, p_after_at timestamptz,
                                       p_after_id uuid, p_limit integer)
RETURNS TABLE (id uuid, workspace_id uuid, workspace_name text, timezone text, owner text, snapshot_type text,
               period date, version integer, state text, is_current boolean, protection text, failure_code text,
               updated_at timestamptz, published_at timestamptz, rank integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT * FROM (
        SELECT r.id, r.workspace_id, w.name, w.timezone, r.owner, r.snapshot_type, r.period, r.version, r.state,
               r.is_current, r.protection, r.failure_code, r.updated_at, r.published_at,
               CASE WHEN r.state = 'failed' THEN 0 WHEN r.state IN ('queued', 'running', 'retry_wait') THEN 1
                    WHEN r.state = 'planned' THEN 2 WHEN r.state = 'published' THEN 3 ELSE 4 END AS rank
          FROM snapshot_runs r
          JOIN workspaces w ON w.id = r.workspace_id
         WHERE NOT EXISTS (SELECT FROM snapshot_runs n
                            WHERE n.owner = r.owner AND n.snapshot_type = r.snapshot_type
                              AND n.workspace_id = r.workspace_id AND n.period = r.period
                              AND n.version > r.version)
           AND (p_search IS NULL OR strpos(lower(w.name), lower(p_search)) > 0)
           AND (p_owner IS NULL OR r.owner = p_owner)
           AND (p_type IS NULL OR r.snapshot_type = p_type)
           AND (p_states IS NULL OR r.state = ANY(p_states))
           AND (p_first IS NULL OR r.period >= p_first)
           AND (p_through IS NULL OR r.period <= p_through)
    ) x
     WHERE p_after_rank IS NULL OR x.rank > p_after_rank
        OR (x.rank = p_after_rank AND (x.updated_at < p_after_at OR (x.updated_at = p_after_at AND x.id > p_after_id)))
     ORDER BY x.rank, x.updated_at DESC, x.id
     LIMIT least(greatest(p_limit, 0), 500)
$$;

REVOKE ALL ON FUNCTION snapshot_staff_periods(text, text, text, text[], date, date, integer, timestamptz, uuid,
                                              integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapshot_staff_periods(text, text, text, text[], date, date, integer, timestamptz, uuid,
                                                 integer) TO timekeeper_api;
