-- A workspace's claim weight, its tier in the fair claim (timekeeper.platform.claim_weights).

-- name: staff_weights
-- Through the SECURITY DEFINER function of 0080 (names, ids, zones, states and weights).
SELECT * FROM staff_claim_weights(%(search)s, %(limit)s)

-- name: lock_weight
SELECT id, name, timezone, status, claim_weight FROM workspaces WHERE id = %(workspace_id)s FOR UPDATE

-- name: set_weight
UPDATE workspaces SET claim_weight = %(weight)s WHERE id = %(workspace_id)s
