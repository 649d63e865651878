-- name: run_workspace
-- Through the migration's SECURITY DEFINER function: the workspace of a run of any workspace.
SELECT operations_run_workspace(%(run_id)s) AS workspace_id

-- name: run_labels
-- Through the migration's SECURITY DEFINER function (0083): what names each of several runs
-- of any workspace for people, in one statement.
SELECT id, schedule_id, workspace_id, state, occurrence_at, occurrence_local, schedule_name, timezone, in_directory
  FROM operations_run_labels(%(run_ids)s::uuid[])

-- name: run
SELECT r.id, r.schedule_id, r.workspace_id, r.owner, r.work_kind, r.occurrence_key, r.occurrence_at,
       r.occurrence_local, r.dst_shifted, r.trigger, r.requested_by, r.state, r.queued_at, r.offered_at,
       r.offer_count, r.published_at, r.publish_count, r.attempts, r.lease_until, r.started_at, r.finished_at,
       r.outcome_code, r.error, r.skipped_backlog, r.first_skipped_at, r.due_at, r.attempt_started_at,
       r.attempt_receive_count,
       s.name AS schedule_name, s.timezone AS schedule_timezone, s.status AS schedule_status,
       s.deleted_at IS NOT NULL AS schedule_deleted
  FROM schedule_runs r
  JOIN schedules s ON s.id = r.schedule_id
 WHERE r.id = %(run_id)s AND r.workspace_id = %(workspace_id)s

-- name: run_for_update
SELECT id, schedule_id, workspace_id, owner, state, published_at, offered_at, queued_at, lease_until, attempts,
       occurrence_at, occurrence_local
  FROM schedule_runs
 WHERE id = %(run_id)s AND workspace_id = %(workspace_id)s
   FOR UPDATE

-- name: run_attempts
-- The run's superseded attempts (a failure given back for a retry, a stalled lease taken
-- over), in number order; the run row holds its current one.
SELECT attempt, receive_count, started_at, ended_at, ended, error
  FROM schedule_run_attempts
 WHERE run_id = %(run_id)s
 ORDER BY attempt

-- name: run_events
SELECT id, kind, actor, reason, detail, at
  FROM schedule_events
 WHERE run_id = %(run_id)s
 ORDER BY id
 LIMIT 200

-- name: run_actions
SELECT id, action, actor, reason, detail, at
  FROM schedule_run_actions
 WHERE run_id = %(run_id)s
 ORDER BY id

-- name: record_run_action
INSERT INTO schedule_run_actions (run_id, schedule_id, workspace_id, action, actor, reason, detail, at)
VALUES (%(run_id)s, %(schedule_id)s, %(workspace_id)s, %(action)s, %(actor)s, %(reason)s, %(detail)s, %(at)s)
RETURNING id, action, actor, reason, detail, at

-- name: cancel_run
-- A queued run settled as skipped with the outcome `cancelled`: its message, when it comes,
-- finds the run over and is dropped by the consumer. The schedule's streak is untouched.
UPDATE schedule_runs
   SET state = 'skipped', outcome_code = 'cancelled', finished_at = %(now)s, lease_until = NULL
 WHERE id = %(run_id)s AND state = 'queued'
RETURNING id

-- name: keyed_run_action
SELECT id, action, actor, reason, detail, at
  FROM schedule_run_actions
 WHERE run_id = %(run_id)s AND action = %(action)s AND detail ->> 'key' = %(key)s
 ORDER BY id
 LIMIT 1

-- name: retry_of
-- The operator's retry that made run %(run_id)s (its action names the new run in detail).
SELECT run_id, actor, reason, at
  FROM schedule_run_actions
 WHERE workspace_id = %(workspace_id)s AND schedule_id = %(schedule_id)s AND action = 'retry'
   AND detail ->> 'run_id' = %(run_id)s::text
 ORDER BY id
 LIMIT 1

-- name: retries_of
-- Of the runs %(ids)s of the entered workspace, those an operator's Retry now made: each
-- with the run it retried.
SELECT DISTINCT ON (detail ->> 'run_id') (detail ->> 'run_id')::uuid AS run_id, run_id AS retry_of
  FROM schedule_run_actions
 WHERE action = 'retry' AND detail ->> 'run_id' = ANY(%(ids)s::text[])
 ORDER BY detail ->> 'run_id', id

-- name: runs_by_state_from
-- The runs of the entered workspace in one state, newest first (listing: keyset on
-- (queued_at, id); failed runs read the partial index of migration 0087), each with its
-- schedule's name and zone and the run an operator's Retry now made of it (the latest).
r.id, r.schedule_id, s.name AS schedule_name, s.timezone, r.state, r.trigger, r.requested_by, r.occurrence_at,
       r.occurrence_local, r.attempts, r.outcome_code, r.error, r.queued_at, r.finished_at,
       (SELECT (a.detail ->> 'run_id')::uuid FROM schedule_run_actions a
         WHERE a.run_id = r.id AND a.action = 'retry' ORDER BY a.id DESC LIMIT 1) AS retried_as
  FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id

-- name: runs_by_state_where
r.workspace_id = %(workspace_id)s AND r.state = %(state)s
   AND (%(since)s::timestamptz IS NULL OR r.queued_at >= %(since)s::timestamptz)
