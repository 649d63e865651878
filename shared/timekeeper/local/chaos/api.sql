-- Named queries of timekeeper.local.chaos.api (never deployed: the layer leaves local/ out).

-- name: first_accounting_schedule
SELECT id, workspace_id FROM schedules
WHERE owner = 'accounting' AND status = 'active' AND deleted_at IS NULL
ORDER BY name LIKE 'load 0:%%' DESC, name, id LIMIT 1

-- name: manual_runs_of_schedule
SELECT id FROM schedule_runs WHERE schedule_id = %s AND trigger = 'manual'

-- name: daily_open_invoices_delivery
SELECT id FROM schedules WHERE workspace_id = %s AND owner = 'queries' AND name = 'Daily open invoices'

-- name: open_invoices_query
SELECT id FROM saved_queries WHERE workspace_id = %s AND name = 'Open invoices'

-- name: invoice_report
SELECT id FROM reports WHERE workspace_id = %s AND name = 'Invoice report'

-- name: export_state
SELECT state FROM exports WHERE id = %s

-- name: render_state
SELECT state FROM report_renders WHERE id = %s
