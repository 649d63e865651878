-- The query wall: user-defined queries (exports, report sections, scheduled deliveries) run
-- walled by row-level security. PostgreSQL 15 compatible.
--
-- timekeeper_query   NOLOGIN; SELECT on the query catalogue's tables only, and on each a
--                    policy that shows the rows of the transaction's workspace
--                    (app.workspace_id, timekeeper_current_workspace()) and nothing without
--                    one. The workers' login is a member: the query runner switches to it
--                    for the transaction that runs a compiled query
--                    (timekeeper.db.connection.walled_query), so the workers' pass-through
--                    policy (worker_access) does not apply to that statement, and a compiled
--                    statement that lost its workspace filter still reads one workspace.
--
-- A table the catalogue (timekeeper.reporting.catalogue) starts reading needs the grant and
-- the policy: SELECT timekeeper_allow_queries('<table>') in its migration
-- (tests/integration/test_query_wall.py checks every catalogue table).

CREATE OR REPLACE FUNCTION pg_temp.timekeeper_role_statement(statement text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    FOR attempt IN 1..20 LOOP
        BEGIN
            EXECUTE statement;
            RETURN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                RETURN;  -- created concurrently by another database's migration
            WHEN internal_error OR object_in_use OR lock_not_available OR serialization_failure THEN
                IF attempt = 20 THEN
                    RAISE;
                END IF;
                PERFORM pg_sleep(0.05 * attempt);  -- "tuple concurrently updated": try again
        END;
    END LOOP;
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'timekeeper_query') THEN
        PERFORM pg_temp.timekeeper_role_statement('CREATE ROLE timekeeper_query NOLOGIN');
    END IF;
    IF NOT pg_has_role('timekeeper_worker', 'timekeeper_query', 'MEMBER') THEN
        PERFORM pg_temp.timekeeper_role_statement('GRANT timekeeper_query TO timekeeper_worker');
    END IF;
    -- The migrating role runs the tests' and the local stack's queries on its own connection.
    IF NOT pg_has_role(current_user, 'timekeeper_query', 'MEMBER') THEN
        PERFORM pg_temp.timekeeper_role_statement(format('GRANT timekeeper_query TO %I', current_user));
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO timekeeper_query;

CREATE FUNCTION timekeeper_allow_queries(target regclass) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('GRANT SELECT ON %s TO timekeeper_query', target);
    EXECUTE format('CREATE POLICY query_isolation ON %s AS PERMISSIVE FOR SELECT TO timekeeper_query '
                   'USING (workspace_id = timekeeper_current_workspace())', target);
END
$$;

SELECT timekeeper_allow_queries(t) FROM unnest(ARRAY[
    'members', 'membership_types', 'memberships', 'invoices', 'payments'
]::regclass[]) AS t;
