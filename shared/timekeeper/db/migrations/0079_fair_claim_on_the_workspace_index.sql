-- The fair claim reads the workspace index; its own index goes. PostgreSQL 15 compatible.
--
-- An advance of next_due_at changes a key of schedules_claim_idx, so it is never a
-- heap-only update: it inserts an entry into every index of schedules. The fair claim's
-- own index (schedules_fair_claim_idx, migration 0071) was one more such entry on every
-- run dispatched, crowded batch or not (measured: about 700 bytes of WAL and a third more
-- server CPU per run). The workspace index already takes an entry on every advance; its
-- keys now serve both its readers, its entries as wide as before (next_due_at in place of
-- created_at: no more WAL per advance):
--
--   * the fair claim's per-workspace scans: the distinct workspaces (a skip scan on the
--     leading workspace_id, one descent each), each one's oldest due schedule of an owner,
--     and each one's share in due order (workspace_id and owner by equality, next_due_at in
--     order; the status and the partition's slot range are tested on the table row);
--   * the API's listing of a workspace's schedules (workspace_id, with owner when
--     filtered): it sorts the matching rows by (created_at, id) itself, as it already did
--     for a listing across owners.
DROP INDEX schedules_fair_claim_idx;
DROP INDEX schedules_workspace_idx;
CREATE INDEX schedules_workspace_idx ON schedules (workspace_id, owner, next_due_at);
