-- The owner-notification outbox (timekeeper.schedules.notifications).

-- name: insert_notification
INSERT INTO schedule_notifications (schedule_id, workspace_id, owner, kind, payload, created_at)
VALUES (%s, %s, %s, %s, %s, %s) RETURNING id

-- name: lock_next_unsent
SELECT id, kind, payload FROM schedule_notifications
 WHERE owner = %s AND sent_at IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED

-- name: count_attempt
UPDATE schedule_notifications SET attempts = attempts + 1 WHERE id = %s

-- name: mark_sent
UPDATE schedule_notifications SET sent_at = %s, attempts = attempts + 1 WHERE id = %s
