-- Owners are told. PostgreSQL 15 compatible.
--
-- 1. The person a schedule answers to: schedules.owner_user_id (the creator; a query
--    schedule's owner, whose access its automatic runs use; changed only by an admin's
--    reassignment). Notices go to this person; when they are deactivated or leave the
--    workspace the schedule is paused as `ownerless`.
-- 2. schedule_notifications stays the one outbox of events an owner must hear about,
--    written in the transaction that decides them. `topic`: whether the operators' SNS
--    topic gets it (the pause notices it always got; the new kinds are people's only).
--    `people_at`: when the event was turned into owner_notices rows (the people pass).
--    `event_key`: the event's own identity, which makes a notice idempotent per
--    (event, recipient) whatever delivered the event twice.
-- 3. owner_notices: one in-product notice per (event, recipient), read through the API
--    and e-mailed through the per-recipient outbox (mail_key names the outbox row of the
--    message that carried it: its own, or a digest's).
-- 4. workspaces.notify_admins: whether the workspace's admins get a copy of their
--    schedules' notices (ownerless schedules always reach the admins).
ALTER TABLE schedules ADD COLUMN owner_user_id text CHECK (length(owner_user_id) BETWEEN 1 AND 200);
UPDATE schedules AS s
   SET owner_user_id = COALESCE((SELECT q.owner_user_id FROM query_schedules AS q WHERE q.schedule_id = s.id),
                                s.created_by);
CREATE INDEX schedules_owner_user_idx ON schedules (owner_user_id, workspace_id) WHERE deleted_at IS NULL;

ALTER TABLE schedule_notifications
    ADD COLUMN topic boolean NOT NULL DEFAULT true,
    ADD COLUMN people_at timestamptz,
    ADD COLUMN event_key text,
    ALTER COLUMN schedule_id DROP NOT NULL;
-- Events before this migration were told to the topic only; people start with the next.
UPDATE schedule_notifications SET people_at = created_at;
DROP INDEX schedule_notifications_unsent_idx;
CREATE INDEX schedule_notifications_unsent_idx ON schedule_notifications (owner, id) WHERE sent_at IS NULL AND topic;
CREATE INDEX schedule_notifications_people_idx ON schedule_notifications (id) WHERE people_at IS NULL;

ALTER TABLE workspaces ADD COLUMN notify_admins boolean NOT NULL DEFAULT false;

CREATE TABLE owner_notices (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspaces (id),
    user_id       text NOT NULL REFERENCES users (id),
    event_key     text NOT NULL CHECK (length(event_key) BETWEEN 1 AND 300),
    kind          text NOT NULL CHECK (kind IN ('schedule_paused', 'delivery_skipped_stale', 'posting_failed',
                                                'schedule_ownerless')),
    -- owner: the schedule's owner; admin: a copy to a workspace admin.
    audience      text NOT NULL CHECK (audience IN ('owner', 'admin')),
    schedule_id   uuid REFERENCES schedules (id),
    reason        text,
    detail        jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL,
    read_at       timestamptz,
    mail_key      text,
    mailed_at     timestamptz,
    UNIQUE (event_key, user_id),
    CHECK (mailed_at IS NULL OR mail_key IS NOT NULL)
);
CREATE INDEX owner_notices_person_idx ON owner_notices (workspace_id, user_id, id);
CREATE INDEX owner_notices_unmailed_idx ON owner_notices (workspace_id, user_id, id) WHERE mailed_at IS NULL;
SELECT timekeeper_enable_tenant_rls('owner_notices');

-- The API lists a person's notices and marks them read; only the workers write them.
GRANT SELECT, UPDATE (read_at) ON owner_notices TO timekeeper_api;
