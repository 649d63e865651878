-- Publication of run offers recorded per claim batch, not per run. PostgreSQL 15 compatible.
--
-- The dispatcher's claim inserts its queued runs already recorded as accepted by the
-- queue (`published_at` = `offered_at`, `publish_count` = 1) and, in the same statement,
-- one row here naming them: the batch's offer is pending until the queue accepted it.
-- After the send the dispatcher deletes the row (one small statement per batch, where it
-- used to update every run row a second time); refused runs are released as before, their
-- optimistic count taken back. A row still here `unpublished_after` later means the
-- process died between the claim's commit and the record: the next pass offers the
-- batch's runs that are still queued again, as unpublished runs.
--
-- The rows span workspaces (a claim batch does) and hold nothing of a tenant but run ids;
-- only the dispatcher reads or writes them.
CREATE TABLE schedule_pending_offers (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner       text NOT NULL,
    offered_at  timestamptz NOT NULL,
    run_ids     uuid[] NOT NULL
);
CREATE INDEX schedule_pending_offers_owner_idx ON schedule_pending_offers (owner, offered_at);
