-- A dead-letter message's fate on the run it names, and retries found by the run they made.
-- PostgreSQL 15 compatible.
--
-- Staff moving one dead-letter message back to its queue, or deleting it, act on the run
-- the message names: the action is recorded beside the run too (schedule_run_actions,
-- action `redriven` or `dead_letter_deleted`, with the queue, the message id and the run's
-- state then), so the run's page tells what became of its message, and the audit trigger
-- of 0073 copies it into the run's workspace's audit log under the area `dead_letter`
-- (kinds dead_letter.redriven and dead_letter.deleted).
ALTER TABLE schedule_run_actions DROP CONSTRAINT schedule_run_actions_action_check;
ALTER TABLE schedule_run_actions ADD CONSTRAINT schedule_run_actions_action_check
    CHECK (action IN ('retry', 'cancel', 'fail', 'redriven', 'dead_letter_deleted'));

CREATE OR REPLACE FUNCTION timekeeper_audit_run_action() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO audit_events (workspace_id, actor, kind, subject_type, subject_id, before, after, reason, at)
    VALUES (NEW.workspace_id, NEW.actor,
            CASE NEW.action WHEN 'retry' THEN 'run.retried' WHEN 'cancel' THEN 'run.cancelled'
                            WHEN 'redriven' THEN 'dead_letter.redriven'
                            WHEN 'dead_letter_deleted' THEN 'dead_letter.deleted'
                            ELSE 'run.failed' END,
            'run', NEW.run_id::text, '{}',
            CASE WHEN jsonb_typeof(NEW.detail) = 'object' THEN NEW.detail ELSE '{}' END
                || jsonb_build_object('schedule_id', NEW.schedule_id::text),
            NEW.reason, NEW.at);
    RETURN NULL;
END
$$;

-- A retry names the run it made in its detail: the lists that show runs mark a run made by
-- Retry now ("retry of ..."), looked up by the new run's id.
CREATE INDEX schedule_run_actions_retry_idx ON schedule_run_actions ((detail ->> 'run_id')) WHERE action = 'retry';

-- Operators' actions go with their run as its history does: the retention sweep deletes
-- old runs, and a run an operator acted on (now also any run whose dead letter was
-- redriven) would otherwise block it. The audit log keeps its own copy of each action.
ALTER TABLE schedule_run_actions DROP CONSTRAINT schedule_run_actions_run_id_fkey;
ALTER TABLE schedule_run_actions ADD CONSTRAINT schedule_run_actions_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES schedule_runs (id) ON DELETE CASCADE;
