-- A workspace's closures: local dates the workspace does not work (a company holiday, an
-- office move), on top of the public holidays a business-day rule names. Business-day
-- calendar rules of the workspace skip them; adding or removing one recomputes those
-- schedules' next due instants and records a history event on each. PostgreSQL 15 compatible.
CREATE TABLE workspace_closures (
    workspace_id  uuid NOT NULL,
    closed_on     date NOT NULL,
    reason        text NOT NULL DEFAULT '' CHECK (length(reason) <= 200),
    created_by    text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, closed_on)
);

SELECT timekeeper_enable_tenant_rls('workspace_closures'::regclass);

-- The API lists, adds and removes a workspace's closures (walled by the tenant policy);
-- the dispatcher (timekeeper_worker, by default privileges) reads them when it claims.
GRANT SELECT, INSERT, DELETE ON workspace_closures TO timekeeper_api;

-- A business-day schedule's holiday set changed (a closure added or removed): its next due
-- instant was recomputed; the event says which date and the instants before and after.
-- The list also holds the audit trail's `owner_changed` (migration 0028): whichever of the
-- two a database applies last, both kinds stay allowed.
ALTER TABLE schedule_events DROP CONSTRAINT schedule_events_kind_check;
ALTER TABLE schedule_events ADD CONSTRAINT schedule_events_kind_check CHECK (kind IN (
    'created', 'updated', 'deleted', 'claimed', 'backlog_skipped', 'offered',
    'released', 'reoffered', 'started', 'settled', 'paused', 'resumed',
    'definition_invalid', 'run_requested', 'owner_changed', 'holidays_changed'));

-- The holiday data versions business-day schedules were recomputed with ("holidays 0.109"):
-- the deploy's migration step records the layer's version, and when it is new it
-- recomputes every active business-day schedule (a holidays_changed event on each).
-- Not tenant data: one row per version.
CREATE TABLE holiday_data_versions (
    data         text PRIMARY KEY CHECK (length(data) BETWEEN 1 AND 100),
    recorded_at  timestamptz NOT NULL
);
