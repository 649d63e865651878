-- An operator's action on a run reaches the workspace's audit log.
-- PostgreSQL 15 compatible.
--
-- schedule_run_actions holds each retry, cancel and settle-as-failed with its actor and
-- reason, written by the run's one action writer in the transaction that acts. As the
-- schedules' own change events do (0066), this trigger copies each into audit_events in
-- the same transaction: kind run.retried, run.cancelled or run.failed, the run as the
-- subject, the actor and reason, and after = the action's detail with the run's schedule.
CREATE FUNCTION timekeeper_audit_run_action() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO audit_events (workspace_id, actor, kind, subject_type, subject_id, before, after, reason, at)
    VALUES (NEW.workspace_id, NEW.actor,
            'run.' || CASE NEW.action WHEN 'retry' THEN 'retried' WHEN 'cancel' THEN 'cancelled' ELSE 'failed' END,
            'run', NEW.run_id::text, '{}',
            CASE WHEN jsonb_typeof(NEW.detail) = 'object' THEN NEW.detail ELSE '{}' END
                || jsonb_build_object('schedule_id', NEW.schedule_id::text),
            NEW.reason, NEW.at);
    RETURN NULL;
END
$$;

CREATE TRIGGER schedule_run_actions_audit AFTER INSERT ON schedule_run_actions FOR EACH ROW
    EXECUTE FUNCTION timekeeper_audit_run_action();
