-- Removing an address from the workspace's suppression list. PostgreSQL 15 compatible.
--
-- A workspace admin takes one address off mail_suppressions (a mailbox that was full and
-- is fixed, an address the admin verified) with a reason; the next send to it goes out
-- again. The API's login deletes the suppression and writes the removal record in one
-- statement (timekeeper.reporting.message_states.remove_suppression): who removed it,
-- when, why, and what the suppression was (its reason, the provider message id that
-- caused it, since when). The records are the workspace admins' to read, newest first,
-- like the staff reads (migration 0028); never changed.
CREATE TABLE mail_suppression_removals (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id         uuid NOT NULL REFERENCES workspaces (id),
    address              text NOT NULL CHECK (length(address) BETWEEN 3 AND 320 AND address = lower(address)),
    -- The suppression as it stood.
    suppression_reason   text NOT NULL CHECK (suppression_reason IN ('bounced', 'complained')),
    provider_message_id  text NOT NULL,
    suppressed_at        timestamptz NOT NULL,
    -- The removal.
    removed_by           text NOT NULL CHECK (length(removed_by) BETWEEN 1 AND 200),
    removed_at           timestamptz NOT NULL,
    reason               text NOT NULL CHECK (length(reason) <= 500 AND btrim(reason) <> '')
);
CREATE INDEX mail_suppression_removals_workspace_idx ON mail_suppression_removals (workspace_id, id);
SELECT timekeeper_enable_tenant_rls('mail_suppression_removals');

GRANT SELECT, INSERT ON mail_suppression_removals TO timekeeper_api;
-- Until now the API only read the list (migration 0029); the workers still add to it.
GRANT DELETE ON mail_suppressions TO timekeeper_api;
