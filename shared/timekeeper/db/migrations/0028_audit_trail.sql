-- The audit trail. PostgreSQL 15 compatible.
--
-- Changes to a query schedule are `updated` history events whose detail names each
-- changed field with its old and new value (recipients, templates, format, source,
-- skip-when-empty, link lifetime); a reassignment is `owner_changed`. Staff reads across
-- workspaces are rows of staff_reads in the workspace that was read, with the actor and
-- the instant: the workspace's admins read them through the API.
-- The list also holds the business days' `holidays_changed` (migration 0032): whichever of
-- the two a database applies last, both kinds stay allowed.
ALTER TABLE schedule_events DROP CONSTRAINT schedule_events_kind_check;
ALTER TABLE schedule_events ADD CONSTRAINT schedule_events_kind_check CHECK (kind IN (
    'created', 'updated', 'deleted', 'claimed', 'backlog_skipped', 'offered', 'released', 'reoffered',
    'started', 'settled', 'paused', 'resumed', 'definition_invalid', 'run_requested', 'owner_changed',
    'holidays_changed'));

CREATE TABLE staff_reads (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspaces (id),
    actor         text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    what          text NOT NULL CHECK (length(what) BETWEEN 1 AND 200),
    detail        jsonb NOT NULL DEFAULT '{}',
    at            timestamptz NOT NULL
);
CREATE INDEX staff_reads_workspace_idx ON staff_reads (workspace_id, id);
SELECT timekeeper_enable_tenant_rls('staff_reads');

-- A staff read is recorded by the API in the workspace it read (entered on the walled
-- connection), and read back by that workspace's admins; never changed.
GRANT SELECT, INSERT ON staff_reads TO timekeeper_api;
