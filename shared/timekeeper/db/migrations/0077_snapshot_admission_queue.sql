-- What a planned snapshot run waits for, for staff reading its period: its owner's runs
-- in flight (queued or running, every workspace: admission's cap counts them all), the
-- backfills among them, and the runs of its lane that admission takes before it (the
-- oldest first: created, then month, then id, as the `waiting` query orders). Counts only:
-- no other workspace's rows leave the function. NULL when there is no such run.
CREATE FUNCTION snapshot_admission_queue(p_run uuid)
RETURNS TABLE (in_flight integer, backfills_in_flight integer, ahead integer, backfill_active boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT (SELECT count(*)::integer FROM snapshot_runs f
             WHERE f.owner = r.owner AND f.state IN ('queued', 'running')),
           (SELECT count(*)::integer FROM snapshot_runs f
             WHERE f.owner = r.owner AND f.state IN ('queued', 'running') AND f.mode = 'backfill'),
           (SELECT count(*)::integer FROM snapshot_runs w
             WHERE w.owner = r.owner AND w.state IN ('planned', 'retry_wait')
               AND (w.mode = 'backfill') = (r.mode = 'backfill')
               AND (w.created_at, w.period, w.id) < (r.created_at, r.period, r.id)),
           EXISTS (SELECT FROM snapshot_runs b
                    WHERE b.owner = r.owner AND b.mode = 'backfill'
                      AND b.state IN ('planned', 'retry_wait', 'queued', 'running'))
      FROM snapshot_runs r
     WHERE r.id = p_run
$$;

REVOKE ALL ON FUNCTION snapshot_admission_queue(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapshot_admission_queue(uuid) TO timekeeper_api;

-- Staff's periods across workspaces (0067's function, same signature and answer), read in
-- the listing's order through an index instead of ranking every run: the rank (failed,
-- in progress, planned, published, the rest) is an expression the index holds, so the
-- first page reads about its own rows (each probed for a newer version) and stops.
CREATE INDEX snapshot_runs_staff_order ON snapshot_runs (
    (CASE WHEN state = 'failed' THEN 0 WHEN state IN ('queued', 'running', 'retry_wait') THEN 1
          WHEN state = 'planned' THEN 2 WHEN state = 'published' THEN 3 ELSE 4 END),
    updated_at DESC, id);

CREATE OR REPLACE FUNCTION snapshot_staff_periods(p_search text, p_owner text, p_type text, p_states text[],
                                                  p_first date, p_through date, p_after_rank integer,
                                                  p_after_at timestamptz, p_after_id uuid, p_limit integer)
RETURNS TABLE (id uuid, workspace_id uuid, workspace_name text, timezone text, owner text, snapshot_type text,
               period date, version integer, state text, is_current boolean, protection text, failure_code text,
               updated_at timestamptz, published_at timestamptz, rank integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.id, r.workspace_id, w.name, w.timezone, r.owner, r.snapshot_type, r.period, r.version, r.state,
           r.is_current, r.protection, r.failure_code, r.updated_at, r.published_at,
           (CASE WHEN r.state = 'failed' THEN 0 WHEN r.state IN ('queued', 'running', 'retry_wait') THEN 1
                 WHEN r.state = 'planned' THEN 2 WHEN r.state = 'published' THEN 3 ELSE 4 END) AS rank
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
       AND (p_after_rank IS NULL
            OR (CASE WHEN r.state = 'failed' THEN 0 WHEN r.state IN ('queued', 'running', 'retry_wait') THEN 1
                     WHEN r.state = 'planned' THEN 2 WHEN r.state = 'published' THEN 3 ELSE 4 END) > p_after_rank
            OR ((CASE WHEN r.state = 'failed' THEN 0 WHEN r.state IN ('queued', 'running', 'retry_wait') THEN 1
                      WHEN r.state = 'planned' THEN 2 WHEN r.state = 'published' THEN 3 ELSE 4 END) = p_after_rank
                AND (r.updated_at < p_after_at OR (r.updated_at = p_after_at AND r.id > p_after_id))))
     ORDER BY (CASE WHEN r.state = 'failed' THEN 0 WHEN r.state IN ('queued', 'running', 'retry_wait') THEN 1
                    WHEN r.state = 'planned' THEN 2 WHEN r.state = 'published' THEN 3 ELSE 4 END),
              r.updated_at DESC, r.id
     LIMIT least(greatest(p_limit, 0), 500)
$$;
