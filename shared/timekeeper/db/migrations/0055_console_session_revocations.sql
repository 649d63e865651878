-- Console sign-out on the server: the console sessions signed out before they expired.
-- PostgreSQL 15 compatible.
--
-- A console session is a signed cookie holding a random session id (eight hours). A
-- sign-out records the id here, so that a copy of the cookie is refused by every execution
-- environment of the API function, not only by the browser that dropped it. A row is kept
-- until its session would have expired (expires_at) and deleted by later sign-outs of the
-- workspace after that; it names no person.
CREATE TABLE console_session_revocations (
    workspace_id uuid NOT NULL,
    session_id   text NOT NULL CHECK (length(session_id) BETWEEN 1 AND 200),
    revoked_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, session_id)
);

SELECT timekeeper_enable_tenant_rls('console_session_revocations');

GRANT SELECT, INSERT, DELETE ON console_session_revocations TO timekeeper_api;
