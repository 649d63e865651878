-- Query schedules' settings, recipients and what their runs delivered (timekeeper.reporting.delivery_store).

-- name: get_query_schedule
SELECT q.schedule_id, q.workspace_id, s.name, q.owner_user_id, q.source_kind, q.query_id, q.query_version,
       q.report_id, q.format, q.skip_when_empty, q.subject_template, q.body_template, q.link_ttl_hours,
       q.created_at, q.updated_at
  FROM query_schedules q JOIN schedules s ON s.id = q.schedule_id
 WHERE q.workspace_id = %s AND q.schedule_id = %s

-- name: list_recipients
SELECT user_id FROM query_schedule_recipients WHERE workspace_id = %s AND schedule_id = %s
 ORDER BY user_id

-- name: get_source
SELECT run_id, workspace_id, schedule_id, source_kind, format, object_key, byte_size, sha256, row_count, query_id,
       query_version, report_id, report_version, render_id, version_changed, acted_for, created_at,
       section_row_counts, snapshot_basis, snapshot_version_changed
  FROM query_delivery_sources WHERE workspace_id = %s AND run_id = %s

-- name: list_deliveries
SELECT run_id, user_id, workspace_id, schedule_id, status, skip_reason, address, provider_message_id,
       link_expires_at, error, attempt, updated_at, error_code
  FROM query_deliveries WHERE workspace_id = %s AND run_id = %s ORDER BY user_id

-- name: get_delivery
SELECT run_id, user_id, workspace_id, schedule_id, status, skip_reason, address, provider_message_id,
       link_expires_at, error, attempt, updated_at, error_code
  FROM query_deliveries WHERE workspace_id = %s AND run_id = %s AND user_id = %s

-- name: outbox_claimed
SELECT EXISTS (SELECT 1 FROM query_delivery_outbox WHERE run_id = %s)

-- name: previous_report_version
SELECT report_version FROM query_delivery_sources
 WHERE workspace_id = %s AND schedule_id = %s AND run_id <> %s AND report_version IS NOT NULL
 ORDER BY created_at DESC LIMIT 1

-- name: previous_snapshot_basis
-- The snapshot versions the schedule's latest other run delivered (NULL: none, or no snapshot section).
SELECT snapshot_basis FROM query_delivery_sources
 WHERE workspace_id = %s AND schedule_id = %s AND run_id <> %s AND report_version IS NOT NULL
 ORDER BY created_at DESC LIMIT 1

-- name: contacts
SELECT id, display_name, email FROM users WHERE id = ANY(%s)

-- name: list_attempts
-- Each attempt's outcome per recipient of a run, oldest attempt first.
SELECT run_id, user_id, attempt, status, error_code, provider_message_id, at
  FROM query_delivery_attempts WHERE workspace_id = %s AND run_id = %s ORDER BY user_id, attempt

-- name: workspace_facts
-- What a message says of its workspace: its name and zone.
SELECT name, timezone FROM workspaces WHERE id = %s
