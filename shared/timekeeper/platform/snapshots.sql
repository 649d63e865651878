-- name: membership_counts
-- Month-end membership counts: every membership started by the month end, by its type and
-- its status then (cancelled by then, lapsed by then, else active).
INSERT INTO snapshot_membership_counts (run_id, workspace_id, membership_type, status, members)
SELECT %(run_id)s, m.workspace_id, mt.name, s.status, count(*)
  FROM memberships m
  JOIN membership_types mt ON mt.workspace_id = m.workspace_id AND mt.id = m.membership_type_id
 CROSS JOIN LATERAL (SELECT CASE WHEN m.cancelled_on IS NOT NULL AND m.cancelled_on <= %(as_of)s THEN 'cancelled'
                                 WHEN m.end_date IS NOT NULL AND m.end_date < %(as_of)s THEN 'lapsed'
                                 ELSE 'active' END AS status) s
 WHERE m.workspace_id = %(workspace_id)s AND m.start_date <= %(as_of)s
 GROUP BY m.workspace_id, mt.name, s.status

-- name: membership_totals
SELECT (SELECT count(*) FROM memberships WHERE workspace_id = %(workspace_id)s AND start_date <= %(as_of)s) AS source,
       (SELECT coalesce(sum(members), 0) FROM snapshot_membership_counts WHERE run_id = %(run_id)s) AS written,
       (SELECT count(*) FROM snapshot_membership_counts WHERE run_id = %(run_id)s) AS rows

-- name: invoice_count
SELECT count(*) AS n FROM invoices WHERE workspace_id = %(workspace_id)s

-- name: aging_chunk
-- One chunk of the aging: the next `chunk` invoices by id after the cursor; those
-- outstanding at the month end (issued by then, not draft, not void by then, unpaid
-- remainder after the payments received by then) get a row with their age bucket.
WITH slice AS (
    SELECT id FROM invoices
     WHERE workspace_id = %(workspace_id)s AND (%(after)s::uuid IS NULL OR id > %(after)s::uuid)
     ORDER BY id
     LIMIT %(chunk)s
), written AS (
    INSERT INTO snapshot_ar_aging (run_id, workspace_id, invoice_id, member_id, due_date, days_past_due, bucket,
                                   outstanding_minor, currency)
    SELECT %(run_id)s, i.workspace_id, i.id, i.member_id, i.due_date, a.days, a.bucket, a.outstanding, i.currency
      FROM slice s
      JOIN invoices i ON i.workspace_id = %(workspace_id)s AND i.id = s.id
      LEFT JOIN LATERAL (SELECT coalesce(sum(p.amount_minor), 0) AS paid FROM payments p
                          WHERE p.workspace_id = i.workspace_id AND p.invoice_id = i.id
                            AND p.received_on <= %(as_of)s) p ON true
     CROSS JOIN LATERAL (SELECT %(as_of)s::date - i.due_date AS days, i.amount_minor - p.paid AS outstanding,
                                CASE WHEN %(as_of)s::date - i.due_date <= 30 THEN '0-30'
                                     WHEN %(as_of)s::date - i.due_date <= 60 THEN '31-60'
                                     WHEN %(as_of)s::date - i.due_date <= 90 THEN '61-90'
                                     ELSE 'over_90' END AS bucket) a
     WHERE i.issue_date <= %(as_of)s AND i.status <> 'draft' AND (i.voided_on IS NULL OR i.voided_on > %(as_of)s)
       AND i.currency = %(currency)s AND a.outstanding > 0
    RETURNING 1
)
SELECT (SELECT id FROM slice ORDER BY id DESC LIMIT 1) AS last_id,
       (SELECT count(*) FROM slice) AS scanned,
       (SELECT count(*) FROM written) AS written

-- name: aging_source_totals
-- The same rule over every invoice at once: what the chunks must add up to.
SELECT count(*) AS invoices, coalesce(sum(o.outstanding), 0) AS outstanding
  FROM invoices i
  LEFT JOIN LATERAL (SELECT coalesce(sum(p.amount_minor), 0) AS paid FROM payments p
                      WHERE p.workspace_id = i.workspace_id AND p.invoice_id = i.id
                        AND p.received_on <= %(as_of)s) p ON true
 CROSS JOIN LATERAL (SELECT i.amount_minor - p.paid AS outstanding) o
 WHERE i.workspace_id = %(workspace_id)s AND i.issue_date <= %(as_of)s AND i.status <> 'draft'
   AND (i.voided_on IS NULL OR i.voided_on > %(as_of)s) AND i.currency = %(currency)s AND o.outstanding > 0

-- name: aging_written_totals
SELECT count(*) AS invoices, coalesce(sum(outstanding_minor), 0) AS outstanding
  FROM snapshot_ar_aging WHERE run_id = %(run_id)s

-- name: aging_buckets
SELECT bucket, count(*) AS invoices, sum(outstanding_minor) AS outstanding
  FROM snapshot_ar_aging WHERE run_id = %(run_id)s
 GROUP BY bucket ORDER BY bucket

-- name: selftest_chunk
INSERT INTO snapshot_selftest_rows (run_id, workspace_id, n)
SELECT %(run_id)s, %(workspace_id)s, g FROM generate_series(%(start)s::integer, %(stop)s::integer) g

-- name: selftest_count
SELECT count(*) AS n FROM snapshot_selftest_rows WHERE run_id = %(run_id)s

-- name: workspace_currency
SELECT currency FROM workspaces WHERE id = %s
