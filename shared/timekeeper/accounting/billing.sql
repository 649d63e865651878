-- Recurring billing preparation (timekeeper.accounting.billing). Scoped by %(workspace_id)s.

-- name: lock_plan
SELECT id, workspace_id, customer, amount, currency, interval_months, anchor_day, next_bill_date, active
FROM billing_plans
WHERE id = %(plan_id)s AND workspace_id = %(workspace_id)s
FOR UPDATE;

-- name: lock_due_plans
-- Active plans billing on or before the horizon; locked in id order (no deadlock between
-- two preparations), re-checked after a wait so an advanced plan drops out.
SELECT id, workspace_id, customer, amount, currency, interval_months, anchor_day, next_bill_date, active
FROM billing_plans
WHERE workspace_id = %(workspace_id)s AND active AND next_bill_date <= %(through)s
ORDER BY id
FOR UPDATE;

-- name: insert_invoice
-- Idempotent by UNIQUE (billing_plan_id, billing_date): an existing draft is kept as is.
INSERT INTO draft_invoices (workspace_id, billing_plan_id, billing_date, amount, currency, status,
                            prepared_at, prepared_by_run_id)
VALUES (%(workspace_id)s, %(plan_id)s, %(billing_date)s, %(amount)s, %(currency)s, 'draft',
        %(now)s, %(run_id)s)
ON CONFLICT (billing_plan_id, billing_date) DO NOTHING
RETURNING id, workspace_id, billing_plan_id, billing_date, amount, currency, status, prepared_at,
          prepared_by_run_id;

-- name: advance_plan
UPDATE billing_plans
SET next_bill_date = %(next_bill_date)s
WHERE id = %(plan_id)s AND workspace_id = %(workspace_id)s;

-- name: invoices_by_run
SELECT id, workspace_id, billing_plan_id, billing_date, amount, currency, status, prepared_at,
       prepared_by_run_id
FROM draft_invoices
WHERE workspace_id = %(workspace_id)s AND prepared_by_run_id = %(run_id)s
ORDER BY billing_date, billing_plan_id;
