-- the upper bound of taking the open-run bookkeeping out of schedule_runs (no replacement): no index
-- of schedule_runs names a column that start or settlement changes; page room for the new versions
ALTER TABLE schedule_runs SET (fillfactor = {fillfactor});
DROP INDEX schedule_runs_lease_idx;
DROP INDEX schedule_runs_unpublished_idx;
DROP INDEX schedule_runs_published_idx;
DROP INDEX schedule_runs_retention_idx;
CREATE INDEX schedule_runs_retention_idx ON schedule_runs (owner, queued_at);
