-- A query's preview: the console shows a draft query's first rows before it is saved.
-- PostgreSQL 15 compatible.
--
-- The API runs the draft's compiled statement as the query wall's role (timekeeper_query,
-- migration 0025), exactly as an export runs a saved one: row-level security shows the
-- entered workspace's rows of the catalogue's tables and nothing else, in a read-only
-- transaction (timekeeper.reporting.compiler.preview_rows).
--
-- The API may switch to that role but must not hold its privileges outside the switch: the
-- business tables stay unreadable by the API's own statements. So the API is a member of
-- timekeeper_query_gate, a NOLOGIN NOINHERIT role that is itself a member of
-- timekeeper_query: membership through it lets the API's login (and its rotation twin, a
-- member of the login) SET ROLE timekeeper_query, while the chain of inherited privileges
-- stops at the gate (PostgreSQL 15: a NOINHERIT role passes on no privileges it is granted;
-- 16 and later: the gate's grant of timekeeper_query takes INHERIT FALSE from the gate).

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
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'timekeeper_query_gate') THEN
        PERFORM pg_temp.timekeeper_role_statement('CREATE ROLE timekeeper_query_gate NOLOGIN NOINHERIT');
    END IF;
    IF NOT pg_has_role('timekeeper_query_gate', 'timekeeper_query', 'MEMBER') THEN
        PERFORM pg_temp.timekeeper_role_statement('GRANT timekeeper_query TO timekeeper_query_gate');
    END IF;
    IF NOT pg_has_role('timekeeper_api', 'timekeeper_query_gate', 'MEMBER') THEN
        PERFORM pg_temp.timekeeper_role_statement('GRANT timekeeper_query_gate TO timekeeper_api');
    END IF;
END
$$;
