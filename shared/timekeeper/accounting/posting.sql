-- Posting jobs (timekeeper.accounting.posting). Every statement is scoped by %(workspace_id)s,
-- except find_job_workspace, which only reads the owning workspace of a job id.

-- name: insert_job
-- Idempotent: one job per batch (posting_jobs.batch_id UNIQUE).
INSERT INTO posting_jobs (workspace_id, batch_id, status, requested_by_run_id, created_at)
VALUES (%(workspace_id)s, %(batch_id)s, 'pending', %(run_id)s, %(now)s)
ON CONFLICT (batch_id) DO NOTHING
RETURNING id;

-- name: job_for_batch
SELECT id, workspace_id, batch_id, status, error, attempts, requested_by_run_id, created_at,
       started_at, finished_at
FROM posting_jobs
WHERE batch_id = %(batch_id)s AND workspace_id = %(workspace_id)s;

-- name: get_job
SELECT id, workspace_id, batch_id, status, error, attempts, requested_by_run_id, created_at,
       started_at, finished_at
FROM posting_jobs
WHERE id = %(job_id)s AND workspace_id = %(workspace_id)s;

-- name: find_job_workspace
SELECT workspace_id FROM posting_jobs WHERE id = %(job_id)s;

-- name: lock_job
SELECT id, workspace_id, batch_id, status, error, attempts, requested_by_run_id, created_at,
       started_at, finished_at
FROM posting_jobs
WHERE id = %(job_id)s AND workspace_id = %(workspace_id)s
FOR UPDATE;

-- name: mark_running
UPDATE posting_jobs
SET status = 'running', attempts = attempts + 1, started_at = %(now)s, finished_at = NULL, error = NULL
WHERE id = %(job_id)s AND workspace_id = %(workspace_id)s AND status <> 'succeeded'
RETURNING attempts;

-- name: mark_succeeded
UPDATE posting_jobs
SET status = 'succeeded', finished_at = %(now)s, error = NULL
WHERE id = %(job_id)s AND workspace_id = %(workspace_id)s;

-- name: mark_failed
-- Fenced by the attempt: a later attempt's outcome is never overwritten by an earlier one.
UPDATE posting_jobs
SET status = 'failed', finished_at = %(now)s, error = %(error)s
WHERE id = %(job_id)s AND workspace_id = %(workspace_id)s
  AND status = 'running' AND attempts = %(attempt)s;

-- name: post_entries
UPDATE ledger_entries
SET posted = true, posted_at = %(now)s
WHERE batch_id = %(batch_id)s AND workspace_id = %(workspace_id)s AND NOT posted;

-- name: mark_batch_posted
UPDATE batches
SET status = 'posted', posted_at = %(now)s
WHERE id = %(batch_id)s AND workspace_id = %(workspace_id)s AND status = 'closed';

-- name: unstarted_jobs
-- Every workspace's jobs that no starter holds: pending (committed with their batch's run,
-- never started) or running since before %(stale_before)s (the starter died). Oldest first.
SELECT id, workspace_id
FROM posting_jobs
WHERE status = 'pending' OR (status = 'running' AND started_at < %(stale_before)s)
ORDER BY created_at, id
LIMIT %(limit)s;

-- name: job_schedule
SELECT schedule_id FROM schedule_runs WHERE id = %(run_id)s

-- name: failed_jobs
SELECT id, workspace_id, batch_id, status, error, attempts, requested_by_run_id, created_at,
       started_at, finished_at
FROM posting_jobs
WHERE workspace_id = %(workspace_id)s AND status = 'failed'
ORDER BY finished_at, id
LIMIT %(limit)s;

-- name: retry_job
UPDATE posting_jobs SET status = 'pending', error = NULL, finished_at = NULL
WHERE id = %(job_id)s AND workspace_id = %(workspace_id)s AND status = 'failed'
RETURNING id, workspace_id, batch_id, status, error, attempts, requested_by_run_id, created_at,
          started_at, finished_at;

-- name: count_failed
SELECT count(*) FROM posting_jobs WHERE status = 'failed';
