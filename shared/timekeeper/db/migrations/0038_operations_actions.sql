-- What staff did through the operations routes: a dead-letter redrive (no workspace: a
-- queue serves every workspace) or a staff resume (its workspace's schedule history has the
-- event too). Written and read by the API's login after the staff role check; never
-- changed or deleted by it. Not tenant data: a queue has no workspace, so the table has no
-- workspace policy (the API writes a row only from a staff route). PostgreSQL 15 compatible.
CREATE TABLE operations_actions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action        text NOT NULL CHECK (action IN ('redrive', 'resume')),
    actor         text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    target        text NOT NULL CHECK (length(target) BETWEEN 1 AND 200),
    reason        text NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    detail        jsonb NOT NULL DEFAULT '{}',
    at            timestamptz NOT NULL
);
CREATE INDEX operations_actions_at_idx ON operations_actions (at DESC, id DESC);

GRANT SELECT, INSERT ON operations_actions TO timekeeper_api;
