-- Every message's fate: the states SES's configuration set publishes for a submitted
-- message (delivery, bounce, complaint, reject, delivery delay), read back by provider
-- message id, and the workspace's suppression list that hard bounces and complaints fill.
--
-- message_events keeps each event once (SNS delivers at least once and in any order):
-- its key is (provider message id, state, the event's own instant), so a duplicate is a
-- no-op. message_states holds a message's state as it stands, by the order rule:
-- the higher rank wins (delivery_delayed 1 < delivered 2 < bounced = rejected 3 <
-- complained 4), and between events of one rank the later event instant; an event that
-- ranks below the recorded one never overwrites it (a late delay report after the
-- delivery, a delivery reported after the complaint it led to).
--
-- run_id is NULL for an owner notice message (the outbox rows of notice e-mails have no
-- run, migration 0027): its states are kept and its bounces and complaints suppress the
-- address all the same.
CREATE TABLE message_events (
    provider_message_id  text NOT NULL CHECK (length(provider_message_id) BETWEEN 1 AND 200),
    state                text NOT NULL CHECK (state IN ('delivery_delayed', 'delivered', 'bounced', 'rejected',
                                                        'complained')),
    event_at             timestamptz NOT NULL,
    workspace_id         uuid NOT NULL,
    run_id               uuid,
    user_id              text NOT NULL,
    -- bounced: Permanent | Transient | Undetermined (SES bounceType) and its subtype;
    -- complained: the feedback type when the mailbox provider gave one; delayed: delayType.
    kind                 text CHECK (length(kind) <= 100),
    subkind              text CHECK (length(subkind) <= 100),
    received_at          timestamptz NOT NULL,
    PRIMARY KEY (provider_message_id, state, event_at)
);
CREATE INDEX message_events_run_idx ON message_events (run_id, user_id);

CREATE TABLE message_states (
    provider_message_id  text PRIMARY KEY CHECK (length(provider_message_id) BETWEEN 1 AND 200),
    workspace_id         uuid NOT NULL,
    run_id               uuid,
    user_id              text NOT NULL,
    state                text NOT NULL CHECK (state IN ('delivery_delayed', 'delivered', 'bounced', 'rejected',
                                                        'complained')),
    rank                 smallint NOT NULL CHECK (rank BETWEEN 1 AND 4),
    event_at             timestamptz NOT NULL,
    kind                 text,
    subkind              text,
    events               integer NOT NULL DEFAULT 1,
    updated_at           timestamptz NOT NULL
);
CREATE INDEX message_states_run_idx ON message_states (run_id, user_id);

-- The consumer finds a message's delivery by the provider's id the outbox recorded.
CREATE INDEX query_delivery_outbox_provider_idx ON query_delivery_outbox (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- Addresses later sends of the workspace skip (reason ``suppressed``): a permanent bounce
-- or a complaint. Kept by the address as SES reported it, compared lower-cased.
CREATE TABLE mail_suppressions (
    workspace_id         uuid NOT NULL,
    address              text NOT NULL CHECK (length(address) BETWEEN 3 AND 320 AND address = lower(address)),
    reason               text NOT NULL CHECK (reason IN ('bounced', 'complained')),
    provider_message_id  text NOT NULL,
    suppressed_at        timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, address)
);

ALTER TABLE query_deliveries DROP CONSTRAINT query_deliveries_skip_reason_check;
ALTER TABLE query_deliveries ADD CONSTRAINT query_deliveries_skip_reason_check
    CHECK (skip_reason IN ('deactivated', 'no_address', 'left_workspace', 'no_access', 'removed', 'suppressed',
                           'unsubscribed'));

SELECT timekeeper_enable_tenant_rls(t) FROM unnest(ARRAY[
    'message_events', 'message_states', 'mail_suppressions'
]::regclass[]) AS t;

-- The API reads the states beside the delivery rows and the suppression list; only the
-- workers write them.
GRANT SELECT ON message_events, message_states, mail_suppressions TO timekeeper_api;
