-- pessimistic estimate of an open-runs table: schedule_runs' indexes name no column that start or
-- settlement changes (as noidx.sql), and a narrow open_runs table keeps the open runs' bookkeeping,
-- written by statement-level triggers (one set-based statement per schedule_runs statement, as the
-- real design's CTEs would be)
ALTER TABLE schedule_runs SET (fillfactor = {fillfactor});
DROP INDEX schedule_runs_lease_idx;
DROP INDEX schedule_runs_unpublished_idx;
DROP INDEX schedule_runs_published_idx;
DROP INDEX schedule_runs_retention_idx;
CREATE INDEX schedule_runs_retention_idx ON schedule_runs (owner, queued_at);
CREATE TABLE open_runs (
    run_id       uuid PRIMARY KEY,
    owner        text NOT NULL,
    state        text NOT NULL,
    offered_at   timestamptz,
    published_at timestamptz,
    lease_until  timestamptz
);
CREATE INDEX open_runs_lease_idx ON open_runs (owner, lease_until) WHERE state = 'running';
CREATE INDEX open_runs_unpublished_idx ON open_runs (owner, offered_at NULLS FIRST)
    WHERE state = 'queued' AND published_at IS NULL;
CREATE INDEX open_runs_published_idx ON open_runs (owner, published_at)
    WHERE state = 'queued' AND published_at IS NOT NULL;
CREATE FUNCTION open_runs_ins() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO open_runs SELECT id, owner, state, offered_at, published_at, lease_until
      FROM new_runs WHERE finished_at IS NULL;
    RETURN NULL;
END $$;
CREATE FUNCTION open_runs_upd() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM open_runs AS o USING new_runs AS n WHERE o.run_id = n.id AND n.finished_at IS NOT NULL;
    UPDATE open_runs AS o SET state = n.state, offered_at = n.offered_at, published_at = n.published_at,
           lease_until = n.lease_until
      FROM new_runs AS n WHERE o.run_id = n.id AND n.finished_at IS NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER open_runs_ins AFTER INSERT ON schedule_runs REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION open_runs_ins();
CREATE TRIGGER open_runs_upd AFTER UPDATE ON schedule_runs REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION open_runs_upd();
