-- name: settle_run
-- Settle exactly once, and update the schedule's failure streak, in ONE statement.
-- Only an unfinished run is settled, and (when fenced) only by the attempt that holds
-- it: a run taken over after its lease expired cannot be settled by the old holder.
-- Streak: scheduled failures add one; any success or skip resets; manual failures
-- neither add nor pause; a test run (an owner's test send) leaves the schedule's streak
-- and last run as they were. The threshold pauses an active schedule; so does an automatic
-- run's refusal that carries a pause reason (e.g. source_access_lost). The schedule row
-- is locked (FOR UPDATE returns its latest committed version), so concurrent
-- settlements of one schedule never lose an update.
WITH settled AS (
    UPDATE schedule_runs
       SET state = %(state)s, outcome_code = %(outcome_code)s, detail = %(detail)s, error = %(error)s,
           finished_at = %(now)s, lease_until = NULL
     WHERE id = %(run_id)s
       AND state IN ('queued', 'running')
       AND (%(attempt)s::integer IS NULL OR attempts = %(attempt)s::integer)
    RETURNING id, schedule_id, workspace_id, owner, work_kind, trigger, occurrence_at
), prior AS (
    SELECT s.id, s.status, settled.trigger,
           CASE WHEN settled.trigger = 'test' THEN s.consecutive_failures
                WHEN NOT %(failed)s THEN 0
                WHEN settled.trigger = 'scheduled' THEN s.consecutive_failures + 1
                ELSE s.consecutive_failures END AS streak
      FROM schedules AS s JOIN settled ON s.id = settled.schedule_id
       FOR UPDATE OF s
), decided AS (
    SELECT id, streak,
           (status = 'active' AND %(failed)s AND trigger = 'scheduled'
            AND (streak >= %(threshold)s OR %(pause_reason)s::text IS NOT NULL)) AS pausing
      FROM prior
)
UPDATE schedules AS s
   SET consecutive_failures = d.streak,
       last_run_id = CASE WHEN settled.trigger = 'test' THEN s.last_run_id ELSE %(run_id)s END,
       last_outcome = CASE WHEN settled.trigger = 'test' THEN s.last_outcome ELSE %(outcome_code)s END,
       last_run_at = CASE WHEN settled.trigger = 'test' THEN s.last_run_at ELSE %(now)s END,
       updated_at = CASE WHEN settled.trigger = 'test' THEN s.updated_at ELSE %(now)s END,
       status = CASE WHEN d.pausing THEN 'paused' ELSE s.status END,
       pause_reason = CASE WHEN NOT d.pausing THEN s.pause_reason
                           WHEN %(pause_reason)s::text IS NOT NULL THEN %(pause_reason)s::text
                           ELSE 'consecutive_failures' END,
       next_due_at = CASE WHEN d.pausing THEN NULL ELSE s.next_due_at END
  FROM decided AS d, settled
 WHERE s.id = d.id
RETURNING settled.schedule_id, settled.workspace_id, settled.owner, settled.work_kind, settled.trigger,
          settled.occurrence_at, s.pause_reason, s.notify_on, s.name, d.streak AS consecutive_failures,
          d.pausing AS paused_now

-- name: settle_completed
-- Settle a batch's succeeded and skipped runs, and reset their schedules' streaks, in ONE
-- statement (a test run's schedule is left as it was). Fenced like settle_run: only an unfinished run held by the given attempt is
-- settled; the caller compares the returned ids with what it asked for. A schedule with
-- several runs in the batch records its latest occurrence's run. Run rows, then schedule
-- rows, are locked in id order, so concurrent statements never deadlock on them. Each
-- lock CTE carries the values its update writes, so every update reads its locked rows
-- once (a join per row, not a scan of the locked set per row).
WITH v AS (
    SELECT id, state, outcome_code, detail::jsonb AS detail, attempt
      FROM unnest(%(id)b::uuid[], %(state)b::text[], %(outcome_code)b::text[], %(detail)b::text[],
                  %(attempt)b::integer[]) AS v(id, state, outcome_code, detail, attempt)
), runs AS (
    SELECT r.id, v.state, v.outcome_code, v.detail, v.attempt
      FROM schedule_runs AS r JOIN v ON v.id = r.id
     ORDER BY r.id
       FOR UPDATE OF r
), settled AS (
    UPDATE schedule_runs AS r
       SET state = runs.state, outcome_code = runs.outcome_code, detail = runs.detail, error = NULL,
           finished_at = %(now)s, lease_until = NULL
      FROM runs
     WHERE r.id = runs.id
       AND r.state IN ('queued', 'running') AND r.attempts = runs.attempt
    RETURNING r.id, r.schedule_id, r.occurrence_at, r.outcome_code, r.trigger
), latest AS (
    SELECT DISTINCT ON (schedule_id) schedule_id, id, outcome_code
      FROM settled
     WHERE trigger <> 'test'
     ORDER BY schedule_id, occurrence_at DESC, id
), locked AS (
    SELECT s.id, l.id AS run_id, l.outcome_code
      FROM schedules AS s JOIN latest AS l ON l.schedule_id = s.id
     ORDER BY s.id
       FOR UPDATE OF s
), streak AS (
    UPDATE schedules AS s
       SET consecutive_failures = 0, last_run_id = locked.run_id, last_outcome = locked.outcome_code,
           last_run_at = %(now)s, updated_at = %(now)s
      FROM locked
     WHERE s.id = locked.id
)
SELECT id FROM settled

-- name: lock_schedules
-- Take the schedule rows a batch will settle, in id order (no deadlock between batches).
SELECT id FROM schedules WHERE id = ANY(%(ids)b::uuid[]) ORDER BY id FOR UPDATE
