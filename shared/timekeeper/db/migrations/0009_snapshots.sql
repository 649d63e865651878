-- Monthly snapshots: the ledger of snapshot runs and the versioned rows they generate.
-- PostgreSQL 15 compatible.
--
-- One row of snapshot_runs per (owner, type, workspace, period, version). A period is a
-- workspace-local calendar month, stored as its first day. The planner inserts version 1
-- of each completed month under the unique key (two planners insert one row); staff
-- requests add later versions (manual re-runs) or earlier months (backfills).
--
-- States: planned (waiting for admission) -> queued (admitted; its attempt's job was sent)
-- -> running (the job started) -> published | failed, with retry_wait (a retryable failure,
-- waiting for retry_due_at) looping back to queued; skipped (the workspace was loading or
-- its policy flag is off: the row keeps the skip reason) is terminal like published and
-- failed.
--
-- Two unique partial indexes are the concurrency rules: at most one ACTIVE run per period
-- (planned, queued, running, retry_wait) and at most one CURRENT (published, is_current)
-- version per period. Publishing flips is_current from the previous version to the new one
-- in one transaction, so readers always see exactly one current version (or none yet).

CREATE TABLE snapshot_runs (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner                text NOT NULL,
    snapshot_type        text NOT NULL,
    workspace_id         uuid NOT NULL REFERENCES workspaces (id),
    period               date NOT NULL CHECK (extract(day FROM period) = 1),
    version              integer NOT NULL CHECK (version >= 1),
    mode                 text NOT NULL CHECK (mode IN ('planned', 'manual', 'backfill')),
    reason               text,
    requested_by         text,
    state                text NOT NULL CHECK (state IN ('planned', 'queued', 'running', 'retry_wait', 'published',
                                                        'failed', 'skipped')),
    skip_reason          text,
    -- Chosen by the first start and kept by every later attempt (e.g. 'single' or 'chunked').
    generation_mode      text,
    -- Where the next chunk starts (type-specific JSON); NULL before the first chunk.
    cursor               jsonb,
    chunks_committed     integer NOT NULL DEFAULT 0,
    rows_written         bigint NOT NULL DEFAULT 0,
    attempts             integer NOT NULL DEFAULT 0,
    retryable_failures   integer NOT NULL DEFAULT 0,
    retry_due_at         timestamptz,
    -- The current attempt's job: messages naming another job are stale and dropped.
    job_id               uuid,
    offered_at           timestamptz,
    started_at           timestamptz,
    heartbeat_at         timestamptz,
    -- What the published rows were computed from and checked against (type-specific JSON).
    basis                jsonb,
    published_at         timestamptz,
    is_current           boolean NOT NULL DEFAULT false,
    -- Protected history: a captured (read into a delivered report) or finalized version.
    protection           text CHECK (protection IS NULL OR protection IN ('captured', 'finalized')),
    failure_code         text,
    failure_message      text,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    CHECK ((state = 'skipped') = (skip_reason IS NOT NULL)),
    CHECK (NOT is_current OR state = 'published'),
    CHECK (mode = 'planned' OR (reason IS NOT NULL AND requested_by IS NOT NULL)),
    UNIQUE (workspace_id, id),
    CONSTRAINT snapshot_runs_version_key UNIQUE (owner, snapshot_type, workspace_id, period, version)
);
CREATE UNIQUE INDEX snapshot_runs_one_active ON snapshot_runs (owner, snapshot_type, workspace_id, period)
    WHERE state IN ('planned', 'queued', 'running', 'retry_wait');
CREATE UNIQUE INDEX snapshot_runs_one_current ON snapshot_runs (owner, snapshot_type, workspace_id, period)
    WHERE is_current;
-- Admission reads the waiting runs of an owner oldest first, and the running ones.
CREATE INDEX snapshot_runs_waiting ON snapshot_runs (owner, created_at)
    WHERE state IN ('planned', 'retry_wait');
CREATE INDEX snapshot_runs_in_flight ON snapshot_runs (owner, offered_at) WHERE state IN ('queued', 'running');

-- Generated rows of the Platform types, keyed by the run that produced them (a version).
-- A published run's rows are never changed; an unpublished run's rows are replaced only
-- by that run's own resumed chunks (each chunk deletes nothing: it starts at the cursor).

-- Month-end membership counts by status and membership type.
CREATE TABLE snapshot_membership_counts (
    run_id            uuid NOT NULL,
    workspace_id      uuid NOT NULL,
    membership_type   text NOT NULL,
    status            text NOT NULL,
    members           integer NOT NULL CHECK (members >= 0),
    PRIMARY KEY (run_id, membership_type, status),
    FOREIGN KEY (workspace_id, run_id) REFERENCES snapshot_runs (workspace_id, id)
);

-- Accounts-receivable aging at month end: one row per invoice outstanding then.
CREATE TABLE snapshot_ar_aging (
    run_id             uuid NOT NULL,
    workspace_id       uuid NOT NULL,
    invoice_id         uuid NOT NULL,
    member_id          uuid NOT NULL,
    due_date           date NOT NULL,
    days_past_due      integer NOT NULL,
    bucket             text NOT NULL CHECK (bucket IN ('0-30', '31-60', '61-90', 'over_90')),
    outstanding_minor  bigint NOT NULL CHECK (outstanding_minor > 0),
    currency           char(3) NOT NULL,
    PRIMARY KEY (run_id, invoice_id),
    FOREIGN KEY (workspace_id, run_id) REFERENCES snapshot_runs (workspace_id, id)
);

-- The platform self-test type's rows (a synthetic sequence, in chunks).
CREATE TABLE snapshot_selftest_rows (
    run_id        uuid NOT NULL,
    workspace_id  uuid NOT NULL,
    n             integer NOT NULL,
    PRIMARY KEY (run_id, n),
    FOREIGN KEY (workspace_id, run_id) REFERENCES snapshot_runs (workspace_id, id)
);

SELECT timekeeper_enable_tenant_rls(t) FROM unnest(ARRAY[
    'snapshot_runs', 'snapshot_membership_counts', 'snapshot_ar_aging', 'snapshot_selftest_rows'
]::regclass[]) AS t;

-- The API lists periods and records staff requests; generation is the workers'.
GRANT SELECT, INSERT ON snapshot_runs TO timekeeper_api;
GRANT SELECT ON snapshot_membership_counts, snapshot_ar_aging, snapshot_selftest_rows TO timekeeper_api;
