-- name: record_events
-- The one writer of schedule history: any number of events in one statement.
INSERT INTO schedule_events (schedule_id, workspace_id, run_id, kind, actor, reason, detail, at)
SELECT v.schedule_id, v.workspace_id, v.run_id, v.kind, %(actor)s, v.reason, v.detail, %(now)s
  FROM unnest(%(schedule_id)b::uuid[], %(workspace_id)b::uuid[], %(run_id)b::uuid[], %(kind)b::text[],
              %(reason)b::text[], %(detail)b::jsonb[])
       AS v(schedule_id, workspace_id, run_id, kind, reason, detail)

-- name: mark_published
-- The queue accepted these runs' current offers. Rows are locked in id order (as the
-- consumer's start does), so a consumer starting a just-published run never deadlocks
-- with this statement.
-- It commits on its own without waiting for its WAL flush (`relaxed`): a lost record costs
-- one re-offer.
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true)
), accepted AS (
    SELECT id FROM schedule_runs
     WHERE id = ANY(%(ids)b::uuid[]) AND offered_at IS NOT NULL AND published_at IS NULL
     ORDER BY id
       FOR UPDATE
)
UPDATE schedule_runs AS r
   SET published_at = %(now)s, publish_count = r.publish_count + 1
  FROM accepted
 WHERE r.id = accepted.id AND EXISTS (SELECT FROM relaxed)

-- name: release_runs
-- The queue refused these messages: clear the offer so the next pass offers them again.
-- `recorded`: runs inserted recorded as accepted (a claim batch's): that count is taken back.
WITH refused AS (
    SELECT id FROM schedule_runs
     WHERE id = ANY(%(ids)b::uuid[]) AND state IN ('queued', 'running')
     ORDER BY id
       FOR UPDATE
)
UPDATE schedule_runs AS r
   SET offered_at = NULL, published_at = NULL, released_at = %(now)s,
       publish_count = r.publish_count - (r.published_at IS NOT NULL AND r.id = ANY(%(recorded)b::uuid[]))::integer
  FROM refused
 WHERE r.id = refused.id
RETURNING r.id, r.schedule_id, r.workspace_id

-- name: finish_pending_offer
-- A claim batch's send is over: its accepted runs stay recorded as published (as they were
-- inserted), the refused ones were released in the same transaction. Commits without
-- waiting for its WAL flush: a lost delete costs one more offer of the batch's queued runs.
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
DELETE FROM schedule_pending_offers WHERE id = %(id)s AND EXISTS (SELECT FROM relaxed)
