-- Fresh download links asked for by recipients (timekeeper.reporting.link_renewals).

-- name: lock_person
-- Requests of one person are decided one at a time (the limits count the earlier ones).
SELECT pg_advisory_xact_lock(hashtextextended('link-renewal:' || %(workspace_id)s::text || ':' || %(user_id)s, 0))

-- name: request
-- A new request unless the person asked for this delivery within the hour or made
-- the day's quota of requests in the workspace.
INSERT INTO query_delivery_link_renewals (workspace_id, run_id, user_id, requested_at)
SELECT %(workspace_id)s, %(run_id)s, %(user_id)s, %(now)s
 WHERE NOT EXISTS (SELECT 1 FROM query_delivery_link_renewals
                    WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s AND run_id = %(run_id)s
                      AND requested_at > %(now)s - make_interval(secs => %(per_delivery_s)s))
   AND (SELECT count(*) FROM query_delivery_link_renewals
         WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s
           AND requested_at > %(now)s - interval '1 day') < %(per_day)s
RETURNING id, requested_at

-- name: claim_pending
-- The oldest unsent requests with what their message needs (workers' login: every workspace).
SELECT r.id, r.workspace_id, r.run_id, r.user_id, d.address, d.schedule_id, src.object_key
  FROM query_delivery_link_renewals AS r
  JOIN query_deliveries AS d ON d.run_id = r.run_id AND d.user_id = r.user_id
  JOIN query_delivery_sources AS src ON src.run_id = r.run_id
 WHERE r.sent_at IS NULL AND r.error_code IS NULL
 ORDER BY r.id
 LIMIT %(limit)s
   FOR UPDATE OF r SKIP LOCKED

-- name: record_sent
UPDATE query_delivery_link_renewals
   SET sent_at = %(now)s, provider_message_id = %(message_id)s, link_expires_at = %(expires_at)s
 WHERE id = %(id)s

-- name: record_unsent
UPDATE query_delivery_link_renewals SET error_code = %(error_code)s WHERE id = %(id)s

-- name: list_for_delivery
SELECT id, workspace_id, run_id, user_id, requested_at, sent_at, provider_message_id, link_expires_at, error_code
  FROM query_delivery_link_renewals
 WHERE workspace_id = %(workspace_id)s AND run_id = %(run_id)s AND user_id = %(user_id)s
 ORDER BY id
