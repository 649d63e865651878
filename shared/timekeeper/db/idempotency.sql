-- name: record_key
-- Records the request an Idempotency-Key names, unless the requester used the key before.
INSERT INTO idempotency_keys (workspace_id, requester, key, fingerprint, method, path, created_at)
VALUES (%(workspace_id)s, %(requester)s, %(key)s, %(fingerprint)s, %(method)s, %(path)s, %(now)s)
ON CONFLICT (workspace_id, requester, key) DO NOTHING

-- name: get_key
SELECT fingerprint, method, path, created_at
  FROM idempotency_keys
 WHERE workspace_id = %(workspace_id)s AND requester = %(requester)s AND key = %(key)s

-- name: lock_response
-- The response a creating request recorded under the key, the row locked until the
-- transaction ends (a twin request sent at once waits here for the first to commit).
SELECT response_status, response_body, response_location
  FROM idempotency_keys
 WHERE workspace_id = %(workspace_id)s AND requester = %(requester)s AND key = %(key)s
   FOR UPDATE

-- name: record_response
UPDATE idempotency_keys
   SET response_status = %(status)s, response_body = %(body)s, response_location = %(location)s
 WHERE workspace_id = %(workspace_id)s AND requester = %(requester)s AND key = %(key)s
   AND response_status IS NULL

-- name: hold_key
-- Waits until no other session holds the key (a twin request's work), then holds it for
-- this session until release_key (or until the connection closes).
SELECT pg_advisory_lock(hashtextextended(%(lock)s, 0))

-- name: release_key
SELECT pg_advisory_unlock(hashtextextended(%(lock)s, 0))
