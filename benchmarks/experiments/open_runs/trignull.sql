-- the stand-in's own cost: noidx.sql with the insonly.sql triggers' transition tables and calls, doing nothing
ALTER TABLE schedule_runs SET (fillfactor = {fillfactor});
DROP INDEX schedule_runs_lease_idx;
DROP INDEX schedule_runs_unpublished_idx;
DROP INDEX schedule_runs_published_idx;
DROP INDEX schedule_runs_retention_idx;
CREATE INDEX schedule_runs_retention_idx ON schedule_runs (owner, queued_at);
CREATE FUNCTION open_runs_nothing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END $$;
CREATE TRIGGER open_runs_ins AFTER INSERT ON schedule_runs REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION open_runs_nothing();
CREATE TRIGGER open_runs_del AFTER UPDATE ON schedule_runs REFERENCING NEW TABLE AS new_runs OLD TABLE AS old_runs
    FOR EACH STATEMENT EXECUTE FUNCTION open_runs_nothing();
