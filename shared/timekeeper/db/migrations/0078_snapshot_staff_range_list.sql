-- Staff find their range requests again: the latest range requests across workspaces,
-- newest first, each with its type, kind, reason, requester, month span, how many
-- workspaces and runs it planned and how many of them are done (published, failed,
-- skipped or cancelled). PostgreSQL 15 compatible.
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
