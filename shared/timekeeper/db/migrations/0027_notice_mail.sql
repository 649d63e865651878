-- Notice e-mails go through the per-recipient outbox of deliveries. PostgreSQL 15 compatible.
--
-- A notice message has no run: its communication key is `notice:<workspace>:<user>:<first
-- notice id>` (one message: a single notice or a digest of several), claimed before the
-- submission and its provider id recorded after, exactly as a delivery's `<run>:<user>`.
ALTER TABLE query_delivery_outbox ALTER COLUMN run_id DROP NOT NULL;
ALTER TABLE query_delivery_outbox ADD CONSTRAINT query_delivery_outbox_run_or_notice
    CHECK (run_id IS NOT NULL OR communication_key LIKE 'notice:%');
CREATE INDEX query_delivery_outbox_notice_idx ON query_delivery_outbox (workspace_id, user_id, sent_at)
    WHERE run_id IS NULL;

-- Failed posting jobs: the API lists them and asks for a retry (the job back to pending;
-- the accounting pipeline's sweep starts it within a pass).
GRANT SELECT, UPDATE (status, error, finished_at) ON posting_jobs TO timekeeper_api;
