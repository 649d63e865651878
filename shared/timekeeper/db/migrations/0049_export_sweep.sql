-- The exports' sweep of running exports nothing will finish (timekeeper.reporting.exports
-- .sweep_running_exports, in the exports.reoffer maintenance task of the queries
-- dispatcher's owner-wide pass). PostgreSQL 15 compatible.
--
-- exports.reoffered_at: when the sweep last sent a running export's message again (its
-- last attempt's lease and the queue's visibility timeout had passed with no new attempt:
-- the message was lost or dead-lettered); NULL: never.
ALTER TABLE exports ADD COLUMN reoffered_at timestamptz;

-- The sweep reads the running exports only.
CREATE INDEX exports_running ON exports (started_at) WHERE state = 'running';
