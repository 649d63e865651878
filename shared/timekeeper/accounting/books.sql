-- Calendars, periods, recurring batches, batches and ledger entries (timekeeper.accounting.books).
-- Every statement is scoped by %(workspace_id)s.

-- name: insert_calendar
INSERT INTO accounting_calendars (workspace_id, name, timezone, frequency, anchor_date)
VALUES (%(workspace_id)s, %(name)s, %(timezone)s, %(frequency)s, %(anchor_date)s)
RETURNING id, workspace_id, name, timezone, frequency, anchor_date;

-- name: get_calendar
SELECT id, workspace_id, name, timezone, frequency, anchor_date
FROM accounting_calendars
WHERE id = %(calendar_id)s AND workspace_id = %(workspace_id)s;

-- name: lock_calendar
SELECT id, workspace_id, name, timezone, frequency, anchor_date
FROM accounting_calendars
WHERE id = %(calendar_id)s AND workspace_id = %(workspace_id)s
FOR UPDATE;

-- name: insert_period
INSERT INTO accounting_periods (workspace_id, calendar_id, seq, name, starts_on, ends_on)
VALUES (%(workspace_id)s, %(calendar_id)s, %(seq)s, %(name)s, %(starts_on)s, %(ends_on)s)
RETURNING id, workspace_id, calendar_id, seq, name, starts_on, ends_on;

-- name: list_periods
SELECT id, workspace_id, calendar_id, seq, name, starts_on, ends_on
FROM accounting_periods
WHERE calendar_id = %(calendar_id)s AND workspace_id = %(workspace_id)s
ORDER BY starts_on;

-- name: last_period
SELECT id, workspace_id, calendar_id, seq, name, starts_on, ends_on
FROM accounting_periods
WHERE calendar_id = %(calendar_id)s AND workspace_id = %(workspace_id)s
ORDER BY starts_on DESC
LIMIT 1;

-- name: get_period
SELECT id, workspace_id, calendar_id, seq, name, starts_on, ends_on
FROM accounting_periods
WHERE id = %(period_id)s AND workspace_id = %(workspace_id)s;

-- name: period_covering
-- The period whose [starts_on, ends_on] contains %(on)s; no row when the day is uncovered.
SELECT id, workspace_id, calendar_id, seq, name, starts_on, ends_on
FROM accounting_periods
WHERE calendar_id = %(calendar_id)s AND workspace_id = %(workspace_id)s
  AND starts_on <= %(on)s AND ends_on >= %(on)s
ORDER BY starts_on DESC
LIMIT 1;

-- name: periods_after
SELECT id, workspace_id, calendar_id, seq, name, starts_on, ends_on
FROM accounting_periods
WHERE calendar_id = %(calendar_id)s AND workspace_id = %(workspace_id)s
  AND starts_on > %(after)s
ORDER BY starts_on;

-- name: insert_recurring_batch
INSERT INTO recurring_batches (workspace_id, calendar_id, name, auto_post)
VALUES (%(workspace_id)s, %(calendar_id)s, %(name)s, %(auto_post)s)
RETURNING id, workspace_id, calendar_id, name, active_batch_id, auto_post;

-- name: get_recurring_batch
SELECT id, workspace_id, calendar_id, name, active_batch_id, auto_post
FROM recurring_batches
WHERE id = %(recurring_batch_id)s AND workspace_id = %(workspace_id)s;

-- name: lock_recurring_batch
-- Serializes rolls of one recurring batch (a duplicate delivery waits here).
SELECT id, workspace_id, calendar_id, name, active_batch_id, auto_post
FROM recurring_batches
WHERE id = %(recurring_batch_id)s AND workspace_id = %(workspace_id)s
FOR UPDATE;

-- name: set_active_batch
UPDATE recurring_batches
SET active_batch_id = %(batch_id)s
WHERE id = %(recurring_batch_id)s AND workspace_id = %(workspace_id)s;

-- name: insert_batch
INSERT INTO batches (workspace_id, recurring_batch_id, period_id, name, status, auto_post,
                     opened_at, close_at, opened_by_run_id)
VALUES (%(workspace_id)s, %(recurring_batch_id)s, %(period_id)s, %(name)s, 'open', %(auto_post)s,
        %(opened_at)s, %(close_at)s, %(opened_by_run_id)s)
RETURNING id, workspace_id, recurring_batch_id, period_id, name, status, auto_post, opened_at,
          close_at, closed_at, posted_at, opened_by_run_id, closed_by_run_id;

-- name: get_batch
SELECT id, workspace_id, recurring_batch_id, period_id, name, status, auto_post, opened_at,
       close_at, closed_at, posted_at, opened_by_run_id, closed_by_run_id
FROM batches
WHERE id = %(batch_id)s AND workspace_id = %(workspace_id)s;

-- name: lock_batch
SELECT id, workspace_id, recurring_batch_id, period_id, name, status, auto_post, opened_at,
       close_at, closed_at, posted_at, opened_by_run_id, closed_by_run_id
FROM batches
WHERE id = %(batch_id)s AND workspace_id = %(workspace_id)s
FOR UPDATE;

-- name: batch_for_period
SELECT id, workspace_id, recurring_batch_id, period_id, name, status, auto_post, opened_at,
       close_at, closed_at, posted_at, opened_by_run_id, closed_by_run_id
FROM batches
WHERE recurring_batch_id = %(recurring_batch_id)s AND period_id = %(period_id)s
  AND workspace_id = %(workspace_id)s;

-- name: batch_opened_by_run
SELECT id, workspace_id, recurring_batch_id, period_id, name, status, auto_post, opened_at,
       close_at, closed_at, posted_at, opened_by_run_id, closed_by_run_id
FROM batches
WHERE opened_by_run_id = %(run_id)s AND recurring_batch_id = %(recurring_batch_id)s
  AND workspace_id = %(workspace_id)s;

-- name: batch_closed_by_run
SELECT id, workspace_id, recurring_batch_id, period_id, name, status, auto_post, opened_at,
       close_at, closed_at, posted_at, opened_by_run_id, closed_by_run_id
FROM batches
WHERE closed_by_run_id = %(run_id)s AND recurring_batch_id = %(recurring_batch_id)s
  AND workspace_id = %(workspace_id)s;

-- name: close_batch
-- Only an open batch closes; the returned row tells the caller it was this statement.
UPDATE batches
SET status = 'closed', closed_at = %(now)s, closed_by_run_id = %(run_id)s
WHERE id = %(batch_id)s AND workspace_id = %(workspace_id)s AND status = 'open'
RETURNING id, workspace_id, recurring_batch_id, period_id, name, status, auto_post, opened_at,
          close_at, closed_at, posted_at, opened_by_run_id, closed_by_run_id;

-- name: insert_entry
INSERT INTO ledger_entries (workspace_id, batch_id, account, amount, entry_date, reference)
VALUES (%(workspace_id)s, %(batch_id)s, %(account)s, %(amount)s, %(entry_date)s, %(reference)s)
RETURNING id, workspace_id, batch_id, account, amount, entry_date, reference, posted, posted_at,
          reconciled_by_bank_line_id, reconciled_at;

-- name: list_entries
SELECT id, workspace_id, batch_id, account, amount, entry_date, reference, posted, posted_at,
       reconciled_by_bank_line_id, reconciled_at
FROM ledger_entries
WHERE batch_id = %(batch_id)s AND workspace_id = %(workspace_id)s
ORDER BY entry_date, id;

-- name: insert_bank_line
INSERT INTO bank_lines (workspace_id, bank_account, amount, booked_on, reference)
VALUES (%(workspace_id)s, %(bank_account)s, %(amount)s, %(booked_on)s, %(reference)s)
RETURNING id, workspace_id, bank_account, amount, booked_on, reference, matched_entry_id,
          reconciled_at, reconciled_by_run_id;

-- name: insert_billing_plan
INSERT INTO billing_plans (workspace_id, customer, amount, currency, interval_months, anchor_day,
                           next_bill_date, active)
VALUES (%(workspace_id)s, %(customer)s, %(amount)s, %(currency)s, %(interval_months)s, %(anchor_day)s,
        %(next_bill_date)s, %(active)s)
RETURNING id, workspace_id, customer, amount, currency, interval_months, anchor_day, next_bill_date, active;

-- name: get_billing_plan
SELECT id, workspace_id, customer, amount, currency, interval_months, anchor_day, next_bill_date, active
  FROM billing_plans
 WHERE id = %(plan_id)s AND workspace_id = %(workspace_id)s

-- name: choose_recurring_batch
-- The recurring batches a batch.roll schedule may name, by name.
SELECT id, name FROM recurring_batches
 WHERE workspace_id = %(workspace_id)s
 ORDER BY name, id
 LIMIT %(limit)s;

-- name: choose_batch
-- The open batches a batch.auto_close schedule may name, by name.
SELECT id, name FROM batches
 WHERE workspace_id = %(workspace_id)s AND status = 'open'
 ORDER BY name, id
 LIMIT %(limit)s;

-- name: choose_billing_plan
-- The active billing plans a billing.prepare schedule may name, by customer.
SELECT id, customer || ' (' || amount::text || ' ' || currency || ', '
          || CASE interval_months WHEN 1 THEN 'monthly' ELSE 'every ' || interval_months || ' months' END || ')' AS name
  FROM billing_plans
 WHERE workspace_id = %(workspace_id)s AND active
 ORDER BY customer, id
 LIMIT %(limit)s;
