-- The operations overview's overdue snapshot periods: every workspace's periods that are
-- not published (nor skipped) a grace after their local month end, for staff. The API's
-- login is walled to one workspace by row-level security; like the two functions of
-- 0039_operations_overview.sql this is one narrow way through the wall: SECURITY DEFINER,
-- one fixed read-only statement, a few columns, at most 500 rows (and the total count),
-- executable by the API's login only. PostgreSQL 15 compatible.
--
-- The rule is the planner's (`overdue_periods` of timekeeper/snapshots/ledger.sql, whose
-- alarm counts the same periods): the months that SHOULD exist (since the workspace was
-- created, within the horizon, up to the last completed local month, disabled workspaces
-- excepted) that have neither a current version nor a skip row, their month end plus the
-- grace passed. The caller passes the types, the horizon and the grace (the ledger's
-- constants), so there is one definition of each. Unlike the planner's statement it never
-- widens the planner's watermark (it writes nothing); it does skip the watermark's settled
-- range, so its cost grows with the workspaces and the horizon, not with the history.
CREATE FUNCTION operations_overdue_periods(p_owners text[], p_types text[], p_now timestamptz,
                                           p_horizon integer, p_grace interval, p_limit integer)
RETURNS TABLE (workspace_id uuid, workspace_name text, timezone text, owner text, snapshot_type text,
               period date, status text, run_id uuid, version integer, failure_code text,
               due_at timestamptz, total bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH types AS (
        SELECT * FROM unnest(p_owners, p_types) AS t(owner, snapshot_type)
    ), windows AS (
        SELECT w.id AS workspace_id, w.name, w.timezone, t.owner, t.snapshot_type,
               greatest(date_trunc('month', w.created_at AT TIME ZONE w.timezone),
                        date_trunc('month', p_now AT TIME ZONE w.timezone) - make_interval(months => p_horizon)
                       )::date AS first_month,
               (date_trunc('month', p_now AT TIME ZONE w.timezone) - interval '1 month')::date AS last_month,
               k.settled_from, k.settled_through
          FROM workspaces w
         CROSS JOIN types t
          LEFT JOIN snapshot_planner_watermarks k
            ON k.workspace_id = w.id AND k.owner = t.owner AND k.snapshot_type = t.snapshot_type
         WHERE w.status <> 'disabled'
    ), overdue AS (
        SELECT u.workspace_id, u.name, u.timezone, u.owner, u.snapshot_type, m.period::date AS period,
               ((m.period + interval '1 month')::timestamp AT TIME ZONE u.timezone) + p_grace AS due_at
          FROM windows u
         CROSS JOIN LATERAL generate_series(u.first_month, u.last_month, interval '1 month') AS m(period)
         WHERE u.first_month <= u.last_month
           AND (u.settled_from IS NULL OR m.period < u.settled_from OR m.period > u.settled_through)
           AND NOT EXISTS (SELECT FROM snapshot_runs r
                            WHERE r.owner = u.owner AND r.snapshot_type = u.snapshot_type
                              AND r.workspace_id = u.workspace_id AND r.period = m.period
                              AND (r.is_current OR r.state = 'skipped'))
           AND ((m.period + interval '1 month')::timestamp AT TIME ZONE u.timezone) + p_grace <= p_now
    )
    SELECT o.workspace_id, o.name, o.timezone, o.owner, o.snapshot_type, o.period,
           coalesce(latest.state, 'missing'), latest.id, latest.version, latest.failure_code, o.due_at,
           count(*) OVER ()
      FROM overdue o
      LEFT JOIN LATERAL (SELECT r.id, r.state, r.version, r.failure_code FROM snapshot_runs r
                          WHERE r.owner = o.owner AND r.snapshot_type = o.snapshot_type
                            AND r.workspace_id = o.workspace_id AND r.period = o.period
                          ORDER BY r.version DESC LIMIT 1) latest ON true
     ORDER BY o.due_at, o.workspace_id, o.owner, o.snapshot_type, o.period
     LIMIT least(greatest(p_limit, 0), 500)
$$;

REVOKE ALL ON FUNCTION operations_overdue_periods(text[], text[], timestamptz, integer, interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operations_overdue_periods(text[], text[], timestamptz, integer, interval, integer)
    TO timekeeper_api;
