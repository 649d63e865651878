-- name: plan_months
-- Plan version 1 of every expected month that has no row yet: each completed
-- workspace-local month of each (workspace, type) within the horizon, never before the
-- workspace existed, whatever other months (a staff backfill, a re-run) already hold.
-- The planner's watermark (snapshot_planner_watermarks: months of which every one has a
-- row) spares the probes: only expected months outside it are looked up, so a pass with
-- nothing new costs the same however much history there is. The watermark then covers the
-- window (joined to its old range when they touch) if every month of the window has a
-- row: one found, or inserted here; a month still without one (another planner's
-- uncommitted insert) leaves it as it was. Two planners racing insert one row per month
-- (the version key), the other does nothing. Loading, disabled and policy-disabled
-- workspaces get the row with the skip reason.
WITH types AS (
    SELECT * FROM unnest(%(owners)s::text[], %(types)s::text[]) AS t(owner, snapshot_type)
), windows AS (
    SELECT w.id AS workspace_id, w.status, w.snapshots_enabled, t.owner, t.snapshot_type,
           greatest(date_trunc('month', w.created_at AT TIME ZONE w.timezone),
                    date_trunc('month', %(now)s AT TIME ZONE w.timezone) - make_interval(months => %(horizon)s)
                   )::date AS first_month,
           (date_trunc('month', %(now)s AT TIME ZONE w.timezone) - interval '1 month')::date AS last_month,
           k.planned_from, k.planned_through
      FROM workspaces w
     CROSS JOIN types t
      LEFT JOIN snapshot_planner_watermarks k
        ON k.workspace_id = w.id AND k.owner = t.owner AND k.snapshot_type = t.snapshot_type
), uncovered AS (
    SELECT * FROM windows
     WHERE first_month <= last_month
       AND (planned_from IS NULL OR planned_from > first_month OR planned_through < last_month)
), months AS (
    SELECT u.*, m.period::date AS period
      FROM uncovered u
     CROSS JOIN LATERAL generate_series(u.first_month, u.last_month, interval '1 month') AS m(period)
     WHERE u.planned_from IS NULL OR m.period < u.planned_from OR m.period > u.planned_through
), missing AS (
    SELECT m.* FROM months m
     WHERE NOT EXISTS (SELECT FROM snapshot_runs r
                        WHERE r.owner = m.owner AND r.snapshot_type = m.snapshot_type
                          AND r.workspace_id = m.workspace_id AND r.period = m.period)
), inserted AS (
    INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, skip_reason,
                               created_at, updated_at)
    SELECT owner, snapshot_type, workspace_id, period, 1, 'planned',
           CASE WHEN skip IS NULL THEN 'planned' ELSE 'skipped' END, skip, %(now)s, %(now)s
      FROM (SELECT m.*, CASE WHEN m.status = 'loading' THEN 'workspace_loading'
                             WHEN m.status = 'disabled' THEN 'workspace_disabled'
                             WHEN NOT m.snapshots_enabled THEN 'policy_disabled' END AS skip
              FROM missing m) planned
     ORDER BY workspace_id, owner, snapshot_type, period
    ON CONFLICT DO NOTHING
    RETURNING id, state, owner, snapshot_type, workspace_id, period
), still_missing AS (
    SELECT DISTINCT mi.workspace_id, mi.owner, mi.snapshot_type
      FROM missing mi
     WHERE NOT EXISTS (SELECT FROM inserted i
                        WHERE i.workspace_id = mi.workspace_id AND i.owner = mi.owner
                          AND i.snapshot_type = mi.snapshot_type AND i.period = mi.period)
), advanced AS (
    INSERT INTO snapshot_planner_watermarks AS k (workspace_id, owner, snapshot_type, planned_from,
                                                  planned_through, updated_at)
    SELECT u.workspace_id, u.owner, u.snapshot_type, u.first_month, u.last_month, %(now)s
      FROM uncovered u
     -- Every run row is inserted (and locked) before the first watermark row: the count is
     -- an init plan, so two planners meet on the ordered run rows first and never
     -- deadlock between the two tables.
     WHERE (SELECT count(*) FROM inserted) >= 0
       AND NOT EXISTS (SELECT FROM still_missing s
                        WHERE s.workspace_id = u.workspace_id AND s.owner = u.owner
                          AND s.snapshot_type = u.snapshot_type)
     ORDER BY u.workspace_id, u.owner, u.snapshot_type
    ON CONFLICT (workspace_id, owner, snapshot_type) DO UPDATE
       SET planned_from = CASE WHEN k.planned_through >= (excluded.planned_from - interval '1 month')::date
                                AND k.planned_from <= (excluded.planned_through + interval '1 month')::date
                               THEN least(k.planned_from, excluded.planned_from) ELSE excluded.planned_from END,
           planned_through = CASE WHEN k.planned_through >= (excluded.planned_from - interval '1 month')::date
                                   AND k.planned_from <= (excluded.planned_through + interval '1 month')::date
                                  THEN greatest(k.planned_through, excluded.planned_through)
                                  ELSE excluded.planned_through END,
           updated_at = excluded.updated_at
)
SELECT id, state FROM inserted

-- name: overdue_periods
-- Completed periods (within the horizon, since the workspace existed) whose local month
-- ended more than `grace` ago and that have neither a current version nor a skip reason:
-- counted from the months that SHOULD exist, so a month the planner never inserted is
-- overdue too. The months inside the watermark's settled range are settled already (a
-- current version or a skip row stays so) and are not looked up, so the count costs the
-- same however much history there is; the range then covers the window (joined to the old
-- range when they touch) when every month of the window is settled. Runs after
-- plan_months, whose watermark row it updates (none: nothing is recorded).
WITH types AS (
    SELECT * FROM unnest(%(owners)s::text[], %(types)s::text[]) AS t(owner, snapshot_type)
), windows AS (
    SELECT w.id AS workspace_id, w.timezone, t.owner, t.snapshot_type,
           greatest(date_trunc('month', w.created_at AT TIME ZONE w.timezone),
                    date_trunc('month', %(now)s AT TIME ZONE w.timezone) - make_interval(months => %(horizon)s)
                   )::date AS first_month,
           (date_trunc('month', %(now)s AT TIME ZONE w.timezone) - interval '1 month')::date AS last_month,
           k.settled_from, k.settled_through
      FROM workspaces w
     CROSS JOIN types t
      LEFT JOIN snapshot_planner_watermarks k
        ON k.workspace_id = w.id AND k.owner = t.owner AND k.snapshot_type = t.snapshot_type
     WHERE w.status <> 'disabled'
), unsettled AS (
    SELECT * FROM windows
     WHERE first_month <= last_month
       AND (settled_from IS NULL OR settled_from > first_month OR settled_through < last_month)
), months AS (
    SELECT u.*, m.period::date AS period,
           -- A scalar subquery, probed per expected month through the settled-periods
           -- index: an anti-join would read every settled period of the history instead.
           (SELECT EXISTS (SELECT FROM snapshot_runs r
                            WHERE r.owner = u.owner AND r.snapshot_type = u.snapshot_type
                              AND r.workspace_id = u.workspace_id AND r.period = m.period
                              AND (r.is_current OR r.state = 'skipped'))) AS settled
      FROM unsettled u
     CROSS JOIN LATERAL generate_series(u.first_month, u.last_month, interval '1 month') AS m(period)
     WHERE u.settled_from IS NULL OR m.period < u.settled_from OR m.period > u.settled_through
), advanced AS (
    UPDATE snapshot_planner_watermarks k
       SET settled_from = CASE WHEN k.settled_from IS NOT NULL
                                AND k.settled_through >= (u.first_month - interval '1 month')::date
                                AND k.settled_from <= (u.last_month + interval '1 month')::date
                               THEN least(k.settled_from, u.first_month) ELSE u.first_month END,
           settled_through = CASE WHEN k.settled_from IS NOT NULL
                                   AND k.settled_through >= (u.first_month - interval '1 month')::date
                                   AND k.settled_from <= (u.last_month + interval '1 month')::date
                                  THEN greatest(k.settled_through, u.last_month) ELSE u.last_month END
      FROM unsettled u
     WHERE k.workspace_id = u.workspace_id AND k.owner = u.owner AND k.snapshot_type = u.snapshot_type
       AND NOT EXISTS (SELECT FROM months m
                        WHERE m.workspace_id = u.workspace_id AND m.owner = u.owner
                          AND m.snapshot_type = u.snapshot_type AND NOT m.settled)
)
SELECT m.workspace_id, m.owner, m.snapshot_type, m.period
  FROM months m
 WHERE NOT m.settled
   AND ((m.period + interval '1 month')::timestamp AT TIME ZONE m.timezone) + %(grace)s <= %(now)s
 ORDER BY m.workspace_id, m.owner, m.snapshot_type, m.period

-- name: overdue_for_staff
-- Through the SECURITY DEFINER function of 0047 (every workspace, read-only, at most 500 rows).
SELECT * FROM operations_overdue_periods(%(owners)s::text[], %(types)s::text[], %(now)s, %(horizon)s,
                                         %(grace)s::interval, %(limit)s)

-- name: lock_owner
-- Admission of one owner's runs is serialized (transaction-level advisory lock).
SELECT pg_advisory_xact_lock(hashtextextended('timekeeper.snapshots:' || %(owner)s, 0))

-- name: in_flight
SELECT count(*) FILTER (WHERE mode <> 'backfill') AS regular, count(*) FILTER (WHERE mode = 'backfill') AS backfill
  FROM snapshot_runs
 WHERE owner = %(owner)s AND state IN ('queued', 'running')

-- name: waiting
-- The oldest admissible runs of one lane: planned, or waiting for a retry that is due;
-- runs planned together (a planner pass, a range request) go oldest month first.
SELECT id FROM snapshot_runs
 WHERE owner = %(owner)s AND state IN ('planned', 'retry_wait')
   AND (state = 'planned' OR retry_due_at <= %(now)s)
   AND (mode = 'backfill') = %(backfill)s
 ORDER BY created_at, period, id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: any_backfill_waiting
SELECT EXISTS (SELECT FROM snapshot_runs
                WHERE owner = %(owner)s AND mode = 'backfill'
                  AND state IN ('planned', 'retry_wait', 'queued', 'running')) AS waiting

-- name: admit
-- Admitted: a new attempt job, offered now.
UPDATE snapshot_runs
   SET state = 'queued', job_id = gen_random_uuid(), offered_at = %(now)s, retry_due_at = NULL,
       updated_at = %(now)s
 WHERE id = ANY(%(ids)s::uuid[])
RETURNING id, workspace_id, job_id

-- name: reoffer
-- Queued runs whose job the queue refused (`offered_at` cleared by `release_jobs`), or whose
-- job has not started within `after`: a new job is sent (a late copy of the old one finds
-- another job id and is dropped).
UPDATE snapshot_runs
   SET job_id = gen_random_uuid(), offered_at = %(now)s, updated_at = %(now)s
 WHERE owner = %(owner)s AND state = 'queued'
   AND (offered_at IS NULL OR offered_at <= %(now)s - %(after)s::interval)
RETURNING id, workspace_id, job_id

-- name: release_jobs
-- The queue refused these jobs: clear their offer so the next admission pass sends a new
-- job at once. Only the refused job's own offer (a run re-offered meanwhile is left alone).
UPDATE snapshot_runs AS r
   SET offered_at = NULL, updated_at = %(now)s
  FROM unnest(%(run_ids)s::uuid[], %(job_ids)s::uuid[]) AS v(run_id, job_id)
 WHERE r.id = v.run_id AND r.job_id = v.job_id AND r.state = 'queued'

-- name: start_job
-- The job's first receive moves queued -> running and counts the attempt; a later receive
-- of the same job (a crash, a hand-over) resumes. Another job's message matches nothing.
UPDATE snapshot_runs
   SET state = 'running',
       attempts = attempts + CASE WHEN state = 'queued' THEN 1 ELSE 0 END,
       started_at = CASE WHEN state = 'queued' THEN %(now)s ELSE started_at END,
       heartbeat_at = %(now)s, updated_at = %(now)s
 WHERE id = %(run_id)s AND job_id = %(job_id)s AND state IN ('queued', 'running')
RETURNING *

-- name: lock_run
-- The run, locked, if this job still owns it (the fence of every chunk and of publish).
SELECT * FROM snapshot_runs
 WHERE id = %(run_id)s AND job_id = %(job_id)s AND state = 'running'
   FOR UPDATE

-- name: retain_mode
UPDATE snapshot_runs SET generation_mode = %(mode)s, updated_at = %(now)s
 WHERE id = %(run_id)s AND generation_mode IS NULL

-- name: commit_chunk
UPDATE snapshot_runs
   SET cursor = %(cursor)s, chunks_committed = chunks_committed + 1, rows_written = rows_written + %(rows)s,
       heartbeat_at = %(now)s, updated_at = %(now)s
 WHERE id = %(run_id)s
RETURNING *

-- name: retire_current
UPDATE snapshot_runs SET is_current = false, updated_at = %(now)s
 WHERE owner = %(owner)s AND snapshot_type = %(snapshot_type)s AND workspace_id = %(workspace_id)s
   AND period = %(period)s AND is_current
RETURNING id

-- name: publish
UPDATE snapshot_runs
   SET state = 'published', is_current = true, published_at = %(now)s, basis = %(basis)s, job_id = NULL,
       updated_at = %(now)s
 WHERE id = %(run_id)s

-- name: fail_final
UPDATE snapshot_runs
   SET state = 'failed', failure_code = %(code)s, failure_message = %(message)s, job_id = NULL,
       retryable_failures = retryable_failures + %(retryable)s, updated_at = %(now)s
 WHERE id = %(run_id)s AND job_id = %(job_id)s AND state IN ('queued', 'running')
RETURNING *

-- name: fail_retryable
UPDATE snapshot_runs
   SET state = 'retry_wait', retryable_failures = retryable_failures + 1, retry_due_at = %(retry_due_at)s,
       failure_code = %(code)s, failure_message = %(message)s, job_id = NULL, updated_at = %(now)s
 WHERE id = %(run_id)s AND job_id = %(job_id)s AND state IN ('queued', 'running')
RETURNING *

-- name: period_runs
SELECT * FROM snapshot_runs
 WHERE owner = %(owner)s AND snapshot_type = %(snapshot_type)s AND workspace_id = %(workspace_id)s
   AND period = %(period)s
 ORDER BY version
   FOR UPDATE

-- name: insert_request
INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by, state,
                           request_group, created_at, updated_at)
VALUES (%(owner)s, %(snapshot_type)s, %(workspace_id)s, %(period)s, %(version)s, %(mode)s, %(reason)s,
        %(requested_by)s, 'planned', %(request_group)s, %(now)s, %(now)s)
RETURNING *

-- name: page_periods
-- One page of a workspace's periods, owner, type and period descending: every expected month
-- of the given types (the workspace's first local month through the last completed one)
-- and every period that has runs, each once, with the run the listing chooses (the current
-- version, else the latest; NULL: never planned), the latest run (a re-run in flight or
-- failed beside a published version), how many versions it has, and whether it is overdue. Keyset:
-- strictly after the previous page's last (owner, type, period).
--
-- Overdue is the planner's rule (`overdue_periods` above, whose alarm counts the same
-- periods, and the operations overview's `operations_overdue_periods`): a month of an
-- enabled type of a workspace that is not disabled, within the horizon (this local month
-- back `horizon` months) and not before the workspace's first month, with neither a
-- current version nor a skip row, its local month end plus the grace passed. An older
-- month never planned is listed `missing` but not overdue: the planner no longer looks at
-- it (a staff backfill can still fill it).
WITH types AS (
    SELECT * FROM unnest(%(owners)s::text[], %(types)s::text[]) AS t(owner, snapshot_type)
     WHERE (%(owner)s::text IS NULL OR t.owner = %(owner)s)
       AND (%(snapshot_type)s::text IS NULL OR t.snapshot_type = %(snapshot_type)s)
), ws AS (
    SELECT w.status, w.timezone, date_trunc('month', w.created_at AT TIME ZONE w.timezone)::date AS first_month,
           (date_trunc('month', %(now)s AT TIME ZONE w.timezone) - make_interval(months => %(horizon)s))::date
               AS horizon_month
      FROM workspaces w WHERE w.id = %(workspace_id)s
), expected AS (
    SELECT t.owner, t.snapshot_type,
           generate_series(ws.first_month, date_trunc('month', %(now)s AT TIME ZONE ws.timezone) - interval '1 month',
                           interval '1 month')::date AS period
      FROM ws CROSS JOIN types t
), recorded AS (
    SELECT r.owner, r.snapshot_type, r.period FROM snapshot_runs r
     WHERE r.workspace_id = %(workspace_id)s
       AND (%(owner)s::text IS NULL OR r.owner = %(owner)s)
       AND (%(snapshot_type)s::text IS NULL OR r.snapshot_type = %(snapshot_type)s)
), periods AS (
    SELECT owner, snapshot_type, period FROM expected UNION SELECT owner, snapshot_type, period FROM recorded
), page AS (
    SELECT p.owner, p.snapshot_type, p.period
      FROM periods p
     WHERE %(after_period)s::date IS NULL
        OR (p.owner, p.snapshot_type, p.period) < (%(after_owner)s::text, %(after_type)s::text, %(after_period)s::date)
     ORDER BY p.owner DESC, p.snapshot_type DESC, p.period DESC
     LIMIT %(limit)s
)
SELECT p.owner, p.snapshot_type, p.period,
       (SELECT r.id FROM snapshot_runs r
         WHERE r.owner = p.owner AND r.snapshot_type = p.snapshot_type AND r.workspace_id = %(workspace_id)s
           AND r.period = p.period
         ORDER BY r.is_current DESC, r.version DESC LIMIT 1) AS run_id,
       (SELECT r.id FROM snapshot_runs r
         WHERE r.owner = p.owner AND r.snapshot_type = p.snapshot_type AND r.workspace_id = %(workspace_id)s
           AND r.period = p.period
         ORDER BY r.version DESC LIMIT 1) AS latest_run_id,
       (SELECT count(*) FROM snapshot_runs r
         WHERE r.owner = p.owner AND r.snapshot_type = p.snapshot_type AND r.workspace_id = %(workspace_id)s
           AND r.period = p.period) AS versions,
       (ws.status <> 'disabled'
        AND EXISTS (SELECT FROM types t WHERE t.owner = p.owner AND t.snapshot_type = p.snapshot_type)
        AND p.period >= greatest(ws.first_month, ws.horizon_month)
        AND ((p.period + interval '1 month')::timestamp AT TIME ZONE ws.timezone) + %(grace)s <= %(now)s
        AND NOT EXISTS (SELECT FROM snapshot_runs r
                         WHERE r.owner = p.owner AND r.snapshot_type = p.snapshot_type
                           AND r.workspace_id = %(workspace_id)s AND r.period = p.period
                           AND (r.is_current OR r.state = 'skipped'))) AS overdue
  FROM page p CROSS JOIN ws
 ORDER BY p.owner DESC, p.snapshot_type DESC, p.period DESC

-- name: period_versions
-- Every version of one period of a workspace's snapshot type, newest first (a read).
SELECT * FROM snapshot_runs
 WHERE owner = %(owner)s AND snapshot_type = %(snapshot_type)s AND workspace_id = %(workspace_id)s
   AND period = %(period)s
 ORDER BY version DESC

-- name: runs_by_id
SELECT * FROM snapshot_runs WHERE id = ANY(%(ids)s::uuid[])

-- name: lost_jobs
-- Running runs whose job stopped beating (its messages were exhausted or lost): each is a
-- retryable failure of its attempt, the fourth one final.
SELECT * FROM snapshot_runs
 WHERE owner = %(owner)s AND state = 'running' AND heartbeat_at <= %(now)s - %(after)s::interval
 ORDER BY id
   FOR UPDATE SKIP LOCKED

-- name: get_run
SELECT * FROM snapshot_runs WHERE id = %(id)s

-- name: workspace_for_request
SELECT timezone, created_at, status, snapshots_enabled FROM workspaces
 WHERE id = %s FOR SHARE

-- name: latest_published
-- The current version of the workspace's latest published period of a type.
SELECT * FROM snapshot_runs
 WHERE owner = %(owner)s AND snapshot_type = %(snapshot_type)s AND workspace_id = %(workspace_id)s AND is_current
 ORDER BY period DESC LIMIT 1

-- name: current_of_period
SELECT * FROM snapshot_runs
 WHERE owner = %(owner)s AND snapshot_type = %(snapshot_type)s AND workspace_id = %(workspace_id)s
   AND period = %(period)s AND is_current

-- name: published_version
SELECT * FROM snapshot_runs
 WHERE owner = %(owner)s AND snapshot_type = %(snapshot_type)s AND workspace_id = %(workspace_id)s
   AND period = %(period)s AND version = %(version)s AND state = 'published'

-- name: capture_versions
-- Mark published versions captured (read into a delivered report); a finalized one stays finalized.
UPDATE snapshot_runs SET protection = 'captured', updated_at = %(now)s
 WHERE id = ANY(%(ids)s::uuid[]) AND state = 'published' AND protection IS NULL
RETURNING *

-- name: run_in_workspace
-- One run of the entered workspace, locked (a staff action judges its state, then acts).
SELECT * FROM snapshot_runs WHERE id = %(run_id)s AND workspace_id = %(workspace_id)s FOR UPDATE

-- name: cancel_run
-- Through the SECURITY DEFINER function of 0067 (planned or queued runs of the entered workspace).
SELECT * FROM snapshot_cancel_run(%(run_id)s, %(actor)s, %(reason)s, %(now)s)

-- name: finalize_run
-- Through the SECURITY DEFINER function of 0067 (published versions of the entered workspace).
SELECT * FROM snapshot_finalize_run(%(run_id)s, %(actor)s, %(reason)s, %(now)s)

-- name: staff_workspaces
-- Through the SECURITY DEFINER function of 0067 (names, ids, zones and states; at most 1000).
SELECT * FROM snapshot_staff_workspaces(%(search)s, %(ids)s::uuid[], %(limit)s)

-- name: request_group_runs
-- Through the SECURITY DEFINER function of 0067 (a range request's runs, every workspace).
SELECT * FROM snapshot_request_group_runs(%(group)s)

-- name: staff_periods
-- Through the SECURITY DEFINER function of 0067 (every workspace's newest versions, what matters first).
SELECT * FROM snapshot_staff_periods(%(search)s, %(owner)s, %(type)s, %(states)s::text[], %(first)s, %(through)s,
                                     %(after_rank)s, %(after_at)s, %(after_id)s, %(limit)s)

-- name: admission_queue
-- Through the SECURITY DEFINER function of 0077 (counts of every workspace's runs of the owner).
SELECT * FROM snapshot_admission_queue(%(run_id)s)

-- name: staff_range_requests
-- Through the SECURITY DEFINER function of 0078 (the latest range requests, every workspace).
SELECT * FROM snapshot_staff_range_requests(%(limit)s)
