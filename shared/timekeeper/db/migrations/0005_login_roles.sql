-- Login roles: the workers and the API each log in as their own role, with least privilege.
-- PostgreSQL 15 compatible.
--
-- timekeeper_worker       dispatchers and consumers: read and write the tables (no DDL, no
--                         migration records); a policy lets it past row-level security,
--                         since a claim spans every workspace.
-- timekeeper_api          the HTTP API: the role of migration 0003, now a login, walled by
--                         its tenant_isolation policies (not the owner, no BYPASSRLS).
-- <login>_clone           the twin the alternating-users rotation switches to: a member of
--                         its original (same grants, same policies), with the same settings.
-- The migrating role keeps the owner's rights (it owns the tables and bypasses RLS).
--
-- Timeouts are role settings, so no connection needs a startup option (RDS Proxy refuses
-- them) or a session SET (which pins a proxy connection): the workers' statement timeout
-- is timekeeper.topology.WORKER_STATEMENT_TIMEOUT_S, the API's API_STATEMENT_TIMEOUT_S
-- (tests/integration/test_connections.py compares them).
--
-- Passwords are not set here: the migration function sets each login's password from its
-- secret (timekeeper.runtime.provision_logins); a local server trusts local logins.
--
-- Roles are cluster-wide and several databases on one server (test workers) may run this
-- at once: every role statement is skipped when already in effect and retried when a
-- concurrent migration of another database touched the same catalog row.

CREATE FUNCTION pg_temp.timekeeper_role_statement(statement text) RETURNS void
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
DECLARE
    login text;
    original text;
    wanted text[];
BEGIN
    FOREACH login IN ARRAY ARRAY['timekeeper_worker', 'timekeeper_worker_clone', 'timekeeper_api',
                                 'timekeeper_api_clone'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
            PERFORM pg_temp.timekeeper_role_statement(format('CREATE ROLE %I LOGIN', login));
        ELSIF NOT (SELECT rolcanlogin FROM pg_roles WHERE rolname = login) THEN
            PERFORM pg_temp.timekeeper_role_statement(format('ALTER ROLE %I LOGIN', login));
        END IF;
        original := regexp_replace(login, '_clone$', '');
        IF login <> original AND NOT pg_has_role(login, original, 'MEMBER') THEN
            PERFORM pg_temp.timekeeper_role_statement(format('GRANT %I TO %I', original, login));
        END IF;
        wanted := CASE WHEN original = 'timekeeper_worker'
                       THEN ARRAY['statement_timeout=15s', 'idle_in_transaction_session_timeout=60s']
                       ELSE ARRAY['statement_timeout=20s', 'idle_in_transaction_session_timeout=30s'] END;
        IF (SELECT coalesce(rolconfig, '{}') FROM pg_roles WHERE rolname = login) IS DISTINCT FROM wanted THEN
            PERFORM pg_temp.timekeeper_role_statement(format('ALTER ROLE %I SET statement_timeout = %L', login,
                                                             split_part(wanted[1], '=', 2)));
            PERFORM pg_temp.timekeeper_role_statement(format(
                'ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', login, split_part(wanted[2], '=', 2)));
        END IF;
    END LOOP;
END
$$;

-- The workers: data, not schema. Tables of later migrations get the same grants by default.
GRANT USAGE ON SCHEMA public TO timekeeper_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO timekeeper_worker;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO timekeeper_worker;
REVOKE ALL ON schema_migrations FROM timekeeper_worker;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO timekeeper_worker;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO timekeeper_worker;

-- Row-level security: every table with RLS on gets the workers' pass-through policy beside
-- the API's tenant_isolation; later tenant tables get both from timekeeper_enable_tenant_rls.
CREATE FUNCTION timekeeper_allow_workers(target regclass) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('CREATE POLICY worker_access ON %s AS PERMISSIVE FOR ALL TO timekeeper_worker '
                   'USING (true) WITH CHECK (true)', target);
END
$$;

SELECT timekeeper_allow_workers(c.oid::regclass)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relrowsecurity AND n.nspname = current_schema()
   AND NOT EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'worker_access');

CREATE OR REPLACE FUNCTION timekeeper_enable_tenant_rls(target regclass) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
    EXECUTE format(
        'CREATE POLICY tenant_isolation ON %s AS PERMISSIVE FOR ALL TO timekeeper_api '
        'USING (workspace_id = timekeeper_current_workspace()) '
        'WITH CHECK (workspace_id = timekeeper_current_workspace())', target);
    PERFORM timekeeper_allow_workers(target);
END
$$;
