-- Staff find their range requests again: the latest range requests across workspaces,
-- newest first, each with its type, kind, reason, requester, month span, how many
-- workspaces and runs it planned and how many of them are done (published, failed,
-- skipped or cancelled). And the staff period listing (0077's function, same order and
-- filters) also answers a skipped period's reason, as it answers a failed one's code.
-- PostgreSQL 15 compatible.
--
-- The API's login reads one workspace at a time (row security); like the range's own
-- progress (snapshot_request_group_runs, 0067) this is a narrow SECURITY DEFINER read,
-- executable by the API's login only, at most 200 requests.
CREATE FUNCTION snapshot_staff_range_requests(p_limit integer)
RETURNS TABLE (group_id uuid, requested_at timestamptz, requested_by text, owner text, snapshot_type text,
               mode text, reason text, first_period date, last_period date, workspaces integer, runs integer,
               done integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.request_group, min(r.created_at), min(r.requested_by), min(r.owner), min(r.snapshot_type),
           min(r.mode), min(r.reason), min(r.period), max(r.period), count(DISTINCT r.workspace_id)::integer,
           count(*)::integer,
           count(*) FILTER (WHERE r.is_current OR r.state IN ('published', 'failed', 'skipped', 'cancelled'))::integer
      FROM snapshot_runs r
     WHERE r.request_group IS NOT NULL
     GROUP BY r.request_group
     ORDER BY min(r.created_at) DESC, r.request_group
     LIMIT least(greatest(p_limit, 0), 200)
$$;

REVOKE ALL ON FUNCTION snapshot_staff_range_requests(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapshot_staff_range_requests(integer) TO timekeeper_api;

-- The staff period listing with each period's skip reason (its answer gains a column: the
-- function is dropped and made again, its grant with it).
DROP FUNCTION snapshot_staff_periods(text, text, text, text[], date, date, integer, timestamptz, uuid, integer);

CREATE FUNCTION snapshot_staff_periods(p_search text, p_owner text, p_type text, p_states text[],
                                                  p_first date, p_through date, p_after_rank integer,
                                                  p_after_at timestamptz, p_after_id uuid, p_limit integer)
RETURNS TABLE (id uuid, workspace_id uuid, workspace_name text, timezone text, owner text, snapshot_type text,
               period date, version integer, state text, is_current boolean, protection text, failure_code text,
               updated_at timestamptz, published_at timestamptz, rank integer, skip_reason text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.id, r.workspace_id, w.name, w.timezone, r.owner, r.snapshot_type, r.period, r.version, r.state,
           r.is_current, r.protection, r.failure_code, r.updated_at, r.published_at,
           (CASE WHEN r.state = 'failed' THEN 0 WHEN r.state IN ('queued', 'running', 'retry_wait') THEN 1
                 WHEN r.state = 'planned' THEN 2 WHEN r.state = 'published' THEN 3 ELSE 4 END) AS rank,
           r.skip_reason
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

REVOKE ALL ON FUNCTION snapshot_staff_periods(text, text, text, text[], date, date, integer, timestamptz, uuid, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapshot_staff_periods(text, text, text, text[], date, date, integer, timestamptz, uuid, integer) TO timekeeper_api;
