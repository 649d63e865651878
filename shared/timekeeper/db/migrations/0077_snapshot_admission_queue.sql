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
