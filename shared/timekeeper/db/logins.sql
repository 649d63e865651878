-- name: current_login
-- The session's login and what row-level security makes of it: bypass (superuser or
-- BYPASSRLS), walled (a member of the walled role), owner (may act as the owner of
-- schedules, whom policies do not apply to).
SELECT r.rolname AS name,
       r.rolsuper OR r.rolbypassrls AS bypass,
       pg_has_role(r.oid, %(walled_role)s, 'USAGE') AS walled,
       coalesce(pg_has_role(r.oid, (SELECT relowner FROM pg_class WHERE oid = to_regclass('schedules')), 'USAGE'),
                false) AS owner
  FROM pg_roles r
 WHERE r.rolname = current_user
