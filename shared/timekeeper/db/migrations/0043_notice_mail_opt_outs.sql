-- One-click opt-out (RFC 8058) of owner notice e-mails: a person's opt-out of every
-- notice e-mail of one workspace. PostgreSQL 15 compatible.
--
-- Written by the public opt-out route (the signed link in the notice message is the
-- credential), so the API's login may insert; deleted by the person, signed in, when they
-- turn notice e-mails back on. While the row is there the notice-mail pass marks the
-- person's notices `unsubscribed` (mailed_at set, nothing submitted); the in-product
-- notices are recorded and listed as before.
CREATE TABLE notice_mail_opt_outs (
    workspace_id uuid NOT NULL REFERENCES workspaces (id),
    user_id      text NOT NULL,
    opted_out_at timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, user_id)
);

SELECT timekeeper_enable_tenant_rls('notice_mail_opt_outs');

GRANT SELECT, INSERT, DELETE ON notice_mail_opt_outs TO timekeeper_api;
