-- Report renders (timekeeper.reporting.rendering).

-- name: get_render
SELECT id, workspace_id, idempotency_key, report_id, report_version, requested_by, state, attempts,
       object_key, byte_size, sha256, page_count, error_code, error_message, requested_at, started_at,
       finished_at, section_row_counts, snapshot_basis, period
  FROM report_renders WHERE workspace_id = %s AND id = %s

-- name: render_by_key
SELECT id, workspace_id, idempotency_key, report_id, report_version, requested_by, state, attempts,
       object_key, byte_size, sha256, page_count, error_code, error_message, requested_at, started_at,
       finished_at, section_row_counts, snapshot_basis, period
  FROM report_renders WHERE workspace_id = %s AND idempotency_key = %s

-- name: insert_render
INSERT INTO report_renders (workspace_id, idempotency_key, report_id, report_version,
                            requested_by, requested_at, period)
SELECT r.workspace_id, %s, r.id, r.current_version, %s, %s, %s FROM reports r
 WHERE r.workspace_id = %s AND r.id = %s AND r.deleted_at IS NULL
ON CONFLICT (workspace_id, idempotency_key) DO NOTHING
RETURNING id, workspace_id, idempotency_key, report_id, report_version, requested_by, state, attempts,
       object_key, byte_size, sha256, page_count, error_code, error_message, requested_at, started_at,
       finished_at, section_row_counts, snapshot_basis, period

-- name: lock_render
SELECT id, workspace_id, idempotency_key, report_id, report_version, requested_by, state, attempts,
       object_key, byte_size, sha256, page_count, error_code, error_message, requested_at, started_at,
       finished_at, section_row_counts, snapshot_basis, period
  FROM report_renders WHERE workspace_id = %s AND id = %s FOR UPDATE

-- name: start_render
UPDATE report_renders SET state = 'rendering', attempts = attempts + 1, started_at = %s
 WHERE id = %s
RETURNING id, workspace_id, idempotency_key, report_id, report_version, requested_by, state, attempts,
       object_key, byte_size, sha256, page_count, error_code, error_message, requested_at, started_at,
       finished_at, section_row_counts, snapshot_basis, period

-- name: finish_failed
-- An attempt's failure (db.attempts.settle_failed), fenced by its attempt number.
UPDATE report_renders SET state = 'failed', error_code = %(code)s, error_message = %(message)s,
                          finished_at = %(now)s
 WHERE id = %(id)s AND state IN ('requested', 'rendering') AND attempts = %(fence)s
RETURNING id, workspace_id, idempotency_key, report_id, report_version, requested_by, state, attempts,
       object_key, byte_size, sha256, page_count, error_code, error_message, requested_at, started_at,
       finished_at, section_row_counts, snapshot_basis, period

-- name: render_by_id
SELECT id, workspace_id, idempotency_key, report_id, report_version, requested_by, state, attempts,
       object_key, byte_size, sha256, page_count, error_code, error_message, requested_at, started_at,
       finished_at, section_row_counts, snapshot_basis, period
  FROM report_renders WHERE id = %(id)s

-- name: finish_succeeded
UPDATE report_renders SET state = 'succeeded', object_key = %s, byte_size = %s, sha256 = %s,
                          page_count = %s, error_code = NULL, error_message = NULL,
                          finished_at = %s, section_row_counts = %s, snapshot_basis = %s
 WHERE id = %s AND state = 'rendering' AND attempts = %s
RETURNING id, workspace_id, idempotency_key, report_id, report_version, requested_by, state, attempts,
       object_key, byte_size, sha256, page_count, error_code, error_message, requested_at, started_at,
       finished_at, section_row_counts, snapshot_basis, period

-- name: query_name
SELECT name FROM saved_queries WHERE workspace_id = %s AND id = %s

-- name: begin_snapshot
-- The first statement of the sections' transaction: one consistent, read-only snapshot.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: stale_renders
-- The renders' sweep: unfinished renders whose last attempt's lease ran out with no
-- attempt left, or that nothing ran since their request, last attempt or last re-offer
-- for the re-offer period; oldest first, locked for this pass (a render an attempt is
-- starting is skipped).
SELECT id, workspace_id, state, attempts, reoffers
  FROM report_renders
 WHERE state IN ('requested', 'rendering')
   AND ((attempts >= %(max_attempts)s AND COALESCE(started_at, requested_at) <= %(lease_before)s)
        OR GREATEST(requested_at, started_at, reoffered_at) <= %(idle_before)s)
 ORDER BY requested_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: settle_stale_renders
UPDATE report_renders
   SET state = 'failed', error_code = 'attempts_exhausted', finished_at = %(now)s,
       error_message = attempts || ' attempts and ' || reoffers
                       || ' re-offers ended without a recorded result (timeouts, lost connections?)'
 WHERE id = ANY(%(ids)s) AND state IN ('requested', 'rendering')
RETURNING id

-- name: mark_reoffered
UPDATE report_renders SET reoffered_at = %(now)s, reoffers = reoffers + 1
 WHERE id = ANY(%(ids)s) AND state IN ('requested', 'rendering')
RETURNING id, workspace_id
