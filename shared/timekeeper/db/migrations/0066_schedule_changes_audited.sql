-- Every change to a schedule or a delivery reaches the workspace's audit log.
-- PostgreSQL 15 compatible.
--
-- The schedules core records each change as a schedule_events row in the transaction that
-- makes it (create, update, delete, pause, resume, run now, owner hand-off), whichever
-- path made it (the API, the console, staff, the dispatcher pausing after failures, an
-- admin's zone change). This trigger copies those change kinds into audit_events in the
-- same transaction: kind `schedule.<kind>` (`delivery.<kind>` for a query schedule, owner
-- `queries`), the schedule as the subject, the event's actor and reason, and before/after
-- from the event's `changes` detail ({field: {"from", "to"}}); an event without it (a
-- pause, a creation) keeps its detail as `after`, with the schedule's name. An `updated`
-- event without `changes` is not copied: a delivery's rule or name change writes the
-- schedule's bare version bump beside its own event naming every changed field.
CREATE FUNCTION timekeeper_audit_schedule_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    changes jsonb := CASE WHEN jsonb_typeof(NEW.detail) = 'object' THEN NEW.detail -> 'changes' END;
    area text;
    shown jsonb;
BEGIN
    SELECT CASE WHEN s.owner = 'queries' THEN 'delivery' ELSE 'schedule' END,
           jsonb_build_object('name', s.name) ||
           CASE WHEN NEW.kind = 'created' THEN jsonb_build_object('recurrence', s.recurrence) ELSE '{}' END
      INTO area, shown
      FROM schedules s WHERE s.id = NEW.schedule_id;
    area := coalesce(area, 'schedule');
    INSERT INTO audit_events (workspace_id, actor, kind, subject_type, subject_id, before, after, reason, at)
    VALUES (NEW.workspace_id, left(NEW.actor, 200), area || '.' || NEW.kind, area, NEW.schedule_id::text,
            CASE WHEN jsonb_typeof(changes) = 'object'
                 THEN (SELECT coalesce(jsonb_object_agg(key, value -> 'from'), '{}') FROM jsonb_each(changes))
                 ELSE '{}' END,
            CASE WHEN jsonb_typeof(changes) = 'object'
                 THEN (SELECT coalesce(jsonb_object_agg(key, value -> 'to'), '{}') FROM jsonb_each(changes))
                 WHEN jsonb_typeof(NEW.detail) = 'object' THEN NEW.detail || coalesce(shown, '{}')
                 ELSE coalesce(shown, '{}') END,
            nullif(left(NEW.reason, 500), ''), NEW.at);
    RETURN NULL;
END
$$;

CREATE TRIGGER schedule_events_audit AFTER INSERT ON schedule_events FOR EACH ROW
    WHEN (NEW.kind IN ('created', 'updated', 'deleted', 'paused', 'resumed', 'run_requested', 'owner_changed')
          AND (NEW.kind <> 'updated' OR jsonb_typeof(NEW.detail -> 'changes') = 'object'))
    EXECUTE FUNCTION timekeeper_audit_schedule_event();
