-- name: list_closures
SELECT closed_on, reason, created_by, created_at
  FROM workspace_closures
 WHERE workspace_id = %(workspace_id)s
 ORDER BY closed_on

-- name: closed_dates
SELECT closed_on FROM workspace_closures WHERE workspace_id = %(workspace_id)s ORDER BY closed_on

-- name: insert_closure
-- A date already closed keeps its first row (and reason): nothing is returned for it.
INSERT INTO workspace_closures (workspace_id, closed_on, reason, created_by, created_at)
VALUES (%(workspace_id)s, %(closed_on)s, %(reason)s, %(actor)s, %(now)s)
ON CONFLICT (workspace_id, closed_on) DO NOTHING
RETURNING closed_on, reason, created_by, created_at

-- name: delete_closure
DELETE FROM workspace_closures
 WHERE workspace_id = %(workspace_id)s AND closed_on = %(closed_on)s
RETURNING closed_on, reason, created_by, created_at

-- name: business_day_schedules_for_update
-- The workspace's active business-day calendar schedules, whose next due instant the
-- holiday set decides; locked, so a claim running beside the change waits for it.
SELECT id, workspace_id, recurrence::text AS rule_text, next_due_at
  FROM schedules
 WHERE workspace_id = %(workspace_id)s AND status = 'active' AND deleted_at IS NULL
   AND recurrence -> 'calendar' ? 'business_day'
 ORDER BY id
   FOR UPDATE

-- name: set_next_due
UPDATE schedules SET next_due_at = %(next_due_at)s, updated_at = %(now)s WHERE id = %(id)s

-- name: record_holiday_data
-- A version seen for the first time comes back; a known one returns nothing.
INSERT INTO holiday_data_versions (data, recorded_at) VALUES (%(data)s, %(now)s)
ON CONFLICT (data) DO NOTHING
RETURNING data

-- name: business_day_workspaces
SELECT DISTINCT workspace_id
  FROM schedules
 WHERE status = 'active' AND deleted_at IS NULL AND recurrence -> 'calendar' ? 'business_day'
 ORDER BY workspace_id
