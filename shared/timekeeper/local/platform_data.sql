-- Named queries of timekeeper.local.platform_data (never deployed: the layer leaves local/ out).

-- name: workspace_currency
SELECT currency, created_at FROM workspaces WHERE id = %s

-- name: volume_member_exists
SELECT 1 FROM members WHERE workspace_id = %s AND member_number = %s

-- name: lift_statement_timeout
SELECT current_setting('statement_timeout'), set_config('statement_timeout', '0', true)

-- name: set_replication_role
SELECT set_config('session_replication_role', %s, true)

-- name: set_statement_timeout
SELECT set_config('statement_timeout', %s, true)

-- name: count_user_triggers
SELECT count(*) FROM pg_trigger
WHERE tgrelid IN ('members'::regclass, 'invoices'::regclass, 'payments'::regclass)
  AND NOT tgisinternal

-- name: replication_role
SELECT current_setting('session_replication_role')

-- name: set_replication_role_replica
SELECT set_config('session_replication_role', 'replica', true)

-- name: copy_volume_members
COPY members (id, workspace_id, member_number, display_name, email, city, joined_on, created_at) FROM STDIN

-- name: copy_volume_invoices
COPY invoices (id, workspace_id, member_id, number, issue_date, due_date, amount_minor, currency, status, voided_on, created_at) FROM STDIN

-- name: copy_volume_payments
COPY payments (id, workspace_id, invoice_id, received_on, amount_minor, currency, method, created_at) FROM STDIN

-- The blocks below take identifiers, not values: each `{}` is filled with psycopg.sql
-- Identifiers (a table of the sample, its temporary stage table, their column lists).

-- name: create_stage_table
CREATE TEMPORARY TABLE {} (LIKE {} INCLUDING DEFAULTS)

-- name: copy_into_stage
COPY {} ({}) FROM STDIN

-- name: insert_missing_from_stage
INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT DO NOTHING

-- name: drop_stage_table
DROP TABLE {}

-- name: analyze_table
ANALYZE {}
