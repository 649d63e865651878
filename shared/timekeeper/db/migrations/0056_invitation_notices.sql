-- A recipient invited back to a query schedule's messages is told. PostgreSQL 15 compatible.
--
-- owner_notices.kind gains `resubscribe_invited` and audience gains `recipient`: the
-- notice goes to the person the owner invited back (not to the schedule's owner) and links
-- to the page where they accept. Each check is rebuilt from the values it already allows,
-- so values added by other migrations stay allowed whatever order they ran in.
--
-- The API writes this notice itself, in the transaction that records the invitation (the
-- other kinds are written by the workers' people pass), so its login may insert notices.
DO $$
DECLARE
    rule record;
    allowed text;
BEGIN
    FOR rule IN SELECT * FROM (VALUES ('owner_notices_kind_check', 'kind', 'resubscribe_invited'),
                                      ('owner_notices_audience_check', 'audience', 'recipient')) AS v (name, col, added)
    LOOP
        SELECT string_agg(quote_literal(k), ', ' ORDER BY k) INTO allowed
          FROM (SELECT m[1] AS k
                  FROM pg_constraint AS c,
                       regexp_matches(pg_get_constraintdef(c.oid), '''([a-z_]+)''::text', 'g') AS m
                 WHERE c.conrelid = 'owner_notices'::regclass AND c.conname = rule.name
                UNION SELECT rule.added) AS kinds;
        EXECUTE format('ALTER TABLE owner_notices DROP CONSTRAINT %I', rule.name);
        EXECUTE format('ALTER TABLE owner_notices ADD CONSTRAINT %I CHECK (%I IN (%s))', rule.name, rule.col, allowed);
    END LOOP;
END
$$;

GRANT INSERT ON owner_notices TO timekeeper_api;
