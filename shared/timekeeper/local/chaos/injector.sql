-- Named queries of timekeeper.local.chaos.injector (never deployed: the layer leaves local/ out).

-- name: attempts_of_run
SELECT attempts FROM schedule_runs WHERE id = %s

-- name: accounting_workspaces
SELECT DISTINCT workspace_id FROM schedules WHERE owner = 'accounting' ORDER BY 1

-- name: open_invoices_query
SELECT id FROM saved_queries WHERE workspace_id = %s AND name = 'Open invoices'
