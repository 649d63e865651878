-- Saved queries with immutable versions, reports with a current version, their renders,
-- and exports of a query version to a file. PostgreSQL 15 compatible.
--
-- A saved query's definition is structured JSON (entity, columns, filters, sort, limit;
-- timekeeper.reporting.definition) compiled to parameterized SQL from a catalogue; no
-- user-written SQL is ever stored. Editing a query appends a version and moves
-- current_version; a version row is never updated (old versions stay readable and
-- runnable). A report's sections name saved queries; editing a report appends a version too.

CREATE TABLE saved_queries (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id     uuid NOT NULL REFERENCES workspaces (id),
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    description      text NOT NULL DEFAULT '',
    current_version  integer NOT NULL CHECK (current_version >= 1),
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    deleted_at       timestamptz,              -- kept for audit and for pinned versions
    UNIQUE (workspace_id, id)
);
CREATE INDEX saved_queries_listing_idx ON saved_queries (workspace_id, created_at, id) WHERE deleted_at IS NULL;

CREATE TABLE saved_query_versions (
    workspace_id  uuid NOT NULL,
    query_id      uuid NOT NULL,
    version       integer NOT NULL CHECK (version >= 1),
    definition    jsonb NOT NULL,
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (query_id, version),
    FOREIGN KEY (workspace_id, query_id) REFERENCES saved_queries (workspace_id, id)
);

CREATE TABLE reports (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id     uuid NOT NULL REFERENCES workspaces (id),
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    current_version  integer NOT NULL CHECK (current_version >= 1),
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    deleted_at       timestamptz,
    UNIQUE (workspace_id, id)
);
CREATE INDEX reports_listing_idx ON reports (workspace_id, created_at, id) WHERE deleted_at IS NULL;

-- definition: {"title": ..., "sections": [{"heading", "query_id", "query_version" | null,
-- "display": "table" | "bar_chart" | "line_chart", ...}]} (timekeeper.reporting.reports).
CREATE TABLE report_versions (
    workspace_id  uuid NOT NULL,
    report_id     uuid NOT NULL,
    version       integer NOT NULL CHECK (version >= 1),
    definition    jsonb NOT NULL,
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (report_id, version),
    FOREIGN KEY (workspace_id, report_id) REFERENCES reports (workspace_id, id)
);

-- One render of a report version to a PDF, keyed by its caller's idempotency key (a
-- delivery run's id, an interactive request's key): a render repeated with the same key
-- finds this row and writes its object once. object_key is derived from the key.
CREATE TABLE report_renders (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id     uuid NOT NULL,
    idempotency_key  text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    report_id        uuid NOT NULL,
    report_version   integer NOT NULL,
    requested_by     text NOT NULL,
    state            text NOT NULL DEFAULT 'requested'
                     CHECK (state IN ('requested', 'rendering', 'succeeded', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    object_key       text,
    byte_size        bigint,
    sha256           text,
    page_count       integer,
    error_code       text,
    error_message    text,
    requested_at     timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    CHECK (state <> 'succeeded' OR (object_key IS NOT NULL AND sha256 IS NOT NULL)),
    UNIQUE (workspace_id, id),
    UNIQUE (workspace_id, idempotency_key),
    FOREIGN KEY (report_id, report_version) REFERENCES report_versions (report_id, version)
);

-- An export of one saved query version to a file in the files bucket. The object key is
-- derived from the export's id, so a retry after a crash overwrites nothing else and a
-- complete earlier file is reused. idempotency_key (the Idempotency-Key header) makes a
-- repeated request return the same export.
CREATE TABLE exports (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id     uuid NOT NULL,
    query_id         uuid NOT NULL,
    query_version    integer NOT NULL,
    format           text NOT NULL CHECK (format IN ('csv', 'xlsx')),
    requested_by     text NOT NULL,
    idempotency_key  text CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 200),
    state            text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'succeeded', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    object_key       text,
    row_count        bigint,
    byte_size        bigint,
    sha256           text,
    error_code       text,
    error_message    text,
    created_at       timestamptz NOT NULL,
    published_at     timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    CHECK (state <> 'succeeded' OR (object_key IS NOT NULL AND sha256 IS NOT NULL AND row_count IS NOT NULL)),
    CHECK (state <> 'failed' OR error_code IS NOT NULL),
    UNIQUE (workspace_id, id),
    FOREIGN KEY (query_id, query_version) REFERENCES saved_query_versions (query_id, version)
);
CREATE UNIQUE INDEX exports_idempotency_idx ON exports (workspace_id, requested_by, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX exports_unpublished_idx ON exports (created_at) WHERE state = 'queued' AND published_at IS NULL;

SELECT timekeeper_enable_tenant_rls(t) FROM unnest(ARRAY[
    'saved_queries', 'saved_query_versions', 'reports', 'report_versions', 'report_renders', 'exports'
]::regclass[]) AS t;

-- The API writes definitions and requests exports and renders; it never deletes a row
-- (a deleted query or report is marked, its versions stay for pinned schedules and audit).
GRANT SELECT, INSERT, UPDATE ON saved_queries, reports, exports, report_renders TO timekeeper_api;
GRANT SELECT, INSERT ON saved_query_versions, report_versions TO timekeeper_api;
