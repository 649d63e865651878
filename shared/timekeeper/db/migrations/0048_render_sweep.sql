-- The renders' sweep (timekeeper.reporting.rendering.sweep_renders, a maintenance task of
-- the queries dispatcher's owner-wide pass): a render nobody finishes is asked for again
-- or settled, whatever happened to the invocations that should have run it.
-- PostgreSQL 15 compatible.
--
-- report_renders.reoffered_at: when the sweep last asked the renderer for the render
-- (NULL: never); report_renders.reoffers: how many times it did (bounded: a render asked
-- for that often without a result is settled failed, attempts_exhausted).
ALTER TABLE report_renders ADD COLUMN reoffered_at timestamptz;
ALTER TABLE report_renders ADD COLUMN reoffers integer NOT NULL DEFAULT 0;

-- The sweep reads the unfinished renders only, oldest activity first.
CREATE INDEX report_renders_unfinished ON report_renders (requested_at)
    WHERE state IN ('requested', 'rendering');
