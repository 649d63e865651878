-- Owners hear of a failing schedule early. PostgreSQL 15 compatible.
--
-- 1. schedules.notify_on: which failures of a schedule's scheduled runs its owner is told
--    of. `first_failure` (the default): the first failure of a streak, and the pause;
--    `every_failure`: every failure, and the pause; `pause_only`: the pause alone. A pause
--    is always told (the `schedule_paused` notice); a failure that pauses is told as the
--    pause only.
-- 2. owner_notices.kind gains `schedule_failed` (a failure notice, people's only). The
--    check is rebuilt from the kinds it already allows, so kinds added by other
--    migrations stay allowed whatever order they ran in.
ALTER TABLE schedules ADD COLUMN notify_on text NOT NULL DEFAULT 'first_failure'
    CHECK (notify_on IN ('every_failure', 'first_failure', 'pause_only'));

DO $$
DECLARE
    allowed text[];
BEGIN
    SELECT array_agg(DISTINCT m[1] ORDER BY m[1]) INTO allowed
      FROM pg_constraint AS c,
           regexp_matches(pg_get_constraintdef(c.oid), '''([a-z_]+)''::text', 'g') AS m
     WHERE c.conrelid = 'owner_notices'::regclass AND c.conname = 'owner_notices_kind_check';
    ALTER TABLE owner_notices DROP CONSTRAINT owner_notices_kind_check;
    EXECUTE format('ALTER TABLE owner_notices ADD CONSTRAINT owner_notices_kind_check CHECK (kind IN (%s))',
                   (SELECT string_agg(quote_literal(k), ', ' ORDER BY k)
                      FROM (SELECT DISTINCT k FROM unnest(allowed || ARRAY['schedule_failed']) AS k) AS kinds));
END
$$;
