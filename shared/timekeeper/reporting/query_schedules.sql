-- Query schedules' settings and recipients (timekeeper.reporting.query_schedules).
-- A listing is two blocks, its columns with the FROM clause (<listing>_from) and its condition
-- (<listing>_where): timekeeper.db.keyset.keyset_rows adds the keyset condition, order and limit.

-- name: delete_recipients
DELETE FROM query_schedule_recipients WHERE workspace_id = %s AND schedule_id = %s

-- name: insert_recipient
INSERT INTO query_schedule_recipients (workspace_id, schedule_id, user_id, added_at)
VALUES (%s, %s, %s, %s)

-- name: insert_settings
INSERT INTO query_schedules (schedule_id, workspace_id, owner_user_id, source_kind, query_id,
    query_version, report_id, format, skip_when_empty, subject_template, body_template,
    link_ttl_hours, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: update_settings
UPDATE query_schedules SET subject_template = %s, body_template = %s, link_ttl_hours = %s,
       skip_when_empty = %s, updated_at = %s WHERE workspace_id = %s AND schedule_id = %s

-- name: list_schedules_from
q.schedule_id, q.workspace_id, s.name, q.owner_user_id, q.source_kind, q.query_id, q.query_version,
q.report_id, q.format, q.skip_when_empty, q.subject_template, q.body_template, q.link_ttl_hours,
q.created_at, q.updated_at FROM query_schedules q JOIN schedules s ON s.id = q.schedule_id

-- name: list_schedules_where
q.workspace_id = %(ws)s AND s.deleted_at IS NULL
AND (%(name)s::text IS NULL OR strpos(lower(s.name), lower(%(name)s::text)) > 0)
AND (%(source_kind)s::text IS NULL OR q.source_kind = %(source_kind)s::text)
AND (%(owner)s::text IS NULL OR q.owner_user_id = %(owner)s::text)
AND (%(status)s::text IS NULL OR s.status = %(status)s::text)

-- name: source_names
SELECT id, name FROM saved_queries WHERE workspace_id = %(ws)s AND id = ANY(%(queries)s::uuid[])
UNION ALL
SELECT id, name FROM reports WHERE workspace_id = %(ws)s AND id = ANY(%(reports)s::uuid[])

-- name: list_runs_from
r.id AS run_id, r.trigger, r.requested_by, r.state, r.outcome_code, r.occurrence_at, r.finished_at,
d.acted_for, d.row_count, d.sha256, d.report_version, d.version_changed, d.snapshot_basis,
d.snapshot_version_changed
  FROM schedule_runs r LEFT JOIN query_delivery_sources d ON d.run_id = r.id

-- name: list_runs_where
r.workspace_id = %(ws)s AND r.schedule_id = %(schedule_id)s

-- name: set_owner
UPDATE query_schedules SET owner_user_id = %s, updated_at = %s WHERE workspace_id = %s AND schedule_id = %s

-- name: schedule_recurrence
-- A query schedule's rule as the API takes it (its zone inside).
SELECT recurrence || jsonb_build_object('timezone', timezone) FROM schedules
 WHERE workspace_id = %s AND id = %s
