-- "Send me a fresh link": a recipient whose download link expired asks for a new one.
-- PostgreSQL 15 compatible.
--
-- The public download route records the request (the expired link's signature names the
-- run and the recipient; the access rule is asked again first, and a recipient may ask
-- once an hour per delivery and five times a day per workspace). The queries pipeline's
-- people pass sends each request once: a fresh link to the same file, to the address the
-- delivery went to, and records the message (or why none went) on the row, so the
-- delivery's ledger keeps every link it handed out.
CREATE TABLE query_delivery_link_renewals (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id         uuid NOT NULL,
    run_id               uuid NOT NULL REFERENCES schedule_runs (id),
    user_id              text NOT NULL,
    requested_at         timestamptz NOT NULL,
    sent_at              timestamptz,
    provider_message_id  text,
    link_expires_at      timestamptz,
    -- Why nothing was sent: no_address, no_access, schedule_deleted, submission_error.
    error_code           text CHECK (error_code IN ('no_address', 'no_access', 'schedule_deleted',
                                                    'submission_error')),
    CHECK ((sent_at IS NULL) = (provider_message_id IS NULL)),
    CHECK (sent_at IS NULL OR error_code IS NULL)
);
CREATE INDEX query_delivery_link_renewals_person_idx
    ON query_delivery_link_renewals (workspace_id, user_id, requested_at);
CREATE INDEX query_delivery_link_renewals_pending_idx
    ON query_delivery_link_renewals (id) WHERE sent_at IS NULL AND error_code IS NULL;

SELECT timekeeper_enable_tenant_rls('query_delivery_link_renewals');

GRANT SELECT, INSERT ON query_delivery_link_renewals TO timekeeper_api;
