-- Scheduled delivery: each attempt's outcome per recipient. query_deliveries holds a
-- recipient's outcome as it stands (a retry that sends replaces the first attempt's
-- failure); this table keeps every submission of every attempt: one row per (run,
-- recipient, attempt), written in the same statement that records the submission, with
-- the provider's message id (sent) or the error code (failed; the codes of
-- query_deliveries.error_code, never the provider's text).
CREATE TABLE query_delivery_attempts (
    run_id               uuid NOT NULL REFERENCES schedule_runs (id),
    user_id              text NOT NULL,
    attempt              integer NOT NULL CHECK (attempt >= 1),
    workspace_id         uuid NOT NULL,
    status               text NOT NULL CHECK (status IN ('sent', 'failed')),
    error_code           text CHECK (error_code IN ('rejected', 'invalid_address', 'throttled', 'provider_error',
                                                    'submission_error')),
    provider_message_id  text,
    at                   timestamptz NOT NULL,
    PRIMARY KEY (run_id, user_id, attempt),
    CHECK ((status = 'sent') = (provider_message_id IS NOT NULL)),
    CHECK ((status = 'failed') = (error_code IS NOT NULL))
);

SELECT timekeeper_enable_tenant_rls('query_delivery_attempts');

-- The API reads the delivery history; only the workers write it.
GRANT SELECT ON query_delivery_attempts TO timekeeper_api;
