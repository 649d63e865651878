-- Reconciliation sweep (timekeeper.accounting.reconciliation). Scoped by %(workspace_id)s.

-- name: lock_workspace_sweep
-- One sweep per workspace at a time (transaction-level advisory lock, released at commit).
SELECT pg_advisory_xact_lock(hashtextextended('timekeeper.reconciliation:' || %(workspace_id)s::text, 0));

-- name: unreconciled_lines
SELECT id, workspace_id, bank_account, amount, booked_on, reference, matched_entry_id,
       reconciled_at, reconciled_by_run_id
FROM bank_lines
WHERE workspace_id = %(workspace_id)s AND matched_entry_id IS NULL
ORDER BY booked_on, id
LIMIT %(limit)s
FOR UPDATE;

-- name: candidate_entries
-- Posted, unreconciled entries on the lines' accounts with one of the lines' amounts, dated
-- within the window around the lines' dates or carrying one of the lines' references.
SELECT id, workspace_id, batch_id, account, amount, entry_date, reference, posted, posted_at,
       reconciled_by_bank_line_id, reconciled_at
FROM ledger_entries
WHERE workspace_id = %(workspace_id)s
  AND posted AND reconciled_by_bank_line_id IS NULL
  AND account = ANY(%(accounts)s::text[])
  AND amount = ANY(%(amounts)s::numeric[])
  AND (entry_date BETWEEN %(from_date)s AND %(to_date)s OR reference = ANY(%(references)s::text[]))
ORDER BY entry_date, id
FOR UPDATE;

-- name: reconcile_line
UPDATE bank_lines
SET matched_entry_id = %(entry_id)s, reconciled_at = %(now)s, reconciled_by_run_id = %(run_id)s
WHERE id = %(line_id)s AND workspace_id = %(workspace_id)s AND matched_entry_id IS NULL;

-- name: reconcile_entry
UPDATE ledger_entries
SET reconciled_by_bank_line_id = %(line_id)s, reconciled_at = %(now)s
WHERE id = %(entry_id)s AND workspace_id = %(workspace_id)s AND reconciled_by_bank_line_id IS NULL AND posted;

-- name: count_reconciled_by_run
SELECT count(*) AS n FROM bank_lines
WHERE workspace_id = %(workspace_id)s AND reconciled_by_run_id = %(run_id)s;

-- name: count_unreconciled
SELECT count(*) AS n FROM bank_lines
WHERE workspace_id = %(workspace_id)s AND matched_entry_id IS NULL;
