-- name: start_runs
-- Start a batch's runs in one statement, committed before any handler runs: queued ->
-- running under a lease, attempts + 1 (an expired lease may be taken over). With
-- first_only, only runs that never had an attempt start (the others start one by one).
-- Rows are locked in id order, as every statement that updates several runs does (the
-- dispatcher recording a publication, a batch's settlement), so they never deadlock; a
-- lock held elsewhere is short (no transaction holds a run's row while a handler runs),
-- so the start waits for it rather than skip the run and delay it by a visibility timeout.
-- The statement commits on its own without waiting for its WAL flush (the `relaxed` CTE:
-- a database crash may forget a start, at the cost of one uncounted attempt).
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true)
), lockable AS (
    SELECT id FROM schedule_runs
     WHERE id = ANY(%(ids)b::uuid[])
       AND (state = 'queued' OR (state = 'running' AND lease_until <= %(now)s))
       AND (attempts = 0 OR NOT %(first_only)s)
     ORDER BY id
       FOR UPDATE
)
UPDATE schedule_runs AS r
   SET state = 'running', attempts = r.attempts + 1, lease_until = %(lease_until)s,
       started_at = COALESCE(r.started_at, %(now)s)
  FROM schedules AS s
 WHERE r.id IN (SELECT id FROM lockable)
   AND s.id = r.schedule_id
   AND EXISTS (SELECT FROM relaxed)
RETURNING r.id, r.schedule_id, r.workspace_id, r.owner, r.work_kind, r.occurrence_at, r.occurrence_local,
          r.trigger, r.requested_by, r.attempts, s.subject_id, s.deleted_at

-- name: run_state
SELECT state, lease_until FROM schedule_runs WHERE id = %(id)s

-- name: release_lease
-- An unexpected fault on a non-final receive: give the lease back so the redelivery can
-- start at once, and keep the error for the history.
UPDATE schedule_runs
   SET lease_until = %(now)s, error = %(error)s
 WHERE id = %(run_id)s AND state = 'running' AND attempts = %(attempt)s

-- name: capped_in_flight
-- The runs of the capped work kinds that the run's workspace has running under a live
-- lease (the run itself not counted), after taking the workspace's cap lock for the rest
-- of the transaction: two consumers starting runs of one workspace count one after the
-- other, so the cap holds. The owner's running runs are few (one a consumer at most):
-- the partial index of running runs by owner finds them.
WITH target AS (
    SELECT workspace_id, owner FROM schedule_runs WHERE id = %(id)s
), locked AS (
    SELECT pg_advisory_xact_lock(hashtextextended('timekeeper.capped:' || workspace_id::text, 0)) FROM target
)
SELECT count(*) AS running
  FROM schedule_runs AS o, target AS t
 WHERE EXISTS (SELECT FROM locked)
   AND o.owner = t.owner AND o.state = 'running' AND o.lease_until > %(now)s
   AND o.workspace_id = t.workspace_id AND o.work_kind = ANY(%(kinds)s) AND o.id <> %(id)s
