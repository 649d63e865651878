-- Saved queries and their immutable versions (timekeeper.reporting.store).

-- name: insert_document
INSERT INTO saved_queries (workspace_id, name, description, current_version, created_by,
                           created_at, updated_at)
VALUES (%s, %s, %s, 1, %s, %s, %s)
RETURNING id, workspace_id, name, description, current_version, created_by, created_at, updated_at, deleted_at

-- name: insert_version
INSERT INTO saved_query_versions (workspace_id, query_id, version, definition, created_by, created_at)
VALUES (%s, %s, %s, %s, %s, %s)
RETURNING workspace_id, query_id, version, definition, created_by, created_at

-- name: bump_version
UPDATE saved_queries SET current_version = current_version + 1, updated_at = %s,
                         name = coalesce(%s, name), description = coalesce(%s, description)
 WHERE workspace_id = %s AND id = %s AND deleted_at IS NULL
RETURNING id, workspace_id, name, description, current_version, created_by, created_at, updated_at, deleted_at

-- name: get_document
SELECT id, workspace_id, name, description, current_version, created_by, created_at, updated_at, deleted_at
  FROM saved_queries
 WHERE workspace_id = %s AND id = %s AND deleted_at IS NULL

-- name: get_current_version
SELECT v.workspace_id, v.query_id, v.version, v.definition, v.created_by, v.created_at FROM saved_queries q
  JOIN saved_query_versions v ON v.query_id = q.id AND v.version = q.current_version
 WHERE q.workspace_id = %s AND q.id = %s AND q.deleted_at IS NULL

-- name: get_version
SELECT workspace_id, query_id, version, definition, created_by, created_at FROM saved_query_versions
 WHERE workspace_id = %s AND query_id = %s AND version = %s

-- name: list_versions
SELECT workspace_id, query_id, version, definition, created_by, created_at FROM saved_query_versions
 WHERE workspace_id = %s AND query_id = %s
 ORDER BY version

-- name: delete_document
UPDATE saved_queries SET deleted_at = %s, updated_at = %s
 WHERE workspace_id = %s AND id = %s AND deleted_at IS NULL

-- name: list_documents_from
-- A keyset listing: its columns with the FROM clause, and its condition (list_documents_where);
-- timekeeper.db.keyset.keyset_rows adds the keyset condition, order and limit.
id, workspace_id, name, description, current_version, created_by, created_at, updated_at, deleted_at
  FROM saved_queries

-- name: list_documents_where
workspace_id = %(ws)s AND deleted_at IS NULL

-- name: current_summaries
-- Each listed query's current entity and who saved its current version (the last change).
SELECT q.id, v.definition ->> 'entity' AS entity, v.created_by AS updated_by
  FROM saved_queries q
  JOIN saved_query_versions v ON v.workspace_id = q.workspace_id AND v.query_id = q.id
                             AND v.version = q.current_version
 WHERE q.workspace_id = %s AND q.id = ANY(%s)

-- name: pinned_by
-- The live deliveries of the workspace whose source is this query, with the version each pins.
SELECT q.schedule_id, s.name, q.query_version AS version
  FROM query_schedules q JOIN schedules s ON s.id = q.schedule_id
 WHERE q.workspace_id = %s AND q.query_id = %s AND q.source_kind = 'query' AND s.deleted_at IS NULL
 ORDER BY s.name, q.schedule_id
