-- Interactive exports (timekeeper.reporting.exports).

-- name: insert_export
INSERT INTO exports (workspace_id, query_id, query_version, format, requested_by, idempotency_key,
                     created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (workspace_id, requested_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
          object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
          started_at, finished_at

-- name: export_by_key
SELECT id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
       object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
       started_at, finished_at
  FROM exports
 WHERE workspace_id = %s AND requested_by = %s AND idempotency_key = %s

-- name: mark_published
UPDATE exports SET published_at = %s
 WHERE workspace_id = ANY(%s) AND id = ANY(%s) AND published_at IS NULL
RETURNING id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
          object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
          started_at, finished_at

-- name: unpublished_exports
SELECT id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
       object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
       started_at, finished_at
  FROM exports
 WHERE state = 'queued' AND published_at IS NULL AND created_at <= %(before)s
   AND (%(ws)s::uuid IS NULL OR workspace_id = %(ws)s) AND (%(id)s::uuid IS NULL OR id = %(id)s)
 ORDER BY created_at LIMIT %(limit)s

-- name: get_export
SELECT id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
       object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
       started_at, finished_at
  FROM exports WHERE workspace_id = %s AND id = %s

-- name: lock_export
SELECT id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
       object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
       started_at, finished_at
  FROM exports WHERE workspace_id = %s AND id = %s FOR UPDATE

-- name: finish_failed
UPDATE exports SET state = 'failed', error_code = %s, error_message = %s, finished_at = %s
 WHERE workspace_id = %s AND id = %s
RETURNING id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
          object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
          started_at, finished_at

-- name: start_export
UPDATE exports SET state = 'running', attempts = attempts + 1, started_at = %s
 WHERE workspace_id = %s AND id = %s
RETURNING id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
          object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
          started_at, finished_at

-- name: finish_succeeded
UPDATE exports SET state = 'succeeded', object_key = %s, row_count = %s, byte_size = %s, sha256 = %s,
                   finished_at = %s, error_code = NULL, error_message = NULL
 WHERE workspace_id = %s AND id = %s AND state = 'running' AND attempts = %s
RETURNING id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
          object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
          started_at, finished_at
