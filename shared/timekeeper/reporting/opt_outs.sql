-- One-click opt-outs of query schedules' messages (timekeeper.reporting.opt_outs).

-- name: record_opt_out
-- The first opt-out is kept (a second click changes nothing); an opt-out while a
-- re-subscription invitation was open withdraws the invitation.
INSERT INTO mail_opt_outs (workspace_id, schedule_id, user_id, run_id, opted_out_at)
VALUES (%(workspace_id)s, %(schedule_id)s, %(user_id)s, %(run_id)s, %(now)s)
ON CONFLICT (schedule_id, user_id) DO UPDATE SET resubscribe_invited_at = NULL, resubscribe_invited_by = NULL
RETURNING (xmax = 0) AS new

-- name: opted_out_among
SELECT user_id FROM mail_opt_outs WHERE workspace_id = %s AND schedule_id = %s AND user_id = ANY(%s)

-- name: list_opt_outs
SELECT workspace_id, schedule_id, user_id, run_id, opted_out_at, resubscribe_invited_at, resubscribe_invited_by
  FROM mail_opt_outs WHERE workspace_id = %s AND schedule_id = %s ORDER BY opted_out_at, user_id

-- name: get_opt_out
SELECT workspace_id, schedule_id, user_id, run_id, opted_out_at, resubscribe_invited_at, resubscribe_invited_by
  FROM mail_opt_outs WHERE workspace_id = %s AND schedule_id = %s AND user_id = %s

-- name: invite
UPDATE mail_opt_outs SET resubscribe_invited_at = %(now)s, resubscribe_invited_by = %(actor)s
 WHERE workspace_id = %(workspace_id)s AND schedule_id = %(schedule_id)s AND user_id = %(user_id)s
RETURNING user_id, opted_out_at

-- name: accept
DELETE FROM mail_opt_outs
 WHERE workspace_id = %(workspace_id)s AND schedule_id = %(schedule_id)s AND user_id = %(user_id)s
   AND resubscribe_invited_at IS NOT NULL
RETURNING user_id

-- name: record_notice_opt_out
-- A person's opt-out of the workspace's notice e-mails; a second click keeps the first.
INSERT INTO notice_mail_opt_outs (workspace_id, user_id, opted_out_at)
VALUES (%(workspace_id)s, %(user_id)s, %(now)s)
ON CONFLICT (workspace_id, user_id) DO NOTHING
RETURNING true

-- name: notice_opted_out
SELECT opted_out_at FROM notice_mail_opt_outs WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s

-- name: resume_notice_mail
DELETE FROM notice_mail_opt_outs WHERE workspace_id = %(workspace_id)s AND user_id = %(user_id)s RETURNING true
