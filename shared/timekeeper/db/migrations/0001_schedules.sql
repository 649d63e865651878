-- Scheduling library tables: schedules, their runs, history and owner notices. PostgreSQL 15 compatible.

CREATE TABLE schedules (
    id                    uuid PRIMARY KEY,
    workspace_id          uuid NOT NULL,
    owner                 text NOT NULL,
    work_kind             text NOT NULL,
    subject_id            uuid,
    name                  text NOT NULL DEFAULT '',
    recurrence            jsonb NOT NULL,
    timezone              text NOT NULL,
    status                text NOT NULL CHECK (status IN ('active', 'paused', 'disabled')),
    pause_reason          text,
    next_due_at           timestamptz,
    consecutive_failures  integer NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    last_run_id           uuid,
    last_outcome          text,
    last_run_at           timestamptz,
    definition_version    integer NOT NULL DEFAULT 1,
    created_by            text,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    deleted_at            timestamptz,
    CHECK (status = 'active' OR next_due_at IS NULL),
    CHECK (deleted_at IS NULL OR status = 'disabled')
);

-- The dispatcher's claim reads this index only (never the whole table).
CREATE INDEX schedules_claim_idx ON schedules (owner, next_due_at) WHERE status = 'active';
CREATE INDEX schedules_workspace_idx ON schedules (workspace_id, owner, created_at);

CREATE TABLE schedule_runs (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    schedule_id        uuid NOT NULL REFERENCES schedules (id),
    workspace_id       uuid NOT NULL,
    owner              text NOT NULL,
    work_kind          text NOT NULL,
    -- The schedule-occurrence key of the seeds: the UTC instant for scheduled runs,
    -- 'manual:<key>' for Run now.
    occurrence_key     text NOT NULL,
    occurrence_at      timestamptz NOT NULL,
    occurrence_local   timestamp NOT NULL,
    dst_shifted        boolean NOT NULL DEFAULT false,
    trigger            text NOT NULL CHECK (trigger IN ('scheduled', 'manual')),
    requested_by       text,
    definition_version integer NOT NULL,
    state              text NOT NULL DEFAULT 'queued'
                       CHECK (state IN ('queued', 'running', 'succeeded', 'skipped', 'failed')),
    queued_at          timestamptz NOT NULL,
    offered_at         timestamptz,
    offer_count        integer NOT NULL DEFAULT 0,
    released_at        timestamptz,
    attempts           integer NOT NULL DEFAULT 0,
    lease_until        timestamptz,
    started_at         timestamptz,
    finished_at        timestamptz,
    outcome_code       text,
    detail             jsonb,
    error              text,
    skipped_backlog    integer NOT NULL DEFAULT 0,
    first_skipped_at   timestamptz,
    CONSTRAINT schedule_runs_occurrence_key UNIQUE (schedule_id, occurrence_key),
    CHECK ((state IN ('succeeded', 'skipped', 'failed')) = (finished_at IS NOT NULL))
);

-- Released and stranded runs are found through this small partial index.
CREATE INDEX schedule_runs_offer_idx ON schedule_runs (owner, offered_at NULLS FIRST)
    WHERE state = 'queued';
CREATE INDEX schedule_runs_schedule_idx ON schedule_runs (schedule_id, queued_at DESC);

CREATE TABLE schedule_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id   uuid NOT NULL REFERENCES schedules (id),
    workspace_id  uuid NOT NULL,
    run_id        uuid,
    kind          text NOT NULL CHECK (kind IN (
                      'created', 'updated', 'deleted', 'claimed', 'backlog_skipped', 'offered',
                      'released', 'reoffered', 'started', 'settled', 'paused', 'resumed',
                      'definition_invalid', 'run_requested')),
    actor         text NOT NULL,
    reason        text,
    detail        jsonb,
    at            timestamptz NOT NULL
);
CREATE INDEX schedule_events_schedule_idx ON schedule_events (schedule_id, id);

-- Outbox of owner notifications (pause notices): written in the settling transaction,
-- published after commit, retried by later passes until sent.
CREATE TABLE schedule_notifications (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id   uuid NOT NULL REFERENCES schedules (id),
    workspace_id  uuid NOT NULL,
    owner         text NOT NULL,
    kind          text NOT NULL,
    payload       jsonb NOT NULL,
    created_at    timestamptz NOT NULL,
    sent_at       timestamptz,
    attempts      integer NOT NULL DEFAULT 0
);
CREATE INDEX schedule_notifications_unsent_idx ON schedule_notifications (owner, id) WHERE sent_at IS NULL;

-- Abandoned starts (running, lease long expired) are found through this one.
CREATE INDEX schedule_runs_lease_idx ON schedule_runs (owner, lease_until) WHERE state = 'running';
