-- Personal data has a lifetime. PostgreSQL 15 compatible.
--
-- The one recipient address the delivery history holds (query_deliveries.address: where a
-- run's message to a recipient went) is removed once the personal-data retention has
-- passed (timekeeper.db.retention, the history-retention pass). The row stays, with its status, skip reason,
-- error code, provider message id, attempt and instants, so every count, report and audit
-- still adds up; address_erased_at says when the address went and that it went on
-- purpose (a skipped row never had one).
ALTER TABLE query_deliveries ADD COLUMN address_erased_at timestamptz;
ALTER TABLE query_deliveries ADD CONSTRAINT query_deliveries_erased_without_address
    CHECK (address_erased_at IS NULL OR address IS NULL);
-- The rows that still hold an address, oldest first (the retention batches walk it).
CREATE INDEX query_deliveries_address_retention_idx ON query_deliveries (updated_at) WHERE address IS NOT NULL;
