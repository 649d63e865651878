-- Personal data has a lifetime. PostgreSQL 15 compatible.
--
-- The one recipient address the delivery history holds (query_deliveries.address: where a
-- run's message to a recipient went) is removed once the personal-data retention has
-- passed (timekeeper.db.retention, the history-retention pass), or at once when staff
-- erase the person (the operations route). The row stays, with its status, skip reason,
-- error code, provider message id, attempt and instants, so every count, report and audit
-- still adds up; address_erased_at says when the address went and that it went on
-- purpose (a skipped row never had one).
ALTER TABLE query_deliveries ADD COLUMN address_erased_at timestamptz;
ALTER TABLE query_deliveries ADD CONSTRAINT query_deliveries_erased_without_address
    CHECK (address_erased_at IS NULL OR address IS NULL);
-- The rows that still hold an address, oldest first (the retention batches walk it).
CREATE INDEX query_deliveries_address_retention_idx ON query_deliveries (updated_at) WHERE address IS NOT NULL;
-- An erasure finds one person's rows in one workspace.
CREATE INDEX query_deliveries_person_idx ON query_deliveries (workspace_id, user_id);

-- Staff erasures are operations actions like a redrive or a resume (target: the
-- workspace; detail: a digest of the person's id and the counts, never an address).
ALTER TABLE operations_actions DROP CONSTRAINT operations_actions_action_check;
ALTER TABLE operations_actions ADD CONSTRAINT operations_actions_action_check
    CHECK (action IN ('redrive', 'resume', 'erase_person', 'unsuppress'));

-- The API's staff routes erase a person's addresses and recipient entries (walled into the
-- workspace) and take an address off the suppression list.
GRANT UPDATE (address, address_erased_at) ON query_deliveries TO timekeeper_api;
GRANT DELETE ON mail_suppressions TO timekeeper_api;
