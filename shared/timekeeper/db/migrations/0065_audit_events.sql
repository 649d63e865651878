-- The workspace's audit log, and the settings its admins change through the API.
-- PostgreSQL 15 compatible.
--
-- audit_events: one row per change in a workspace, written by the code that makes the
-- change in the same transaction (timekeeper.platform.audit.record_event): who (actor, a
-- user id), when (at, UTC), what kind of change (kind, e.g. settings.updated,
-- schedule.updated), the object (subject_type, subject_id), its fields before and after
-- (jsonb objects of the changed fields only) and an optional reason. Append-only: the API
-- and the workers may insert and read; nobody updates or deletes a row (the workers' grant
-- of UPDATE and DELETE by default privileges is revoked below).
--
-- The log pages newest first by id within a workspace: (workspace_id, id DESC), and by
-- area, actor or both with (workspace_id, area, id DESC), (workspace_id, actor, id DESC)
-- and (workspace_id, area, actor, id DESC), so one page is an index range scan at a
-- million rows, even for a filter no row matches.
CREATE TABLE audit_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- No reference to workspaces: the scheduling core runs workspaces the Platform
    -- directory may not hold (as schedule_events does), and their changes are audited too.
    workspace_id  uuid NOT NULL,
    actor         text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    kind          text NOT NULL CHECK (kind ~ '^[a-z_]{1,40}\.[a-z_]{1,40}$'),
    subject_type  text NOT NULL CHECK (length(subject_type) BETWEEN 1 AND 60),
    subject_id    text CHECK (subject_id IS NULL OR length(subject_id) BETWEEN 1 AND 200),
    before        jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(before) = 'object'),
    after         jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(after) = 'object'),
    reason        text CHECK (reason IS NULL OR length(reason) BETWEEN 1 AND 500),
    at            timestamptz NOT NULL,
    -- The kind's area (settings, schedule, delivery, ...): what the log is filtered by.
    area          text GENERATED ALWAYS AS (split_part(kind, '.', 1)) STORED
);
CREATE INDEX audit_events_workspace_idx ON audit_events (workspace_id, id DESC);
CREATE INDEX audit_events_area_idx ON audit_events (workspace_id, area, id DESC);
CREATE INDEX audit_events_actor_idx ON audit_events (workspace_id, actor, id DESC);
CREATE INDEX audit_events_area_actor_idx ON audit_events (workspace_id, area, actor, id DESC);
SELECT timekeeper_enable_tenant_rls('audit_events');

GRANT SELECT, INSERT ON audit_events TO timekeeper_api;
REVOKE UPDATE, DELETE, TRUNCATE ON audit_events FROM timekeeper_worker;

-- The workspace's settings its admins change through the API (the tenant policy on
-- workspaces already limits the API to the entered workspace).
GRANT UPDATE (timezone, locale, notify_admins) ON workspaces TO timekeeper_api;

-- Who turned a person's notice e-mails off: NULL when the person did (the one-click link),
-- else the workspace admin's user id. An admin may turn back on only what an admin turned
-- off; a person's own opt-out is theirs to undo.
ALTER TABLE notice_mail_opt_outs ADD COLUMN set_by text CHECK (set_by IS NULL OR length(set_by) BETWEEN 1 AND 200);
