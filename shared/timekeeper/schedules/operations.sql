-- name: schedules_needing_attention
-- Through the migration's SECURITY DEFINER function: every workspace, at most 500 rows.
SELECT * FROM operations_schedules_needing_attention(%(limit)s)

-- name: stranded_runs
SELECT * FROM operations_stranded_runs(%(owner)s, %(now)s, %(published_before)s, %(limit)s)

-- name: record_action
INSERT INTO operations_actions (action, actor, target, reason, detail, at)
VALUES (%(action)s, %(actor)s, %(target)s, %(reason)s, %(detail)s, %(at)s)
RETURNING id, action, actor, target, reason, detail, at

-- name: recent_actions
SELECT id, action, actor, target, reason, detail, at
  FROM operations_actions
 ORDER BY at DESC, id DESC
 LIMIT %(limit)s
