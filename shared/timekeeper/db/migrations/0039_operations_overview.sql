-- The operations overview: staff read what needs attention in every workspace. The API's
-- login is walled to one workspace by row-level security; these two functions are the one
-- narrow way through the wall: SECURITY DEFINER (they run as the tables' owner, whom the
-- policies do not restrict), a fixed statement each, a few columns, at most 500 rows, and
-- executable by the API's login only. Each reads through a partial index, so its cost does
-- not grow with the tables. PostgreSQL 15 compatible.

-- Paused schedules and schedules whose last runs failed, most recently changed first.
CREATE INDEX schedules_attention_idx ON schedules (updated_at DESC, id)
    WHERE deleted_at IS NULL AND (status = 'paused' OR consecutive_failures > 0);

CREATE FUNCTION operations_schedules_needing_attention(p_limit integer)
RETURNS TABLE (id uuid, workspace_id uuid, owner text, work_kind text, name text, status text,
               pause_reason text, consecutive_failures integer, last_outcome text,
               last_run_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT s.id, s.workspace_id, s.owner, s.work_kind, s.name, s.status, s.pause_reason,
           s.consecutive_failures, s.last_outcome, s.last_run_at, s.updated_at
      FROM schedules s
     WHERE s.deleted_at IS NULL AND (s.status = 'paused' OR s.consecutive_failures > 0)
     ORDER BY s.updated_at DESC, s.id
     LIMIT least(greatest(p_limit, 0), 500)
$$;

-- One owner's runs that wait too long: accepted by the queue before p_published_before and
-- never started (their message is lost or its consumer failing), released or never
-- published since before p_published_before (waiting for a re-offer), and started runs
-- whose lease ended before p_now (their execution died; the next receive takes them over).
CREATE FUNCTION operations_stranded_runs(p_owner text, p_now timestamptz, p_published_before timestamptz,
                                         p_limit integer)
RETURNS TABLE (id uuid, schedule_id uuid, workspace_id uuid, owner text, work_kind text, state text,
               why text, occurrence_at timestamptz, queued_at timestamptz, published_at timestamptz,
               lease_until timestamptz, attempts integer, offer_count integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    (SELECT r.id, r.schedule_id, r.workspace_id, r.owner, r.work_kind, r.state, 'not_started',
            r.occurrence_at, r.queued_at, r.published_at, r.lease_until, r.attempts, r.offer_count
       FROM schedule_runs r
      WHERE r.owner = p_owner AND r.state = 'queued' AND r.published_at IS NOT NULL
        AND r.published_at < p_published_before
      ORDER BY r.published_at LIMIT least(greatest(p_limit, 0), 500))
    UNION ALL
    (SELECT r.id, r.schedule_id, r.workspace_id, r.owner, r.work_kind, r.state, 'not_published',
            r.occurrence_at, r.queued_at, r.published_at, r.lease_until, r.attempts, r.offer_count
       FROM schedule_runs r
      WHERE r.owner = p_owner AND r.state = 'queued' AND r.published_at IS NULL
        AND coalesce(r.offered_at, r.queued_at) < p_published_before
      ORDER BY r.offered_at NULLS FIRST LIMIT least(greatest(p_limit, 0), 500))
    UNION ALL
    (SELECT r.id, r.schedule_id, r.workspace_id, r.owner, r.work_kind, r.state, 'lease_expired',
            r.occurrence_at, r.queued_at, r.published_at, r.lease_until, r.attempts, r.offer_count
       FROM schedule_runs r
      WHERE r.owner = p_owner AND r.state = 'running' AND r.lease_until < p_now
      ORDER BY r.lease_until LIMIT least(greatest(p_limit, 0), 500))
$$;

REVOKE ALL ON FUNCTION operations_schedules_needing_attention(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION operations_stranded_runs(text, timestamptz, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operations_schedules_needing_attention(integer) TO timekeeper_api;
GRANT EXECUTE ON FUNCTION operations_stranded_runs(text, timestamptz, timestamptz, integer) TO timekeeper_api;
