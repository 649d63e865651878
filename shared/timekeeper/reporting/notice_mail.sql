-- Notice e-mails through the per-recipient outbox of deliveries (timekeeper.reporting.notice_mail).
-- A notice message's communication key is notice:<workspace>:<user>:<first notice id>; it has no run.

-- name: waiting_people
SELECT DISTINCT workspace_id, user_id FROM owner_notices WHERE mailed_at IS NULL LIMIT %(limit)s

-- name: lock_unmailed
SELECT n.id, n.kind, n.reason, n.detail, n.schedule_id, n.mail_key, n.created_at, s.name AS schedule_name
  FROM owner_notices AS n LEFT JOIN schedules AS s ON s.id = n.schedule_id
 WHERE n.workspace_id = %(workspace_id)s AND n.user_id = %(user_id)s AND n.mailed_at IS NULL
 ORDER BY n.id
   FOR UPDATE OF n SKIP LOCKED

-- name: person
SELECT u.email, u.display_name, w.name AS workspace_name, w.timezone
  FROM users AS u, workspaces AS w WHERE u.id = %(user_id)s AND w.id = %(workspace_id)s

-- name: outbox_row
SELECT provider_message_id, sent_at, submissions FROM query_delivery_outbox WHERE communication_key = %(key)s

-- name: last_notice_message
-- When this person was last sent a notice message in this workspace (the digest window's start).
SELECT max(sent_at) FROM query_delivery_outbox
 WHERE run_id IS NULL AND workspace_id = %(workspace_id)s AND user_id = %(user_id)s
   AND provider_message_id IS NOT NULL

-- name: claim
INSERT INTO query_delivery_outbox (communication_key, run_id, user_id, workspace_id, claimed_attempt, claimed_at)
VALUES (%(key)s, NULL, %(user_id)s, %(workspace_id)s, 1, %(now)s)
ON CONFLICT (communication_key) DO UPDATE SET claimed_attempt = query_delivery_outbox.claimed_attempt + 1,
       claimed_at = EXCLUDED.claimed_at
 WHERE query_delivery_outbox.provider_message_id IS NULL

-- name: assign_key
UPDATE owner_notices SET mail_key = %(key)s WHERE id = ANY (%(ids)s::bigint[])

-- name: no_address
UPDATE owner_notices SET mail_key = 'no_address', mailed_at = %(now)s WHERE id = ANY (%(ids)s::bigint[])

-- name: suppressed
-- The address bounced permanently or complained (mail_suppressions): kept in the product only.
UPDATE owner_notices SET mail_key = 'suppressed', mailed_at = %(now)s WHERE id = ANY (%(ids)s::bigint[])

-- name: opted_out
-- The person turned the workspace's notice e-mails off (notice_mail_opt_outs).
SELECT EXISTS (SELECT 1 FROM notice_mail_opt_outs WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s)

-- name: unsubscribed
-- Kept in the product only: the person opted out of notice e-mails.
UPDATE owner_notices SET mail_key = 'unsubscribed', mailed_at = %(now)s WHERE id = ANY (%(ids)s::bigint[])

-- name: record_sent
WITH outbox AS (
    UPDATE query_delivery_outbox SET submissions = submissions + 1,
           provider_message_id = COALESCE(provider_message_id, %(id)s), sent_at = COALESCE(sent_at, %(now)s),
           last_error = NULL
     WHERE communication_key = %(key)s
    RETURNING sent_at)
UPDATE owner_notices SET mailed_at = (SELECT sent_at FROM outbox)
 WHERE mail_key = %(key)s AND mailed_at IS NULL

-- name: record_failed
UPDATE query_delivery_outbox SET submissions = submissions + 1, last_error = %(code)s
 WHERE communication_key = %(key)s

-- name: close_refused
-- The provider refused the message permanently: its notices are done with mail (kept in the product);
-- mail_key still names the outbox row, whose last_error is the refusal's code.
UPDATE owner_notices SET mailed_at = %(now)s WHERE mail_key = %(key)s AND mailed_at IS NULL

-- name: mark_recorded
UPDATE owner_notices SET mailed_at = %(sent_at)s WHERE mail_key = %(key)s AND mailed_at IS NULL
