-- A published snapshot version never changes; settled periods are indexed. PostgreSQL 15 compatible.
--
-- The ledger's code never touches a published run's rows; these triggers make it a rule of
-- the database as well, for every login (the owner's included):
-- * the generated rows of a published run can be neither inserted, updated nor deleted
--   (statement-level triggers over the statement's transition table: one join per
--   statement, so a 50,000-row chunk pays one check, not 50,000);
-- * a published run keeps its identity, rows count, basis and publication instant; only
--   is_current (a later version becomes current), protection (captured, finalized) and
--   updated_at may change.

CREATE FUNCTION timekeeper_snapshot_rows_frozen() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    published uuid;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT r.id INTO published FROM changed_new c JOIN snapshot_runs r ON r.id = c.run_id
         WHERE r.state = 'published' LIMIT 1;
    END IF;
    IF published IS NULL AND TG_OP IN ('UPDATE', 'DELETE') THEN
        SELECT r.id INTO published FROM changed_old c JOIN snapshot_runs r ON r.id = c.run_id
         WHERE r.state = 'published' LIMIT 1;
    END IF;
    IF published IS NOT NULL THEN
        RAISE EXCEPTION 'snapshot version % is published: its rows never change', published
            USING ERRCODE = 'integrity_constraint_violation', TABLE = TG_TABLE_NAME;
    END IF;
    RETURN NULL;
END
$$;

DO $$
DECLARE
    target text;
BEGIN
    FOREACH target IN ARRAY ARRAY['snapshot_membership_counts', 'snapshot_ar_aging', 'snapshot_selftest_rows'] LOOP
        EXECUTE format('CREATE TRIGGER published_rows_frozen_insert AFTER INSERT ON %I '
                       'REFERENCING NEW TABLE AS changed_new FOR EACH STATEMENT '
                       'EXECUTE FUNCTION timekeeper_snapshot_rows_frozen()', target);
        EXECUTE format('CREATE TRIGGER published_rows_frozen_update AFTER UPDATE ON %I '
                       'REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new FOR EACH STATEMENT '
                       'EXECUTE FUNCTION timekeeper_snapshot_rows_frozen()', target);
        EXECUTE format('CREATE TRIGGER published_rows_frozen_delete AFTER DELETE ON %I '
                       'REFERENCING OLD TABLE AS changed_old FOR EACH STATEMENT '
                       'EXECUTE FUNCTION timekeeper_snapshot_rows_frozen()', target);
    END LOOP;
END
$$;

CREATE FUNCTION timekeeper_published_run_frozen() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.state = 'published' AND (
        (NEW.owner, NEW.snapshot_type, NEW.workspace_id, NEW.period, NEW.version, NEW.mode, NEW.state,
         NEW.generation_mode, NEW.chunks_committed, NEW.rows_written, NEW.basis, NEW.published_at)
        IS DISTINCT FROM
        (OLD.owner, OLD.snapshot_type, OLD.workspace_id, OLD.period, OLD.version, OLD.mode, OLD.state,
         OLD.generation_mode, OLD.chunks_committed, OLD.rows_written, OLD.basis, OLD.published_at)) THEN
        RAISE EXCEPTION 'snapshot version % is published: only is_current and protection may change', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER published_run_frozen BEFORE UPDATE ON snapshot_runs
    FOR EACH ROW WHEN (OLD.state = 'published') EXECUTE FUNCTION timekeeper_published_run_frozen();

CREATE FUNCTION timekeeper_published_run_kept() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'snapshot version % is published: it is never deleted', OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER published_run_kept BEFORE DELETE ON snapshot_runs
    FOR EACH ROW WHEN (OLD.state = 'published') EXECUTE FUNCTION timekeeper_published_run_kept();

-- The overdue check probes, per expected month, whether the period is settled (a current
-- version, or skipped): an index-only probe, whatever the length of the history.
CREATE INDEX snapshot_runs_settled ON snapshot_runs (owner, snapshot_type, workspace_id, period)
    WHERE is_current OR state = 'skipped';
