-- A query's preview: the console shows a draft query's first rows before it is saved.
-- PostgreSQL 15 compatible.
--
-- The API runs the draft's compiled statement as the query wall's role (timekeeper_query,
-- migration 0025), exactly as an export runs a saved one: row-level security shows the
-- entered workspace's rows of the catalogue's tables and nothing else, in a read-only
-- transaction (timekeeper.reporting.compiler.preview_rows). The API's login becomes a
-- member of that role; its rotation twin is a member of the login, so it is too.

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
    IF NOT pg_has_role('timekeeper_api', 'timekeeper_query', 'MEMBER') THEN
        PERFORM pg_temp.timekeeper_role_statement('GRANT timekeeper_query TO timekeeper_api');
    END IF;
END
$$;
