-- Console sessions signed out before they expired (timekeeper.platform.sessions).

-- name: revoke
-- Record the sign-out (a second one keeps the first instant) and forget the workspace's
-- revocations whose sessions have expired anyway.
WITH forgotten AS (
    DELETE FROM console_session_revocations
     WHERE workspace_id = %(workspace_id)s AND expires_at < %(now)s
)
INSERT INTO console_session_revocations (workspace_id, session_id, revoked_at, expires_at)
VALUES (%(workspace_id)s, %(session_id)s, %(now)s, %(expires_at)s)
ON CONFLICT (workspace_id, session_id) DO NOTHING

-- name: revoked_at
SELECT revoked_at
  FROM console_session_revocations
 WHERE workspace_id = %(workspace_id)s AND session_id = %(session_id)s

-- name: display_name
-- The signed-in person's name as the directory knows it (NULL: not in the directory).
SELECT display_name FROM users WHERE id = %(user_id)s
