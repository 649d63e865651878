-- Named queries of timekeeper.local.serve_sample (never deployed: the layer leaves local/ out).

-- name: lock_serve_sample
SELECT pg_advisory_xact_lock(hashtext('timekeeper.serve_sample'))

-- name: sample_schedule_exists
SELECT 1 FROM schedules WHERE workspace_id = %s AND name = %s
