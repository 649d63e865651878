-- Owner notices: the people's side of the notification outbox (timekeeper.platform.notices).

-- name: probe
SELECT EXISTS (SELECT 1 FROM schedule_notifications WHERE people_at IS NULL) AS untold

-- name: tell_people
-- One statement per pass: take untold events (locked, oldest first), find each one's
-- recipients (the schedule's owner; the workspace's admins when the workspace asks for
-- copies, when the schedule is ownerless, or when the event names no schedule), keep the
-- active current members, insert one notice per (event, recipient) (the event key makes a
-- second telling of the same event, by any path, insert nothing) and mark the events told.
WITH untold AS (
    SELECT id, schedule_id, workspace_id, kind, payload, event_key, created_at
      FROM schedule_notifications
     WHERE people_at IS NULL
     ORDER BY id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), recipients AS (
    SELECT u.id AS notification_id, s.owner_user_id AS user_id, 'owner' AS audience
      FROM untold AS u JOIN schedules AS s ON s.id = u.schedule_id
     WHERE u.kind <> 'schedule_ownerless' AND s.owner_user_id IS NOT NULL
    UNION ALL
    SELECT u.id, m.user_id, 'admin'
      FROM untold AS u
      JOIN workspaces AS w ON w.id = u.workspace_id
      JOIN workspace_memberships AS m ON m.workspace_id = u.workspace_id AND 'workspace:admin' = ANY (m.roles)
     WHERE w.notify_admins OR u.kind = 'schedule_ownerless' OR u.schedule_id IS NULL
), eligible AS (
    SELECT DISTINCT ON (r.notification_id, r.user_id) r.notification_id, r.user_id, r.audience
      FROM recipients AS r
      JOIN untold AS u ON u.id = r.notification_id
      JOIN users AS p ON p.id = r.user_id AND p.status = 'active'
      JOIN workspace_memberships AS m ON m.workspace_id = u.workspace_id AND m.user_id = r.user_id
                                      AND m.left_at IS NULL
     ORDER BY r.notification_id, r.user_id, r.audience DESC
), inserted AS (
    INSERT INTO owner_notices (workspace_id, user_id, event_key, kind, audience, schedule_id, reason, detail,
                               created_at)
    SELECT u.workspace_id, e.user_id, u.event_key, u.kind, e.audience, u.schedule_id, u.payload ->> 'reason',
           u.payload, u.created_at
      FROM eligible AS e JOIN untold AS u ON u.id = e.notification_id
     ORDER BY u.id, e.user_id
    ON CONFLICT (event_key, user_id) DO NOTHING
    RETURNING 1
), told AS (
    UPDATE schedule_notifications SET people_at = %(now)s WHERE id IN (SELECT id FROM untold) RETURNING 1
)
SELECT (SELECT count(*) FROM told) AS events, (SELECT count(*) FROM inserted) AS notices

-- name: list_notices
SELECT id, workspace_id, user_id, kind, audience, schedule_id, reason, detail, created_at, read_at, mailed_at
  FROM owner_notices
 WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s
   AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
   AND (NOT %(unread)s OR read_at IS NULL)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: mark_read
UPDATE owner_notices SET read_at = %(now)s
 WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s AND read_at IS NULL
   AND (%(ids)s::bigint[] IS NULL OR id = ANY (%(ids)s::bigint[]))

-- name: count_unread
SELECT count(*) FROM owner_notices
 WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s AND read_at IS NULL

-- name: notify_person
-- One notice to one person, decided by an action in the API (an owner inviting a
-- recipient back): written only for an active user who is a current member; the event
-- key makes a repeat of the same decision insert nothing.
INSERT INTO owner_notices (workspace_id, user_id, event_key, kind, audience, schedule_id, reason, detail, created_at)
SELECT %(workspace_id)s, p.id, %(event_key)s, %(kind)s, %(audience)s, %(schedule_id)s, %(reason)s, %(detail)s, %(now)s
  FROM users AS p
  JOIN workspace_memberships AS m ON m.user_id = p.id AND m.workspace_id = %(workspace_id)s AND m.left_at IS NULL
 WHERE p.id = %(user_id)s AND p.status = 'active'
ON CONFLICT (event_key, user_id) DO NOTHING
RETURNING id
