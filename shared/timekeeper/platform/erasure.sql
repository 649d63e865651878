-- name: erase_person
-- Through the migration's SECURITY DEFINER function: every workspace.
SELECT user_digest, recipient_lists, opt_outs, delivery_addresses, suppressions
  FROM timekeeper_erase_person(%(user_id)s, %(actor)s, %(now)s)
