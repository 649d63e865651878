-- A workspace's settings its admins change (timekeeper.platform.workspace_settings).

-- name: get_settings
SELECT timezone, locale, notify_admins FROM workspaces WHERE id = %(workspace_id)s FOR UPDATE

-- name: read_settings
SELECT timezone, locale, notify_admins FROM workspaces WHERE id = %(workspace_id)s

-- name: set_timezone
UPDATE workspaces SET timezone = %(timezone)s WHERE id = %(workspace_id)s

-- name: set_locale
UPDATE workspaces SET locale = %(locale)s WHERE id = %(workspace_id)s

-- name: set_notify_admins
UPDATE workspaces SET notify_admins = %(notify_admins)s WHERE id = %(workspace_id)s

-- name: count_in_zone
-- The workspace's live schedules whose rule is in the zone (those a zone change moves).
SELECT count(*) FROM schedules
 WHERE workspace_id = %(workspace_id)s AND deleted_at IS NULL AND timezone = %(timezone)s

-- name: schedules_in_zone
SELECT id, name, status, recurrence, next_due_at FROM schedules
 WHERE workspace_id = %(workspace_id)s AND deleted_at IS NULL AND timezone = %(timezone)s
 ORDER BY name, id
 LIMIT %(limit)s

-- name: notice_mail
-- The workspace's current members who are active users, by display name, with their
-- notice e-mail opt-out (and who set it: NULL the person).
SELECT u.id AS user_id, u.display_name, o.opted_out_at, o.set_by
  FROM workspace_memberships m JOIN users u ON u.id = m.user_id
  LEFT JOIN notice_mail_opt_outs o ON o.workspace_id = m.workspace_id AND o.user_id = u.id
 WHERE m.workspace_id = %(workspace_id)s AND m.left_at IS NULL AND u.status = 'active'
 ORDER BY u.display_name, u.id
 LIMIT %(limit)s

-- name: lock_notice_mail
SELECT pg_advisory_xact_lock(hashtextextended('notice_mail:' || %(workspace_id)s::text || ':' || %(user_id)s, 0))

-- name: is_member
SELECT true FROM workspace_memberships m JOIN users u ON u.id = m.user_id
 WHERE m.workspace_id = %(workspace_id)s AND m.user_id = %(user_id)s AND m.left_at IS NULL AND u.status = 'active'

-- name: opt_out_of
SELECT opted_out_at, set_by FROM notice_mail_opt_outs
 WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s

-- name: admin_opt_out
INSERT INTO notice_mail_opt_outs (workspace_id, user_id, opted_out_at, set_by)
VALUES (%(workspace_id)s, %(user_id)s, %(now)s, %(set_by)s)

-- name: admin_resume
DELETE FROM notice_mail_opt_outs
 WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s AND set_by IS NOT NULL
