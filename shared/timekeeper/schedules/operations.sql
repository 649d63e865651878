-- name: schedules_needing_attention
-- Through the migration's SECURITY DEFINER function: every workspace, at most 500 rows.
SELECT * FROM operations_schedules_needing_attention(%(limit)s)

-- name: stranded_runs
SELECT * FROM operations_stranded_runs(%(owner)s, %(now)s, %(published_before)s, %(limit)s)
