-- The audit trail of staff reads across workspaces (timekeeper.platform.audit).

-- name: record_staff_read
INSERT INTO staff_reads (workspace_id, actor, what, detail, at) VALUES (%s, %s, %s, %s, %s) RETURNING id

-- name: list_staff_reads
SELECT id, workspace_id, actor, what, detail, at FROM staff_reads
 WHERE workspace_id = %(workspace_id)s AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
 ORDER BY id DESC
 LIMIT %(limit)s
