-- The instant a run was given inside its schedule's flexible window.
-- PostgreSQL 15 compatible.
--
-- A rule with "window_minutes" runs each occurrence at a stable instant inside the window
-- (a hash of the schedule and the occurrence). occurrence_at stays the intended occurrence
-- (its key, backlog and history); due_at is the instant the run was due and claimed at.
-- NULL: the run was due at its occurrence (no window, or an on-demand run). Nullable with
-- no default, so adding it rewrites nothing.
ALTER TABLE schedule_runs ADD COLUMN due_at timestamptz;
