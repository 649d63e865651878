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

-- name: start_runs_kept
-- start_runs for the runs that start one by one (leased kinds, and any run that had an
-- attempt): the same start, locks and relaxed commit, and the attempt kept. The run keeps
-- its current attempt's start and receive count; a stalled attempt whose lease is taken
-- over is copied to schedule_run_attempts (`superseded`: no row when nothing is taken
-- over). A first attempt started with its batch (start_runs, the hot path, which writes
-- nothing more) keeps neither: its start is the run's started_at, and its receive count is
-- kept if it fails (release_lease).
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true)
), received AS (
    SELECT * FROM unnest(%(ids)b::uuid[], %(receive_counts)b::integer[]) AS c(id, receive_count)
), lockable AS (
    SELECT id, state, attempts, workspace_id, lease_until, started_at, attempt_started_at, attempt_receive_count
      FROM schedule_runs
     WHERE id = ANY(%(ids)b::uuid[])
       AND (state = 'queued' OR (state = 'running' AND lease_until <= %(now)s))
       AND (attempts = 0 OR NOT %(first_only)s)
     ORDER BY id
       FOR UPDATE
), superseded AS (
    -- A lease that ran out is taken over: the stalled attempt is kept (a released one,
    -- which a failure gave back for a retry, was kept by release_lease: not again).
    INSERT INTO schedule_run_attempts (run_id, attempt, workspace_id, receive_count, started_at, ended_at, ended)
    SELECT id, attempts, workspace_id, attempt_receive_count, COALESCE(attempt_started_at, started_at), lease_until,
           'taken_over'
      FROM lockable
     WHERE state = 'running' AND attempts > 0
    ON CONFLICT (run_id, attempt) DO NOTHING
)
UPDATE schedule_runs AS r
   SET state = 'running', attempts = r.attempts + 1, lease_until = %(lease_until)s,
       started_at = COALESCE(r.started_at, %(now)s), attempt_started_at = %(now)s,
       attempt_receive_count = c.receive_count
  FROM schedules AS s, received AS c
 WHERE r.id IN (SELECT id FROM lockable)
   AND s.id = r.schedule_id AND c.id = r.id
   AND EXISTS (SELECT FROM relaxed)
RETURNING r.id, r.schedule_id, r.workspace_id, r.owner, r.work_kind, r.occurrence_at, r.occurrence_local,
          r.trigger, r.requested_by, r.attempts, s.subject_id, s.deleted_at

-- name: run_state
SELECT state, lease_until FROM schedule_runs WHERE id = %(id)s

-- name: release_lease
-- An unexpected fault on a non-final receive: give the lease back so the redelivery can
-- start at once, and keep the error for the history. The attempt is kept among the run's
-- superseded attempts (ended `retried`, with its error and the receive that started it) in
-- the same statement (a first attempt started with its batch: its start is the run's).
WITH released AS (
    UPDATE schedule_runs
       SET lease_until = %(now)s, error = %(error)s
     WHERE id = %(run_id)s AND state = 'running' AND attempts = %(attempt)s
    RETURNING id, attempts, workspace_id, COALESCE(attempt_started_at, started_at) AS attempt_started_at
)
INSERT INTO schedule_run_attempts (run_id, attempt, workspace_id, receive_count, started_at, ended_at, ended, error)
SELECT id, attempts, workspace_id, %(receive_count)s, attempt_started_at, %(now)s, 'retried', %(error)s
  FROM released
ON CONFLICT (run_id, attempt) DO UPDATE SET ended_at = EXCLUDED.ended_at, ended = EXCLUDED.ended,
                                            error = EXCLUDED.error

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
