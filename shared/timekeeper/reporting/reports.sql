-- Reports and their immutable versions (timekeeper.reporting.reports).

-- name: query_liveness
SELECT deleted_at IS NULL AS live FROM saved_queries WHERE workspace_id = %s AND id = %s

-- name: insert_version
INSERT INTO report_versions (workspace_id, report_id, version, definition, created_by, created_at)
VALUES (%s, %s, %s, %s, %s, %s)
RETURNING workspace_id, report_id, version, definition, created_by, created_at

-- name: insert_document
INSERT INTO reports (workspace_id, name, current_version, created_by, created_at, updated_at)
VALUES (%s, %s, 1, %s, %s, %s)
RETURNING id, workspace_id, name, current_version, created_by, created_at, updated_at, deleted_at

-- name: bump_version
UPDATE reports SET current_version = current_version + 1, updated_at = %s,
                   name = coalesce(%s, name)
 WHERE workspace_id = %s AND id = %s AND deleted_at IS NULL
RETURNING id, workspace_id, name, current_version, created_by, created_at, updated_at, deleted_at

-- name: get_document
SELECT id, workspace_id, name, current_version, created_by, created_at, updated_at, deleted_at FROM reports
 WHERE workspace_id = %s AND id = %s AND deleted_at IS NULL

-- name: get_version
SELECT workspace_id, report_id, version, definition, created_by, created_at FROM report_versions
 WHERE workspace_id = %s AND report_id = %s AND version = %s

-- name: list_versions
SELECT workspace_id, report_id, version, definition, created_by, created_at FROM report_versions
 WHERE workspace_id = %s AND report_id = %s
 ORDER BY version

-- name: delete_document
UPDATE reports SET deleted_at = %s, updated_at = %s
 WHERE workspace_id = %s AND id = %s AND deleted_at IS NULL

-- name: list_documents_from
-- A keyset listing: its columns with the FROM clause, and its condition (list_documents_where);
-- timekeeper.db.keyset.keyset_rows adds the keyset condition, order and limit.
id, workspace_id, name, current_version, created_by, created_at, updated_at, deleted_at FROM reports

-- name: list_documents_where
workspace_id = %(ws)s AND deleted_at IS NULL

-- name: report_summaries
-- Per report of the list, its current version's section count and who saved that version.
SELECT r.id AS report_id, jsonb_array_length(v.definition -> 'sections') AS sections, v.created_by AS updated_by
  FROM reports r JOIN report_versions v ON v.report_id = r.id AND v.version = r.current_version
 WHERE r.workspace_id = %s AND r.id = ANY(%s)

-- name: report_deliveries
-- The workspace's undeleted delivery schedules whose source is the report, by name.
SELECT q.schedule_id, s.name FROM query_schedules q JOIN schedules s ON s.id = q.schedule_id
 WHERE q.workspace_id = %s AND q.report_id = %s AND q.source_kind = 'report' AND s.deleted_at IS NULL
 ORDER BY s.name, q.schedule_id
