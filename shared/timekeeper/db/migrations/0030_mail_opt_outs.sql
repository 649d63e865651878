-- One-click opt-out (RFC 8058): a recipient's opt-out of one query schedule's messages.
--
-- Written by the public opt-out route (the signed link in the message is the credential),
-- so the API's login may insert; later runs skip the recipient with reason
-- ``unsubscribed`` while the row is there. Re-subscribing takes two steps: the schedule's
-- owner invites (resubscribe_invited_at), and the recipient, signed in, accepts; only then
-- is the row deleted. Neither alone sends the recipient mail again.
CREATE TABLE mail_opt_outs (
    workspace_id           uuid NOT NULL,
    schedule_id            uuid NOT NULL,
    user_id                text NOT NULL,
    -- The message the link came from.
    run_id                 uuid NOT NULL,
    opted_out_at           timestamptz NOT NULL,
    resubscribe_invited_at timestamptz,
    resubscribe_invited_by text,
    PRIMARY KEY (schedule_id, user_id)
);
CREATE INDEX mail_opt_outs_workspace_idx ON mail_opt_outs (workspace_id, schedule_id);

SELECT timekeeper_enable_tenant_rls('mail_opt_outs');

GRANT SELECT, INSERT, UPDATE, DELETE ON mail_opt_outs TO timekeeper_api;
