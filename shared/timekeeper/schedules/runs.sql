-- name: record_events
-- The one writer of schedule history: any number of events in one statement.
INSERT INTO schedule_events (schedule_id, workspace_id, run_id, kind, actor, reason, detail, at)
SELECT v.schedule_id, v.workspace_id, v.run_id, v.kind, %(actor)s, v.reason, v.detail, %(now)s
  FROM unnest(%(schedule_id)b::uuid[], %(workspace_id)b::uuid[], %(run_id)b::uuid[], %(kind)b::text[],
              %(reason)b::text[], %(detail)b::jsonb[])
       AS v(schedule_id, workspace_id, run_id, kind, reason, detail)

-- name: mark_published
-- The queue accepted these runs' current offers.
UPDATE schedule_runs
   SET published_at = %(now)s, publish_count = publish_count + 1
 WHERE id = ANY(%(ids)b::uuid[]) AND offered_at IS NOT NULL AND published_at IS NULL

-- name: release_runs
-- The queue refused these messages: clear the offer so the next pass offers them again.
UPDATE schedule_runs
   SET offered_at = NULL, published_at = NULL, released_at = %(now)s
 WHERE id = ANY(%(ids)b::uuid[]) AND state IN ('queued', 'running')
RETURNING id, schedule_id, workspace_id
