-- name: insert_schedule
-- The schedule statements return the columns of timekeeper.schedules.models.Schedule.
INSERT INTO schedules (id, workspace_id, owner, work_kind, subject_id, name, recurrence, timezone, status,
                       next_due_at, created_by, owner_user_id, created_at, updated_at, notify_on)
VALUES (%(id)s, %(workspace_id)s, %(owner)s, %(work_kind)s, %(subject_id)s, %(name)s, %(recurrence)s,
        %(timezone)s, %(status)s, %(next_due_at)s, %(actor)s, %(actor)s, %(now)s, %(now)s, %(notify_on)s)
RETURNING id, workspace_id, owner, work_kind, subject_id, name, recurrence, timezone, status, pause_reason,
          next_due_at, consecutive_failures, last_run_id, last_outcome, last_run_at, definition_version,
          created_by, created_at, updated_at, deleted_at, notify_on

-- name: get_schedule_for_update
SELECT id, workspace_id, owner, work_kind, subject_id, name, recurrence, timezone, status, pause_reason,
       next_due_at, consecutive_failures, last_run_id, last_outcome, last_run_at, definition_version,
       created_by, created_at, updated_at, deleted_at, notify_on
  FROM schedules
 WHERE id = %(id)s AND workspace_id = %(workspace_id)s AND deleted_at IS NULL
   FOR UPDATE

-- name: get_schedule
SELECT id, workspace_id, owner, work_kind, subject_id, name, recurrence, timezone, status, pause_reason,
       next_due_at, consecutive_failures, last_run_id, last_outcome, last_run_at, definition_version,
       created_by, created_at, updated_at, deleted_at, notify_on
  FROM schedules
 WHERE id = %(id)s AND workspace_id = %(workspace_id)s AND deleted_at IS NULL

-- name: update_definition
UPDATE schedules
   SET recurrence = %(recurrence)s, timezone = %(timezone)s, name = %(name)s, subject_id = %(subject_id)s,
       definition_version = definition_version + 1,
       next_due_at = CASE WHEN status = 'active' THEN %(next_due_at)s::timestamptz END,
       updated_at = %(now)s
 WHERE id = %(id)s
RETURNING id, workspace_id, owner, work_kind, subject_id, name, recurrence, timezone, status, pause_reason,
          next_due_at, consecutive_failures, last_run_id, last_outcome, last_run_at, definition_version,
          created_by, created_at, updated_at, deleted_at, notify_on

-- name: set_notify_on
-- Which failures the owner is told of: not part of the definition (no version, no timing).
UPDATE schedules SET notify_on = %(notify_on)s, updated_at = %(now)s
 WHERE id = %(id)s
RETURNING id, workspace_id, owner, work_kind, subject_id, name, recurrence, timezone, status, pause_reason,
          next_due_at, consecutive_failures, last_run_id, last_outcome, last_run_at, definition_version,
          created_by, created_at, updated_at, deleted_at, notify_on

-- name: set_status
UPDATE schedules
   SET status = %(status)s, pause_reason = %(pause_reason)s, next_due_at = %(next_due_at)s,
       consecutive_failures = CASE WHEN %(reset_streak)s THEN 0 ELSE consecutive_failures END,
       deleted_at = %(deleted_at)s, updated_at = %(now)s
 WHERE id = %(id)s
RETURNING id, workspace_id, owner, work_kind, subject_id, name, recurrence, timezone, status, pause_reason,
          next_due_at, consecutive_failures, last_run_id, last_outcome, last_run_at, definition_version,
          created_by, created_at, updated_at, deleted_at, notify_on

-- name: insert_manual_run
INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                           occurrence_local, trigger, requested_by, definition_version, state, queued_at,
                           offered_at, offer_count)
VALUES (%(schedule_id)s, %(workspace_id)s, %(owner)s, %(work_kind)s, %(occurrence_key)s, %(occurrence_at)s,
        %(occurrence_local)s, %(trigger)s, %(actor)s, %(definition_version)s, 'queued', %(now)s, %(now)s, 1)
ON CONFLICT ON CONSTRAINT schedule_runs_occurrence_key DO NOTHING
RETURNING id

-- name: find_run_by_key
SELECT id FROM schedule_runs WHERE schedule_id = %(schedule_id)s AND occurrence_key = %(occurrence_key)s

-- name: recent_runs
-- retry_of: the run an operator's Retry now retried to make a manual run (its action names
-- the new run; found by the partial index of retries).
SELECT r.id, r.occurrence_at, r.occurrence_local, r.dst_shifted, r.trigger, r.requested_by, r.state, r.attempts,
       r.offer_count, r.queued_at, r.started_at, r.finished_at, r.outcome_code, r.detail, r.error, r.skipped_backlog,
       r.first_skipped_at, r.due_at, r.published_at, r.offered_at, r.lease_until,
       CASE WHEN r.trigger = 'manual' THEN
           (SELECT a.run_id FROM schedule_run_actions a
             WHERE a.action = 'retry' AND a.detail ->> 'run_id' = r.id::text
             ORDER BY a.id LIMIT 1) END AS retry_of
  FROM schedule_runs r
 WHERE r.schedule_id = %(id)s AND r.workspace_id = %(workspace_id)s
 ORDER BY r.queued_at DESC, r.occurrence_at DESC
 LIMIT %(limit)s

-- name: recent_events
SELECT id, run_id, kind, actor, reason, detail, at
  FROM schedule_events
 WHERE schedule_id = %(id)s AND workspace_id = %(workspace_id)s
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: list_schedules
-- Keyset pagination over (created_at, id): the cursor is the last row of the previous page.
SELECT id, workspace_id, owner, work_kind, subject_id, name, recurrence, timezone, status, pause_reason,
       next_due_at, consecutive_failures, last_run_id, last_outcome, last_run_at, definition_version,
       created_by, created_at, updated_at, deleted_at, notify_on
  FROM schedules
 WHERE workspace_id = %(workspace_id)s AND deleted_at IS NULL
   AND (%(owner)s::text IS NULL OR owner = %(owner)s::text)
   AND (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(work_kind)s::text IS NULL OR work_kind = %(work_kind)s::text)
   AND (%(name)s::text IS NULL OR strpos(lower(name), lower(%(name)s::text)) > 0)
   AND owner || '/' || work_kind <> ALL(%(hidden_kinds)s::text[])
   AND (%(after_created_at)s::timestamptz IS NULL
        OR (created_at, id) > (%(after_created_at)s::timestamptz, %(after_id)s::uuid))
 ORDER BY created_at, id
 LIMIT %(limit)s

-- name: get_schedule_state
-- Also a deleted schedule's (deleted_at set): the routes of a work kind with its own
-- settings tell a deleted schedule from a missing one.
SELECT status, pause_reason, next_due_at, deleted_at
  FROM schedules
 WHERE id = %(id)s AND workspace_id = %(workspace_id)s

-- name: get_deletion
-- A deleted schedule of the workspace: when, and who by its latest 'deleted' history event
-- (null once the history retention removed it).
SELECT s.owner, s.work_kind, s.deleted_at,
       (SELECT e.actor FROM schedule_events e
         WHERE e.schedule_id = s.id AND e.workspace_id = s.workspace_id AND e.kind = 'deleted'
         ORDER BY e.id DESC LIMIT 1) AS deleted_by
  FROM schedules s
 WHERE s.id = %(id)s AND s.workspace_id = %(workspace_id)s AND s.deleted_at IS NOT NULL

-- name: pause_ownerless
-- The owner hand-off: every live schedule (active or paused) whose owner is %(user_id)s, in
-- one workspace or (a deactivated user) every workspace, is paused as ownerless. Returns
-- what each was before, for its history event and notice.
WITH found AS (
    SELECT id, status AS was_status, pause_reason AS was_reason FROM schedules
     WHERE owner_user_id = %(user_id)s AND deleted_at IS NULL AND status IN ('active', 'paused')
       AND (%(workspace_id)s::uuid IS NULL OR workspace_id = %(workspace_id)s::uuid)
       AND pause_reason IS DISTINCT FROM 'ownerless'
     ORDER BY id
       FOR UPDATE
)
UPDATE schedules AS s
   SET status = 'paused', pause_reason = 'ownerless', next_due_at = NULL, updated_at = %(now)s
  FROM found
 WHERE s.id = found.id
RETURNING s.id, s.workspace_id, s.owner, s.work_kind, s.name, found.was_status, found.was_reason

-- name: list_ownerless
SELECT id, workspace_id, owner, work_kind, name, owner_user_id, updated_at FROM schedules
 WHERE workspace_id = %(workspace_id)s AND deleted_at IS NULL AND status = 'paused'
   AND pause_reason = 'ownerless'
 ORDER BY updated_at, id

-- name: get_owner
SELECT owner_user_id FROM schedules WHERE id = %(id)s AND workspace_id = %(workspace_id)s

-- name: set_owner
-- A reassigned ownerless schedule stays paused, now as paused by its (new) owner: resuming it
-- is the owner's or an admin's next action.
UPDATE schedules
   SET owner_user_id = %(owner_user_id)s, updated_at = %(now)s,
       pause_reason = CASE WHEN pause_reason = 'ownerless' THEN 'paused_by_owner' ELSE pause_reason END
 WHERE id = %(id)s AND workspace_id = %(workspace_id)s

-- name: list_events
SELECT id, run_id, kind, actor, reason, detail, at
  FROM schedule_events
 WHERE schedule_id = %(id)s AND workspace_id = %(workspace_id)s
   AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: last_change
-- Who last changed the definition (its create, or a later name, subject, rule or notices change), and when.
SELECT actor, at
  FROM schedule_events
 WHERE schedule_id = %(id)s AND workspace_id = %(workspace_id)s AND kind IN ('created', 'updated')
 ORDER BY id DESC
 LIMIT 1
