-- History retention: the indexes that let each pruning batch find exactly its rows, oldest
-- first, at any table size (timekeeper.db.retention), and the mark of a failed snapshot
-- run whose generated rows were removed.

-- Finished runs by owner, oldest first (unfinished runs are never in it).
CREATE INDEX schedule_runs_retention_idx ON schedule_runs (owner, finished_at) WHERE finished_at IS NOT NULL;
-- Schedule history, oldest first.
CREATE INDEX schedule_events_retention_idx ON schedule_events (at);
-- Finished exports, oldest first.
CREATE INDEX exports_retention_idx ON exports (finished_at) WHERE finished_at IS NOT NULL;

-- A failed snapshot run's generated rows (its chunks) are removed after retention; the
-- ledger row stays, marked with the instant its rows went.
ALTER TABLE snapshot_runs ADD COLUMN rows_pruned_at timestamptz;
CREATE INDEX snapshot_runs_failed_rows_idx ON snapshot_runs (updated_at)
    WHERE state = 'failed' AND rows_pruned_at IS NULL;
