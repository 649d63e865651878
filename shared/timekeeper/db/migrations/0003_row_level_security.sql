-- Row-level security: the second tenant wall below the scoped queries (composite keys are the first).
-- PostgreSQL 15 compatible.
--
-- Who is walled: the NOLOGIN role `timekeeper_api`. The HTTP API's connection switches to
-- it (`SET ROLE timekeeper_api`, see timekeeper.api.db) and enters the caller's workspace
-- in every transaction with timekeeper.db.set_tenant, i.e. the transaction-local setting
-- `app.workspace_id`. Under that role a row is visible (and writable) only when its
-- workspace_id equals the setting; without the setting no row is visible at all.
--
-- Who is not: the table owner (the role that runs the migrations, the dispatchers and the
-- consumers). Tables are not FORCE ROW LEVEL SECURITY, so the owner keeps bypassing the
-- policies: the dispatcher claims every workspace's due schedules in one statement and
-- the consumer reads a run before it knows its workspace. Those paths are not
-- tenant-facing; their queries are scoped by the run's own workspace_id.
--
-- Later migrations that add a tenant table call
--     SELECT timekeeper_enable_tenant_rls('my_table');
-- (tests/api/test_row_level_security.py checks that every table with a workspace_id
-- column has the policy).

-- Roles are cluster-wide: several databases on one server (test workers) may race here.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'timekeeper_api') THEN
        CREATE ROLE timekeeper_api NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- created concurrently by another database's migration
END
$$;

-- The migrating (owner) role must be allowed to SET ROLE timekeeper_api: the API
-- connects with the same credentials and drops to the walled role.
DO $$
BEGIN
    IF NOT pg_has_role(current_user, 'timekeeper_api', 'MEMBER') THEN
        EXECUTE format('GRANT timekeeper_api TO %I', current_user);
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- The workspace the current transaction entered, or NULL (never set, or set to '').
CREATE FUNCTION timekeeper_current_workspace() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT nullif(current_setting('app.workspace_id', true), '')::uuid $$;

-- Enable RLS on a tenant table with the workspace policy for timekeeper_api.
CREATE FUNCTION timekeeper_enable_tenant_rls(target regclass) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
    EXECUTE format(
        'CREATE POLICY tenant_isolation ON %s AS PERMISSIVE FOR ALL TO timekeeper_api '
        'USING (workspace_id = timekeeper_current_workspace()) '
        'WITH CHECK (workspace_id = timekeeper_current_workspace())', target);
END
$$;

SELECT timekeeper_enable_tenant_rls(t) FROM unnest(ARRAY[
    'schedules', 'schedule_runs', 'schedule_events', 'schedule_notifications',
    'accounting_calendars', 'accounting_periods', 'recurring_batches', 'batches', 'ledger_entries',
    'posting_jobs', 'bank_lines', 'billing_plans', 'draft_invoices'
]::regclass[]) AS t;

-- Least privilege: the API reads and writes schedules, their runs and their history only
-- (no DELETE: a deleted schedule is kept for audit). Other tenant tables get grants from
-- the migrations of the routes that need them, and the policy above applies to them too.
GRANT USAGE ON SCHEMA public TO timekeeper_api;
GRANT SELECT, INSERT, UPDATE ON schedules, schedule_runs, schedule_events TO timekeeper_api;
