-- An Idempotency-Key belongs to one requester and one request. Every route that takes the
-- header first records (workspace, requester, key) with a fingerprint of the request (a
-- SHA-256 of its method, path and validated body), so a repeat of the same request replays
-- its result and the same key sent with another method, path or body is refused instead of
-- answering the first request's result. Another requester's same key is a different row:
-- keys never cross people. The routes' own rows (exports, renders, manual runs) keep their
-- deduplication; this table only says which request a key names.
CREATE TABLE idempotency_keys (
    workspace_id  uuid NOT NULL,
    requester     text NOT NULL CHECK (length(requester) BETWEEN 1 AND 200),
    key           text NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    fingerprint   text NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    method        text NOT NULL CHECK (length(method) BETWEEN 1 AND 10),
    path          text NOT NULL CHECK (length(path) BETWEEN 1 AND 2000),
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, requester, key)
);

SELECT timekeeper_enable_tenant_rls('idempotency_keys'::regclass);

-- The API records keys and reads them back; it never changes or deletes one.
GRANT SELECT, INSERT ON idempotency_keys TO timekeeper_api;
