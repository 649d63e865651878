-- Named queries of timekeeper.local.delivery (never deployed: the layer leaves local/ out).

-- name: emails_of_users
SELECT id, email FROM users WHERE id = ANY(%s)

-- name: display_name_of_user
SELECT coalesce((SELECT display_name FROM users WHERE id = %s), %s) AS name

-- name: reactivate_user
UPDATE users SET status = 'active' WHERE id = %s

-- name: rejoin_workspace
UPDATE workspace_memberships SET left_at = NULL WHERE workspace_id = %s AND user_id = %s

-- name: grant_queries_read
UPDATE workspace_memberships SET roles = array_append(roles, 'queries:read') WHERE workspace_id = %s AND user_id = %s

-- name: set_query_schedule_owner
UPDATE query_schedules SET owner_user_id = %s WHERE schedule_id = %s

-- name: set_schedule_owner
UPDATE schedules SET owner_user_id = %s WHERE id = %s

-- name: deactivate_user
UPDATE users SET status = 'deactivated' WHERE id = %s

-- name: revoke_queries_read
UPDATE workspace_memberships SET roles = array_remove(roles, 'queries:read') WHERE workspace_id = %s AND user_id = %s

-- name: leave_workspace_at
UPDATE workspace_memberships SET left_at = %s WHERE workspace_id = %s AND user_id = %s

-- name: deliveries_by_status
SELECT status, coalesce(skip_reason, '') AS reason, count(*) AS n
FROM query_deliveries GROUP BY 1, 2 ORDER BY 1, 2

-- name: query_runs_by_outcome
SELECT s.name, r.trigger, r.state, coalesce(r.outcome_code, '') AS outcome, count(*) AS n
 FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
WHERE r.owner = 'queries' GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4

-- name: message_states_by_kind
SELECT state, coalesce(kind, '') AS kind, count(*) AS n FROM message_states
GROUP BY 1, 2 ORDER BY 1, 2

-- name: notice_message_states
SELECT user_id, state, event_at FROM message_states WHERE run_id IS NULL
ORDER BY event_at

-- name: suppressions
SELECT address, reason, suppressed_at FROM mail_suppressions
ORDER BY suppressed_at, address

-- name: opt_outs
-- Who opted out by display name (the id when the person has none).
SELECT s.name, o.user_id, coalesce(u.display_name, o.user_id) AS person, o.opted_out_at FROM mail_opt_outs o
JOIN schedules s ON s.id = o.schedule_id LEFT JOIN users u ON u.id = o.user_id ORDER BY o.opted_out_at

-- name: snapshot_deliveries
SELECT s.name, r.occurrence_at, r.state, d.snapshot_basis, d.snapshot_version_changed
 FROM query_delivery_sources d JOIN schedule_runs r ON r.id = d.run_id
 JOIN schedules s ON s.id = d.schedule_id
WHERE d.snapshot_basis IS NOT NULL ORDER BY r.occurrence_at

-- name: protection_of_snapshot_run
SELECT protection FROM snapshot_runs WHERE id = %s
