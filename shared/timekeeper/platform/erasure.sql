-- name: erase_person
-- Through the migration's SECURITY DEFINER function: every workspace.
SELECT user_digest, recipient_lists, opt_outs, delivery_addresses, suppressions
  FROM timekeeper_erase_person(%(user_id)s, %(actor)s, %(now)s)

-- name: erase_member_snapshot_rows
-- Through the migration's SECURITY DEFINER function (0063): every snapshot version's rows
-- of the workspace's member, pseudonymised.
SELECT timekeeper_erase_member_snapshot_rows(%(workspace_id)s, %(member_id)s, %(now)s) AS snapshot_rows
