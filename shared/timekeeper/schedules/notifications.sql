-- The owner-notification outbox (timekeeper.schedules.notifications).

-- name: insert_notification
INSERT INTO schedule_notifications (schedule_id, workspace_id, owner, kind, payload, created_at, event_key, topic)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id

-- name: insert_notifications
INSERT INTO schedule_notifications (schedule_id, workspace_id, owner, kind, payload, created_at, event_key, topic)
SELECT v.schedule_id, v.workspace_id, v.owner, v.kind, v.payload, %(now)s, v.event_key, v.topic
  FROM unnest(%(schedule_id)s::uuid[], %(workspace_id)s::uuid[], %(owner)s::text[], %(kind)s::text[],
              %(payload)s::jsonb[], %(event_key)s::text[], %(topic)s::boolean[])
       AS v(schedule_id, workspace_id, owner, kind, payload, event_key, topic)

-- name: lock_next_unsent
SELECT id, kind, payload FROM schedule_notifications
 WHERE owner = %s AND sent_at IS NULL AND topic ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED

-- name: count_attempt
UPDATE schedule_notifications SET attempts = attempts + 1 WHERE id = %s

-- name: mark_sent
UPDATE schedule_notifications SET sent_at = %s, attempts = attempts + 1 WHERE id = %s
