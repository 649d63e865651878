-- Named queries of timekeeper.local.export (never deployed: the layer leaves local/ out).

-- name: workspace_has_invoices
SELECT 1 FROM invoices WHERE workspace_id = %s LIMIT 1

-- name: insert_demo_members
INSERT INTO members (workspace_id, member_number, display_name, joined_on)
SELECT %s, 'M' || lpad(g::text, 4, '0'), 'Member ' || g, %s
  FROM generate_series(1, 50) g

-- name: insert_demo_invoices
INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, currency,
                      status, voided_on)
SELECT %(ws)s, m.id, 'INV-' || lpad(g::text, 6, '0'), %(d)s + (g %% 365), %(d)s + (g %% 365) + 30,
       (g * 7919) %% 100000, 'EUR', s.status, CASE WHEN s.status = 'void' THEN %(d)s + (g %% 365) END
  FROM generate_series(1, %(n)s) g
  JOIN LATERAL (SELECT (ARRAY['draft', 'open', 'paid', 'void'])[1 + g %% 4] AS status) s ON true
  JOIN LATERAL (SELECT id FROM members WHERE workspace_id = %(ws)s
                 ORDER BY member_number OFFSET (g %% 50) LIMIT 1) m ON true
