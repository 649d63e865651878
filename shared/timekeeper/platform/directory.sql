-- Workspaces, users and memberships (timekeeper.platform.directory).

-- name: insert_workspace
INSERT INTO workspaces (id, name, timezone, status, snapshots_enabled, currency, locale, created_at)
VALUES (coalesce(%s, gen_random_uuid()), %s, %s, %s, %s, %s, %s, %s)
RETURNING id, name, timezone, status, snapshots_enabled, currency, created_at, locale

-- name: set_workspace_status
UPDATE workspaces SET status = %s WHERE id = %s

-- name: get_workspace
SELECT id, name, timezone, status, snapshots_enabled, currency, created_at, locale
  FROM workspaces WHERE id = %s

-- name: set_workspace_locale
UPDATE workspaces SET locale = %s WHERE id = %s

-- name: upsert_user
INSERT INTO users (id, display_name, email, status, created_at) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (id) DO UPDATE SET display_name = EXCLUDED.display_name, email = EXCLUDED.email,
                               status = EXCLUDED.status
RETURNING id, display_name, email, status, created_at

-- name: set_user_status
UPDATE users SET status = %s WHERE id = %s

-- name: add_member
INSERT INTO workspace_memberships (workspace_id, user_id, roles, joined_at)
VALUES (%s, %s, %s, %s)
ON CONFLICT (workspace_id, user_id) DO UPDATE
    SET roles = EXCLUDED.roles,
        joined_at = CASE WHEN workspace_memberships.left_at IS NULL
                         THEN workspace_memberships.joined_at ELSE EXCLUDED.joined_at END,
        left_at = NULL
RETURNING workspace_id, user_id, roles, joined_at, left_at

-- name: leave_workspace
UPDATE workspace_memberships SET left_at = %s
 WHERE workspace_id = %s AND user_id = %s AND left_at IS NULL

-- name: get_user
SELECT id, display_name, email, status, created_at FROM users WHERE id = %s

-- name: get_membership
SELECT workspace_id, user_id, roles, joined_at, left_at FROM workspace_memberships
 WHERE workspace_id = %s AND user_id = %s

-- name: set_notify_admins
UPDATE workspaces SET notify_admins = %s WHERE id = %s

-- name: list_members
-- The workspace's current members who are active users, by display name then id, after a
-- (display_name, id) key; the caller asks for one row more than a page.
SELECT u.id AS user_id, u.display_name, u.email
  FROM workspace_memberships m JOIN users u ON u.id = m.user_id
 WHERE m.workspace_id = %(ws)s AND m.left_at IS NULL AND u.status = 'active'
   AND (%(after_name)s::text IS NULL OR (u.display_name, u.id) > (%(after_name)s::text, %(after_id)s::text))
 ORDER BY u.display_name, u.id
 LIMIT %(limit)s

-- name: display_names
-- The directory's names of the given users (those it knows with a name).
SELECT id, display_name FROM users WHERE id = ANY(%(ids)s::text[]) AND display_name <> ''
