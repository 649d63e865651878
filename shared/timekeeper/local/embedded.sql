-- Named queries of timekeeper.local.embedded (never deployed: the layer leaves local/ out).
-- A database name is an identifier, not a value: `{}` is filled with psycopg.sql.Identifier
-- of a name already checked to be a plain identifier.

-- name: drop_database
DROP DATABASE IF EXISTS {} WITH (FORCE)

-- name: database_exists
SELECT 1 FROM pg_database WHERE datname = %s

-- name: create_database
CREATE DATABASE {}
