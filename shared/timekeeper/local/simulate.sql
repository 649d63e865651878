-- Named queries of `python -m timekeeper simulate` (never deployed: the layer leaves local/ out).

-- name: quiet_until
-- When the simulation may skip dispatcher passes. Busy (pass every minute): a run offered
-- but not published, or a claim batch whose send was never recorded (the next pass offers
-- them again), a pause notice waiting to be sent to the topic or an event waiting for the
-- people pass, a
-- planned or never-offered snapshot run, a posting job waiting for the sweep. Otherwise a
-- waiting run can only change when one of its thresholds passes: a published run that
-- never started is offered again `reoffer_after` after its publication, a started run's
-- lease expires (an exhausted one is settled then) and it is offered again `reoffer_after`
-- later, an offered snapshot job is offered again `snapshot_reoffer_after` after its
-- offer, a running snapshot job is lost `job_lost_after` after its heartbeat
-- (`wake_at`: the earliest such threshold still ahead, with the shortest reoffer_after of
-- the pipelines, so no pass that could act is skipped). Messages waiting for their
-- visibility timeout are the event sources' own stop. The next pass that can change
-- anything else is the one at the earliest next due instant (null when no active
-- schedule is due ever); a snapshot run waiting for its retry is due at retry_due_at; the
-- planner can only plan something new when a month ends in some workspace's timezone
-- (next_month_end).
SELECT EXISTS (SELECT 1 FROM schedule_runs WHERE state = 'queued' AND published_at IS NULL)
       OR EXISTS (SELECT 1 FROM schedule_pending_offers)
       OR EXISTS (SELECT 1 FROM schedule_notifications WHERE sent_at IS NULL AND topic)
       OR EXISTS (SELECT 1 FROM schedule_notifications WHERE people_at IS NULL)
       OR EXISTS (SELECT 1 FROM posting_jobs WHERE status = 'pending' AND created_at < %(now)s)
       OR EXISTS (SELECT 1 FROM snapshot_runs
                   WHERE state = 'planned' OR (state = 'queued' AND offered_at IS NULL)) AS busy,
       (SELECT min(t) FROM (
            SELECT published_at + %(reoffer_after)s::interval AS t FROM schedule_runs
             WHERE state = 'queued' AND published_at IS NOT NULL
            UNION ALL SELECT lease_until FROM schedule_runs WHERE state = 'running'
            UNION ALL SELECT lease_until + %(reoffer_after)s::interval FROM schedule_runs WHERE state = 'running'
            UNION ALL SELECT offered_at + %(snapshot_reoffer_after)s::interval FROM snapshot_runs
             WHERE state = 'queued'
            UNION ALL SELECT heartbeat_at + %(job_lost_after)s::interval FROM snapshot_runs
             WHERE state = 'running') AS thresholds
         WHERE t > %(now)s) AS wake_at,
       (SELECT min(next_due_at) FROM schedules WHERE status = 'active') AS next_due_at,
       (SELECT min(retry_due_at) FROM snapshot_runs WHERE state = 'retry_wait') AS snapshot_retry_at,
       (SELECT min((date_trunc('month', %(now)s AT TIME ZONE timezone) + interval '1 month') AT TIME ZONE timezone)
          FROM workspaces) AS next_month_end;

-- name: runs_by_kind
SELECT work_kind, trigger, state, outcome_code, count(*) AS runs
  FROM schedule_runs GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4;

-- name: backlog
SELECT s.name, r.occurrence_at, r.skipped_backlog, r.first_skipped_at
  FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
 WHERE r.skipped_backlog > 0 ORDER BY r.occurrence_at, s.name;

-- name: dst_shifted
SELECT s.name, s.timezone, r.occurrence_local, r.occurrence_at, r.state, r.outcome_code
  FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
 WHERE r.dst_shifted ORDER BY r.occurrence_at;

-- name: scheduled_runs_in_zones_with_dst
-- Candidates of the DST-overlap table (the caller keeps the repeated local times).
SELECT s.name, s.timezone, r.occurrence_local, r.occurrence_at, r.state
  FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
 WHERE r.trigger = 'scheduled' AND s.timezone <> 'UTC' ORDER BY r.occurrence_at;

-- name: paused
-- With the person the schedule answers to and the kinds of notice they got about it.
SELECT s.name, s.status, s.pause_reason, s.consecutive_failures, e.at AS paused_at,
       coalesce(u.display_name, s.owner_user_id) AS owner,
       coalesce((SELECT string_agg(DISTINCT n.kind, ', ') FROM owner_notices n
                  WHERE n.schedule_id = s.id AND n.user_id = s.owner_user_id), '') AS owner_told
  FROM schedules s
  LEFT JOIN LATERAL (SELECT at FROM schedule_events e
                      WHERE e.schedule_id = s.id AND e.kind = 'paused' ORDER BY id DESC LIMIT 1) e ON true
  LEFT JOIN users u ON u.id = s.owner_user_id
 WHERE s.status <> 'active' ORDER BY s.name;

-- name: notifications_sent
SELECT count(*) AS n FROM schedule_notifications WHERE sent_at IS NOT NULL;

-- name: posting_jobs
SELECT status, count(*) AS n FROM posting_jobs GROUP BY status ORDER BY status;

-- name: unfinished_runs
SELECT count(*) AS n FROM schedule_runs WHERE state IN ('queued', 'running');

-- name: snapshot_periods
-- Every snapshot period of the simulation: its latest run (the current version first).
SELECT DISTINCT ON (w.name, r.snapshot_type, r.period)
       w.name AS workspace, w.timezone, r.snapshot_type, r.period, r.state, r.version, r.mode,
       r.skip_reason, r.failure_code, r.published_at, r.is_current,
       (SELECT count(*) FROM snapshot_runs v WHERE v.workspace_id = r.workspace_id
           AND v.snapshot_type = r.snapshot_type AND v.period = r.period) AS versions
  FROM snapshot_runs r JOIN workspaces w ON w.id = r.workspace_id
 ORDER BY w.name, r.snapshot_type, r.period, r.is_current DESC, r.version DESC;

-- name: snapshot_states
SELECT snapshot_type, mode, state, coalesce(skip_reason, failure_code, '') AS reason, count(*) AS runs
  FROM snapshot_runs GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4;

-- name: owner_notices
SELECT n.kind, n.audience, coalesce(n.reason, '') AS reason, count(*) AS n,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM query_delivery_outbox o
                                       WHERE o.communication_key = n.mail_key
                                         AND o.provider_message_id IS NOT NULL)) AS mailed
  FROM owner_notices n GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;

-- name: notice_messages
-- Notice e-mails sent (outbox rows without a run), and how many notices each carried.
SELECT o.communication_key, o.user_id, o.sent_at, count(n.id) AS notices,
       coalesce((SELECT u.display_name FROM users u WHERE u.id = o.user_id), o.user_id) AS person
  FROM query_delivery_outbox o JOIN owner_notices n ON n.mail_key = o.communication_key
 WHERE o.run_id IS NULL AND o.provider_message_id IS NOT NULL
 GROUP BY 1, 2, 3 ORDER BY 3, 1;

-- name: ownerless
SELECT s.name, s.status, s.pause_reason, s.owner_user_id,
       coalesce((SELECT u.display_name FROM users u WHERE u.id = s.owner_user_id), s.owner_user_id) AS owner,
       (SELECT e.detail->>'to' FROM schedule_events e WHERE e.schedule_id = s.id AND e.kind = 'owner_changed'
         ORDER BY e.id DESC LIMIT 1) AS reassigned_to,
       (SELECT e.detail->>'why' FROM schedule_events e WHERE e.schedule_id = s.id AND e.reason = 'ownerless'
         ORDER BY e.id DESC LIMIT 1) AS why
  FROM schedules s
 WHERE EXISTS (SELECT 1 FROM schedule_events e WHERE e.schedule_id = s.id AND e.reason = 'ownerless')
 ORDER BY s.name;

-- name: email_of_user
SELECT email FROM users WHERE id = %s

-- name: workspace_name
SELECT name FROM workspaces WHERE id = %s
