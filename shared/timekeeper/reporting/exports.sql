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
-- An attempt's failure (db.attempts.settle_failed), fenced by its attempt number.
UPDATE exports SET state = 'failed', error_code = %(code)s, error_message = %(message)s, finished_at = %(now)s
 WHERE workspace_id = %(workspace_id)s AND id = %(id)s AND state IN ('queued', 'running')
   AND attempts = %(fence)s
RETURNING id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
          object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
          started_at, finished_at

-- name: export_by_id
SELECT id, workspace_id, query_id, query_version, format, requested_by, idempotency_key, state, attempts,
       object_key, row_count, byte_size, sha256, error_code, error_message, created_at, published_at,
       started_at, finished_at
  FROM exports WHERE workspace_id = %(workspace_id)s AND id = %(id)s

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

-- name: stale_running_exports
-- Running exports whose last attempt's lease ran out with every attempt used, or that no
-- attempt started (nor the sweep re-offered) for the idle period; oldest first, locked.
SELECT id, workspace_id, attempts
  FROM exports
 WHERE state = 'running'
   AND ((attempts >= %(max_attempts)s AND started_at <= %(lease_before)s)
        OR GREATEST(started_at, reoffered_at) <= %(idle_before)s)
 ORDER BY started_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: settle_stale_exports
UPDATE exports
   SET state = 'failed', error_code = 'attempts_exhausted', finished_at = %(now)s,
       error_message = attempts || ' attempts ended without a recorded result (timeouts, lost connections?)'
 WHERE id = ANY(%(ids)s) AND state = 'running'
RETURNING id

-- name: mark_export_reoffered
UPDATE exports SET reoffered_at = %(now)s
 WHERE id = ANY(%(ids)s) AND state = 'running'
RETURNING id, workspace_id
