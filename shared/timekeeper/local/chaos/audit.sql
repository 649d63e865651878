-- Named queries of timekeeper.local.chaos.audit (never deployed: the layer leaves local/ out).

-- name: last_queued_at
SELECT max(queued_at) AS at FROM schedule_runs

-- name: first_pause_by_schedule
SELECT schedule_id, min(at) AS at FROM schedule_events WHERE kind = 'paused' GROUP BY 1

-- name: scheduled_runs
SELECT schedule_id, occurrence_at, skipped_backlog, first_skipped_at
FROM schedule_runs WHERE trigger = 'scheduled' ORDER BY occurrence_at

-- name: live_schedules
SELECT id, name, recurrence::text AS rule_text, status, next_due_at
FROM schedules WHERE deleted_at IS NULL

-- name: count_runs
SELECT count(*) AS n FROM schedule_runs

-- name: unfinished_runs
SELECT r.id, s.name, r.state, r.attempts FROM schedule_runs r
 JOIN schedules s ON s.id = r.schedule_id
WHERE r.state IN ('queued', 'running')

-- name: count_snapshot_runs
SELECT count(*) AS n FROM snapshot_runs

-- name: unfinished_snapshot_runs
SELECT id, snapshot_type, period, state FROM snapshot_runs
WHERE state IN ('planned', 'queued', 'running')

-- name: run_state
SELECT state, attempts, finished_at FROM schedule_runs WHERE id = %s

-- name: writes_of_attempt
SELECT (SELECT count(*) FROM query_deliveries WHERE run_id = %(run)s AND attempt = %(attempt)s)
     + (SELECT count(*) FROM query_delivery_outbox WHERE run_id = %(run)s
           AND claimed_attempt = %(attempt)s) AS n

-- name: batches_opened_by_runs
SELECT b.id, b.name, r.state, r.detail -> 'opened_batch' ->> 'id' AS reported
  FROM batches b LEFT JOIN schedule_runs r ON r.id = b.opened_by_run_id
 WHERE b.opened_by_run_id IS NOT NULL

-- name: batch_rolls_succeeded
SELECT r.id, r.detail -> 'opened_batch' ->> 'id' AS reported,
       (SELECT count(*) FROM batches b WHERE b.opened_by_run_id = r.id) AS opened
  FROM schedule_runs r
 WHERE r.work_kind = 'batch.roll' AND r.state = 'succeeded'

-- name: closed_auto_posting_batches
SELECT b.id, b.name, b.status, count(j.id) AS jobs, min(j.status) AS job_status
  FROM batches b LEFT JOIN posting_jobs j ON j.batch_id = b.id
 WHERE b.status <> 'open' AND b.auto_post GROUP BY b.id, b.name, b.status

-- name: prepared_invoices
SELECT i.id, r.state FROM draft_invoices i LEFT JOIN schedule_runs r ON r.id = i.prepared_by_run_id
 WHERE i.prepared_by_run_id IS NOT NULL

-- name: recorded_delivery_messages
SELECT run_id, user_id, provider_message_id FROM query_delivery_outbox WHERE run_id IS NOT NULL

-- name: sent_notice_messages
SELECT u.email, o.provider_message_id FROM query_delivery_outbox o
 JOIN users u ON u.id = o.user_id
WHERE o.run_id IS NULL AND o.provider_message_id IS NOT NULL

-- name: deliveries_with_run_state
SELECT d.run_id, d.user_id, d.status, d.error_code, r.state AS run_state
FROM query_deliveries d JOIN schedule_runs r ON r.id = d.run_id

-- name: state_of_run
SELECT state FROM schedule_runs WHERE id = %s

-- name: rejected_notice_messages
SELECT o.communication_key, o.provider_message_id, u.email,
       (SELECT count(*) FROM owner_notices n
         WHERE n.mail_key = o.communication_key AND n.mailed_at IS NULL) AS open
  FROM query_delivery_outbox o JOIN users u ON u.id = o.user_id
 WHERE o.run_id IS NULL AND o.last_error = 'rejected'

-- name: succeeded_runs_with_open_deliveries
SELECT r.id, count(*) FILTER (WHERE d.status NOT IN ('sent', 'skipped')
                                  AND NOT COALESCE(d.error_code = ANY(%s::text[]), false)) AS open
  FROM schedule_runs r JOIN query_deliveries d ON d.run_id = r.id
 WHERE r.state = 'succeeded' GROUP BY r.id

-- name: published_snapshot_runs
SELECT id, snapshot_type, period, rows_written FROM snapshot_runs
WHERE state = 'published'

-- name: duplicate_current_snapshot_versions
SELECT workspace_id, snapshot_type, period, count(*) AS n FROM snapshot_runs
WHERE is_current GROUP BY 1, 2, 3 HAVING count(*) > 1

-- name: settled_runs
SELECT id, schedule_id, trigger, state, outcome_code, finished_at, occurrence_at
FROM schedule_runs WHERE finished_at IS NOT NULL

-- name: resumed_schedules
SELECT DISTINCT schedule_id FROM schedule_events WHERE kind = 'resumed'

-- name: schedules_with_streaks
SELECT id, name, owner, status, pause_reason, consecutive_failures
FROM schedules WHERE deleted_at IS NULL

-- name: terminal_run_ids
SELECT id FROM schedule_runs WHERE state IN ('succeeded', 'skipped', 'failed')
UNION ALL SELECT id FROM snapshot_runs WHERE state IN ('published', 'failed', 'skipped')

-- name: membership_count_rows_of_run
SELECT count(*) AS n FROM snapshot_membership_counts WHERE run_id = %s

-- name: ar_aging_rows_of_run
SELECT count(*) AS n FROM snapshot_ar_aging WHERE run_id = %s

-- name: selftest_rows_of_run
SELECT count(*) AS n FROM snapshot_selftest_rows WHERE run_id = %s
