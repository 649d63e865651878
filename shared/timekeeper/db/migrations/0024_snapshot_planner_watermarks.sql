-- The snapshot planner's watermark. PostgreSQL 15 compatible.
--
-- Per (workspace, owner, type): the months [planned_from, planned_through] of which EVERY
-- month has a ledger row (a planned run, a skip row, a staff backfill or re-run). A planner
-- pass probes snapshot_runs only for the expected months (its horizon, since the workspace
-- existed) outside that range, so a pass with nothing new reads the workspaces and this
-- table alone, whatever the history holds. A pass widens the range to its window only when
-- every month of the window then has a row; a month still without one (a concurrent
-- planner's uncommitted insert) leaves the range as it was, so it never covers a missing
-- month and the next pass probes that month again.
--
-- [settled_from, settled_through] is the same for settled months (a current version or a
-- skip row: once settled, a month stays settled), which the overdue count skips. NULL
-- until a pass finds every month of its window settled.
CREATE TABLE snapshot_planner_watermarks (
    workspace_id    uuid NOT NULL REFERENCES workspaces (id),
    owner           text NOT NULL,
    snapshot_type   text NOT NULL,
    planned_from    date NOT NULL CHECK (extract(day FROM planned_from) = 1),
    planned_through date NOT NULL CHECK (extract(day FROM planned_through) = 1),
    settled_from    date CHECK (extract(day FROM settled_from) = 1),
    settled_through date CHECK (extract(day FROM settled_through) = 1),
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, owner, snapshot_type),
    CHECK (planned_from <= planned_through),
    CHECK ((settled_from IS NULL) = (settled_through IS NULL) AND settled_from <= settled_through)
);
SELECT timekeeper_enable_tenant_rls('snapshot_planner_watermarks');
