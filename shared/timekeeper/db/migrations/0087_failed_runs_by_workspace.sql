-- A workspace's failed runs, newest first (GET /runs?state=failed, `ops runs list --state
-- failed`). PostgreSQL 15 compatible.
--
-- Partial: only failed runs have an entry, so the hot path (a run queued, started and
-- settled succeeded or skipped) writes nothing to it; a run settled failed adds one entry.
CREATE INDEX schedule_runs_failed_idx ON schedule_runs (workspace_id, queued_at DESC, id DESC)
    WHERE state = 'failed';
