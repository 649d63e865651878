-- The access rule's reads (timekeeper.platform.access).

-- name: people_with_memberships
SELECT u.id, u.status, m.roles, m.left_at, m.user_id IS NOT NULL AS member
  FROM users u LEFT JOIN workspace_memberships m ON m.workspace_id = %s AND m.user_id = u.id
 WHERE u.id = ANY(%s)

-- name: saved_query_exists
SELECT 1 FROM saved_queries WHERE workspace_id = %s AND id = %s AND deleted_at IS NULL

-- name: report_exists
SELECT 1 FROM reports WHERE workspace_id = %s AND id = %s AND deleted_at IS NULL
