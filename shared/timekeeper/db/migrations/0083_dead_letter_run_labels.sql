-- A dead-letter queue's page names the run of each message it shows (its schedule's name,
-- the occurrence, the run's state now) with one statement for all of them, whichever
-- workspaces the runs belong to. PostgreSQL 15 compatible.
--
-- Staff read a queue's messages through the API's walled login; this function is a narrow
-- way through the wall, as 0064's operations_run_workspace is for one run: SECURITY
-- DEFINER, one fixed statement by primary key, at most 50 runs (a read's limit), the few
-- columns that name a run for people and whether its workspace is in the directory (where
-- the staff read is recorded); executable by the API's login only.
CREATE FUNCTION operations_run_labels(p_run_ids uuid[])
RETURNS TABLE (id uuid, schedule_id uuid, workspace_id uuid, state text, occurrence_at timestamptz,
               occurrence_local timestamp, schedule_name text, timezone text, in_directory boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.id, r.schedule_id, r.workspace_id, r.state, r.occurrence_at, r.occurrence_local, s.name, s.timezone,
           EXISTS (SELECT FROM workspaces w WHERE w.id = r.workspace_id)
      FROM schedule_runs r
      JOIN schedules s ON s.id = r.schedule_id
     WHERE r.id = ANY (p_run_ids[1:50])
$$;
REVOKE ALL ON FUNCTION operations_run_labels(uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operations_run_labels(uuid[]) TO timekeeper_api;
