-- name: schedules_needing_attention
-- Through the migration's SECURITY DEFINER function: every workspace, at most 500 rows,
-- then the optional filters (work kind, status, a part of the name in any case).
SELECT * FROM operations_schedules_needing_attention(%(cap)s)
 WHERE (%(kind)s::text IS NULL OR work_kind = %(kind)s::text)
   AND (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(name)s::text IS NULL OR strpos(lower(name), lower(%(name)s::text)) > 0)
 LIMIT %(limit)s

-- name: stranded_runs
SELECT * FROM operations_stranded_runs(%(owner)s, %(now)s, %(published_before)s, %(cap)s)
 WHERE (%(kind)s::text IS NULL OR work_kind = %(kind)s::text)
   AND (%(state)s::text IS NULL OR state = %(state)s::text)
 LIMIT %(limit)s

-- name: record_action
INSERT INTO operations_actions (action, actor, target, reason, detail, at)
VALUES (%(action)s, %(actor)s, %(target)s, %(reason)s, %(detail)s, %(at)s)
RETURNING id, action, actor, target, reason, detail, at

-- name: recent_actions
-- The latest actions with each actor's display name (null: the directory names nobody).
SELECT a.id, a.action, a.actor, a.target, a.reason, a.detail, a.at, u.display_name AS actor_name
  FROM operations_actions a LEFT JOIN users u ON u.id = a.actor
 ORDER BY a.at DESC, a.id DESC
 LIMIT %(limit)s

-- name: schedule_names
-- Within one entered workspace: the named schedules' names and each one's latest failed run.
SELECT s.id, s.name,
       (SELECT r.id FROM schedule_runs r
         WHERE r.schedule_id = s.id AND r.state = 'failed'
         ORDER BY r.queued_at DESC LIMIT 1) AS last_failed_run_id
  FROM schedules s
 WHERE s.id = ANY(%(ids)s::uuid[])
