-- The API records staff snapshot requests (timekeeper.snapshots.ledger.request_run) under
-- its walled login. That function locks what it checks: the target workspace's row
-- (SELECT ... FOR SHARE, so its timezone cannot change between the period check and the
-- insert) and the period's runs (SELECT ... FOR UPDATE, so a concurrent publish or
-- protection change is seen before a new version is added). PostgreSQL allows those row
-- locks only to a role with UPDATE on at least one column of the table.
--
-- The grants below are LOCK-ONLY: UPDATE of the tenant key column alone. The API's
-- tenant_isolation policies (0003, 0007) pin that column in both directions -- USING (the
-- row's workspace is the entered one) and WITH CHECK (the new value is the entered one) --
-- so the only UPDATE these grants make possible rewrites the key to the value it already
-- has. No other column of either table becomes writable by the API.
GRANT UPDATE (id) ON workspaces TO timekeeper_api;
GRANT UPDATE (workspace_id) ON snapshot_runs TO timekeeper_api;
