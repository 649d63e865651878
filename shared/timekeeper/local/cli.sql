-- Named queries of timekeeper.local.cli (never deployed: the layer leaves local/ out).

-- name: database_names
SELECT datname FROM pg_database WHERE NOT datistemplate ORDER BY 1
