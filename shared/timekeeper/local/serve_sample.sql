-- Named queries of timekeeper.local.serve_sample (never deployed: the layer leaves local/ out).

-- name: lock_serve_sample
SELECT pg_advisory_xact_lock(hashtext('timekeeper.serve_sample'))

-- name: sample_schedule_exists
SELECT 1 FROM schedules WHERE workspace_id = %s AND name = %s

-- name: insert_sample_run
-- A past run of a sample schedule in the state the operators' lists show (failed, stranded):
-- a Run now by the sample's author, so its day and time need not be one of the rule's.
INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                           occurrence_local, trigger, requested_by, definition_version, state, queued_at, offered_at,
                           offer_count, published_at, publish_count, attempts, lease_until, started_at, finished_at,
                           outcome_code, error)
SELECT s.id, s.workspace_id, s.owner, s.work_kind, %(key)s, %(at)s, (%(at)s AT TIME ZONE s.timezone), 'manual',
       %(actor)s,
       s.definition_version, %(state)s, %(at)s, %(at)s, 1, %(at)s, 1, %(attempts)s, %(lease_until)s, %(started_at)s,
       %(finished_at)s, %(outcome_code)s, %(error)s
  FROM schedules s WHERE s.id = %(schedule_id)s
RETURNING id

-- name: insert_sample_attempts
-- The superseded attempts of a sample failed run, as the consumer keeps them: `retried`
-- (release_lease: each failed, gave its lease back and was retried, with its error) or
-- `taken_over` (start_runs: killed, its lease ran out, no error), with the receive that
-- started each; and its last attempt's start and receive on the run.
WITH kept AS (
    INSERT INTO schedule_run_attempts (run_id, attempt, workspace_id, receive_count, started_at, ended_at, ended,
                                       error)
    SELECT r.id, a.n, r.workspace_id, a.n, a.started_at, a.ended_at, %(ended)s, %(error)s
      FROM schedule_runs r,
           unnest(%(starts)s::timestamptz[], %(ends)s::timestamptz[]) WITH ORDINALITY AS a(started_at, ended_at, n)
     WHERE r.id = %(run_id)s
)
UPDATE schedule_runs SET attempt_started_at = %(last_started_at)s, attempt_receive_count = attempts
 WHERE id = %(run_id)s

-- name: mark_failing
UPDATE schedules SET consecutive_failures = %(failures)s, last_outcome = %(outcome)s,
                     last_run_at = %(at)s, updated_at = %(at)s
 WHERE id = %(schedule_id)s

-- name: sample_snapshot_states
-- The snapshot versions of every workspace: how many are published, how many failed.
SELECT count(*) FILTER (WHERE state = 'published') AS published, count(*) FILTER (WHERE state = 'failed') AS failed
  FROM snapshot_runs

-- name: sample_person
SELECT email FROM users WHERE id = %s

-- name: insert_sample_message
-- A notice message the sample says was sent before the start (its outbox row, as the notice
-- mail pass records a sent message: claimed, submitted once, SES's message id and instant).
INSERT INTO query_delivery_outbox (communication_key, run_id, user_id, workspace_id, claimed_attempt, claimed_at,
                                   submissions, provider_message_id, sent_at)
VALUES (%(key)s, NULL, %(user_id)s, %(workspace_id)s, 1, %(sent_at)s, 1, %(message_id)s, %(sent_at)s)
