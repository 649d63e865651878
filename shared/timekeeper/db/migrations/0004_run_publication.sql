-- Publication of run offers, and bounded offers. PostgreSQL 15 compatible.
--
-- `published_at` is set when the queue accepted the run's current offer (cleared by the
-- next offer), so a dispatcher pass tells the two kinds of stranded run apart:
--   claimed but never published (the dispatcher died between its commit and the send,
--   or the queue refused it): offered again by the next pass;
--   published but never started after `reoffer_after` (the message was lost or
--   dead-lettered): offered again, at most a bounded number of times.
-- `publish_count` counts the offers the queue accepted (the bound on re-offers).
ALTER TABLE schedule_runs
    ADD COLUMN published_at  timestamptz,
    ADD COLUMN publish_count integer NOT NULL DEFAULT 0;

-- Offers not yet accepted by the queue (released ones have no offered_at): read by the
-- next pass. Stays small: a run leaves it once its message is accepted.
CREATE INDEX schedule_runs_unpublished_idx ON schedule_runs (owner, offered_at NULLS FIRST)
    WHERE state = 'queued' AND published_at IS NULL;
-- Accepted offers whose run never started.
CREATE INDEX schedule_runs_published_idx ON schedule_runs (owner, published_at)
    WHERE state = 'queued' AND published_at IS NOT NULL;
DROP INDEX schedule_runs_offer_idx;
