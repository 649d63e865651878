-- The operations overview's index of paused and failing schedules no longer indexes
-- updated_at. PostgreSQL 15 compatible.
--
-- Every settlement writes the schedule's updated_at (with last_run_at, last_outcome and
-- consecutive_failures). While updated_at was an indexed column, no settlement could be a
-- heap-only (HOT) update: each one inserted a new entry into every index of schedules,
-- the claim index included (measured: about 35 us more server CPU per run on the
-- consumer's side, a quarter of its total). The partial index now holds the schedule id
-- only: its predicate keeps it to the schedules that need attention, a healthy
-- schedule's settlement (consecutive_failures stays 0, status stays active) changes no
-- indexed column and stays HOT, and the overview sorts the (few) matching rows by
-- updated_at itself.
DROP INDEX schedules_attention_idx;
CREATE INDEX schedules_attention_idx ON schedules (id)
    WHERE deleted_at IS NULL AND (status = 'paused' OR consecutive_failures > 0);
