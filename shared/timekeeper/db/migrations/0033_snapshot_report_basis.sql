-- Reports read published snapshots: what each render and each delivery was based on.
-- PostgreSQL 15 compatible.
--
-- report_renders.snapshot_basis: per section, in section order, the published snapshot
-- version the section showed -- {"owner", "snapshot_type", "period" (YYYY-MM-DD, the
-- month's first day), "version", "published_at" (UTC), "run_id", "choice"} -- or null for a
-- section over other data; NULL when the report has no snapshot section (or the render
-- has not succeeded).
--
-- query_delivery_sources.snapshot_basis: the render's, copied with the delivered file;
-- snapshot_version_changed: a period this delivery showed was shown by the schedule's
-- previous delivery in another version (a newer version was published in between).
ALTER TABLE report_renders ADD COLUMN snapshot_basis jsonb;
ALTER TABLE query_delivery_sources ADD COLUMN snapshot_basis jsonb,
    ADD COLUMN snapshot_version_changed boolean NOT NULL DEFAULT false;
