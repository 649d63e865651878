-- A delivery's test sends (timekeeper.reporting.send_tests).

-- name: lock_person
-- Serialize one person's test requests in a workspace (the per-person count stays exact
-- under concurrent requests for different deliveries).
SELECT pg_advisory_xact_lock(hashtextextended('timekeeper.test_send:' || %(ws)s::text || ':' || %(user_id)s, 0))

-- name: recent_of_schedule
-- A delivery's test runs since an instant: how many, and the oldest's request time.
SELECT count(*) AS n, min(queued_at) AS oldest FROM schedule_runs
 WHERE workspace_id = %(ws)s AND schedule_id = %(schedule_id)s AND trigger = 'test' AND queued_at > %(since)s

-- name: recent_of_person
-- A person's test runs in the workspace since an instant (schedule_runs_test_requester_idx).
SELECT count(*) AS n, min(queued_at) AS oldest FROM schedule_runs
 WHERE workspace_id = %(ws)s AND requested_by = %(user_id)s AND trigger = 'test' AND queued_at > %(since)s
