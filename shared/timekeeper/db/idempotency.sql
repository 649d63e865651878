-- name: record_key
-- Records the request an Idempotency-Key names, unless the requester used the key before.
INSERT INTO idempotency_keys (workspace_id, requester, key, fingerprint, method, path, created_at)
VALUES (%(workspace_id)s, %(requester)s, %(key)s, %(fingerprint)s, %(method)s, %(path)s, %(now)s)
ON CONFLICT (workspace_id, requester, key) DO NOTHING

-- name: get_key
SELECT fingerprint, method, path, created_at
  FROM idempotency_keys
 WHERE workspace_id = %(workspace_id)s AND requester = %(requester)s AND key = %(key)s
