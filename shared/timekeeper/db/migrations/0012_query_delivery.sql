-- Scheduled delivery of a saved query (CSV/XLSX) or a report (PDF) to workspace users.
--
-- A query schedule is a `schedules` row of owner `queries` (work kind `queries.deliver`)
-- plus its delivery settings here (1:1). Each run records the file it delivered
-- (query_delivery_sources), one outcome per recipient (query_deliveries) and, for every
-- message it submitted, an outbox row keyed by the communication key (run, recipient):
-- a retry or a duplicate delivery of the run's message claims the same key and never
-- submits a recorded message twice.

CREATE TABLE query_schedules (
    schedule_id       uuid PRIMARY KEY REFERENCES schedules (id),
    workspace_id      uuid NOT NULL,
    -- The person the schedule acts for on automatic runs (its owner); Run now acts for
    -- the person who clicked.
    owner_user_id     text NOT NULL CHECK (length(owner_user_id) BETWEEN 1 AND 200),
    source_kind       text NOT NULL CHECK (source_kind IN ('query', 'report')),
    query_id          uuid,
    query_version     integer,
    report_id         uuid REFERENCES reports (id),
    format            text NOT NULL CHECK (format IN ('csv', 'xlsx', 'pdf')),
    skip_when_empty   boolean NOT NULL DEFAULT false,
    subject_template  text NOT NULL CHECK (length(subject_template) BETWEEN 1 AND 500),
    body_template     text NOT NULL CHECK (length(body_template) BETWEEN 1 AND 20000),
    link_ttl_hours    integer NOT NULL DEFAULT 168 CHECK (link_ttl_hours BETWEEN 1 AND 720),
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    CHECK ((source_kind = 'query' AND query_id IS NOT NULL AND query_version IS NOT NULL AND report_id IS NULL
            AND format IN ('csv', 'xlsx'))
        OR (source_kind = 'report' AND report_id IS NOT NULL AND query_id IS NULL AND query_version IS NULL
            AND format = 'pdf')),
    FOREIGN KEY (query_id, query_version) REFERENCES saved_query_versions (query_id, version),
    UNIQUE (workspace_id, schedule_id)
);

CREATE TABLE query_schedule_recipients (
    workspace_id  uuid NOT NULL,
    schedule_id   uuid NOT NULL REFERENCES query_schedules (schedule_id),
    user_id       text NOT NULL REFERENCES users (id),
    added_at      timestamptz NOT NULL,
    PRIMARY KEY (schedule_id, user_id)
);

-- What one run delivered: the file (a query's streamed to S3 under a key derived from the
-- run id; a report's rendered with the run id as its idempotency key). Recorded once the
-- file is complete, so a retry of the run reuses it.
CREATE TABLE query_delivery_sources (
    run_id           uuid PRIMARY KEY REFERENCES schedule_runs (id),
    workspace_id     uuid NOT NULL,
    schedule_id      uuid NOT NULL,
    source_kind      text NOT NULL CHECK (source_kind IN ('query', 'report')),
    format           text NOT NULL,
    object_key       text NOT NULL,
    byte_size        bigint NOT NULL,
    sha256           text NOT NULL,
    row_count        bigint,
    query_id         uuid,
    query_version    integer,
    report_id        uuid,
    report_version   integer,
    render_id        uuid,
    -- A report: whether the version rendered differs from the schedule's previous run's.
    version_changed  boolean NOT NULL DEFAULT false,
    acted_for        text NOT NULL,
    created_at       timestamptz NOT NULL
);
CREATE INDEX query_delivery_sources_schedule_idx ON query_delivery_sources (schedule_id, created_at);

-- One outcome per (run, recipient).
CREATE TABLE query_deliveries (
    run_id               uuid NOT NULL REFERENCES schedule_runs (id),
    user_id              text NOT NULL,
    workspace_id         uuid NOT NULL,
    schedule_id          uuid NOT NULL,
    status               text NOT NULL CHECK (status IN ('sent', 'skipped', 'failed')),
    skip_reason          text CHECK (skip_reason IN ('deactivated', 'no_address', 'left_workspace', 'no_access')),
    address              text,
    provider_message_id  text,
    link_expires_at      timestamptz,
    error                text,
    attempt              integer NOT NULL,
    updated_at           timestamptz NOT NULL,
    PRIMARY KEY (run_id, user_id),
    CHECK ((status = 'skipped') = (skip_reason IS NOT NULL)),
    CHECK (status <> 'sent' OR provider_message_id IS NOT NULL)
);
CREATE INDEX query_deliveries_schedule_idx ON query_deliveries (schedule_id, run_id);

-- The communications outbox: claimed (INSERT ... ON CONFLICT DO NOTHING) before the
-- message is submitted, the provider's message id recorded after. A recorded submission
-- is never submitted again.
CREATE TABLE query_delivery_outbox (
    communication_key    text PRIMARY KEY,
    run_id               uuid NOT NULL REFERENCES schedule_runs (id),
    user_id              text NOT NULL,
    workspace_id         uuid NOT NULL,
    claimed_attempt      integer NOT NULL,
    claimed_at           timestamptz NOT NULL,
    submissions          integer NOT NULL DEFAULT 0,
    provider_message_id  text,
    sent_at              timestamptz,
    last_error           text,
    UNIQUE (run_id, user_id)
);

SELECT timekeeper_enable_tenant_rls(t) FROM unnest(ARRAY[
    'query_schedules', 'query_schedule_recipients', 'query_delivery_sources', 'query_deliveries',
    'query_delivery_outbox'
]::regclass[]) AS t;

-- The API creates and changes query schedules and their recipient lists, and reads the
-- delivery history (the download route reads a delivery and its source). It never
-- writes what a run delivered.
GRANT SELECT, INSERT, UPDATE ON query_schedules TO timekeeper_api;
GRANT SELECT, INSERT, DELETE ON query_schedule_recipients TO timekeeper_api;
GRANT SELECT ON query_delivery_sources, query_deliveries TO timekeeper_api;
