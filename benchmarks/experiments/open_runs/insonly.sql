-- an insert-only open-runs table: schedule_runs' indexes name no column that start or settlement
-- changes; open_runs (run_id, owner, queued_at) is inserted at claim and deleted at settlement,
-- never updated (the sweeps would read state, lease and publication from the run's heap row);
-- written by statement-level triggers as a pessimistic stand-in for the claim's and the
-- settlement's CTEs
ALTER TABLE schedule_runs SET (fillfactor = {fillfactor});
DROP INDEX schedule_runs_lease_idx;
DROP INDEX schedule_runs_unpublished_idx;
DROP INDEX schedule_runs_published_idx;
DROP INDEX schedule_runs_retention_idx;
CREATE INDEX schedule_runs_retention_idx ON schedule_runs (owner, queued_at);
CREATE TABLE open_runs (
    run_id    uuid PRIMARY KEY,
    owner     text NOT NULL,
    queued_at timestamptz NOT NULL
);
CREATE INDEX open_runs_owner_idx ON open_runs (owner, queued_at);
CREATE FUNCTION open_runs_ins() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO open_runs SELECT id, owner, queued_at FROM new_runs WHERE finished_at IS NULL;
    RETURN NULL;
END $$;
CREATE FUNCTION open_runs_del() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM open_runs AS o USING new_runs AS n, old_runs AS p
     WHERE o.run_id = n.id AND p.id = n.id AND n.finished_at IS NOT NULL AND p.finished_at IS NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER open_runs_ins AFTER INSERT ON schedule_runs REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION open_runs_ins();
CREATE TRIGGER open_runs_del AFTER UPDATE ON schedule_runs REFERENCING NEW TABLE AS new_runs OLD TABLE AS old_runs
    FOR EACH STATEMENT EXECUTE FUNCTION open_runs_del();
