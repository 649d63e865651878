-- Message states from the SES configuration set's events, and the suppression list
-- (timekeeper.reporting.message_states).

-- name: find_message
-- The delivery a provider message id belongs to (the outbox recorded the id SES answered).
SELECT run_id, user_id, workspace_id FROM query_delivery_outbox WHERE provider_message_id = %(id)s

-- name: record_event
-- One statement: the event kept once (a duplicate changes nothing), the message's state
-- moved only by the order rule (higher rank; within a rank, the later event instant).
-- Returns whether the event was new.
WITH event AS (
    INSERT INTO message_events (provider_message_id, state, event_at, workspace_id, run_id, user_id, kind, subkind,
                                received_at)
    VALUES (%(id)s, %(state)s, %(event_at)s, %(workspace_id)s, %(run_id)s, %(user_id)s, %(kind)s, %(subkind)s,
            %(now)s)
    ON CONFLICT (provider_message_id, state, event_at) DO NOTHING
    RETURNING 1),
state AS (
    INSERT INTO message_states (provider_message_id, workspace_id, run_id, user_id, state, rank, event_at, kind,
                                subkind, updated_at)
    SELECT %(id)s, %(workspace_id)s, %(run_id)s, %(user_id)s, %(state)s, %(rank)s, %(event_at)s, %(kind)s,
           %(subkind)s, %(now)s
     WHERE EXISTS (SELECT FROM event)
    ON CONFLICT (provider_message_id) DO UPDATE SET
           state = CASE WHEN (EXCLUDED.rank, EXCLUDED.event_at) > (message_states.rank, message_states.event_at)
                        THEN EXCLUDED.state ELSE message_states.state END,
           kind = CASE WHEN (EXCLUDED.rank, EXCLUDED.event_at) > (message_states.rank, message_states.event_at)
                       THEN EXCLUDED.kind ELSE message_states.kind END,
           subkind = CASE WHEN (EXCLUDED.rank, EXCLUDED.event_at) > (message_states.rank, message_states.event_at)
                          THEN EXCLUDED.subkind ELSE message_states.subkind END,
           event_at = CASE WHEN (EXCLUDED.rank, EXCLUDED.event_at) > (message_states.rank, message_states.event_at)
                           THEN EXCLUDED.event_at ELSE message_states.event_at END,
           rank = GREATEST(EXCLUDED.rank, message_states.rank),
           events = message_states.events + 1, updated_at = EXCLUDED.updated_at
    RETURNING 1)
SELECT EXISTS (SELECT FROM event) AS new

-- name: suppress
-- A permanent bounce or a complaint: the addresses go on the workspace's list (the first
-- reason kept).
INSERT INTO mail_suppressions (workspace_id, address, reason, provider_message_id, suppressed_at)
SELECT %(workspace_id)s, lower(a), %(reason)s, %(id)s, %(now)s FROM unnest(%(addresses)s::text[]) AS a
ON CONFLICT (workspace_id, address) DO NOTHING

-- name: suppressed_among
SELECT address FROM mail_suppressions WHERE workspace_id = %s AND address = ANY(%s)

-- name: list_suppressions
SELECT workspace_id, address, reason, provider_message_id, suppressed_at FROM mail_suppressions
 WHERE workspace_id = %s ORDER BY suppressed_at, address

-- name: states_of_run
SELECT provider_message_id, run_id, user_id, state, event_at, kind, subkind, events
  FROM message_states WHERE workspace_id = %s AND run_id = %s

-- name: events_of_run
SELECT provider_message_id, run_id, user_id, state, event_at, kind, subkind
  FROM message_events WHERE workspace_id = %s AND run_id = %s ORDER BY user_id, event_at, state

-- name: remove_suppression
-- One statement: the address comes off the workspace's list and the removal is recorded
-- with the suppression as it stood. No row (not on the list, or removed a moment ago by a
-- concurrent request, which this one waited for): nothing recorded.
WITH removed AS (
    DELETE FROM mail_suppressions WHERE workspace_id = %(workspace_id)s AND address = lower(%(address)s)
    RETURNING workspace_id, address, reason, provider_message_id, suppressed_at)
INSERT INTO mail_suppression_removals (workspace_id, address, suppression_reason, provider_message_id,
                                       suppressed_at, removed_by, removed_at, reason)
SELECT workspace_id, address, reason, provider_message_id, suppressed_at, %(actor)s, %(now)s, %(reason)s
  FROM removed
RETURNING id, workspace_id, address, suppression_reason, provider_message_id, suppressed_at, removed_by,
          removed_at, reason

-- name: removal_addresses
-- The addresses of the workspace's removal records among the ids (an erased one is gone).
SELECT id, address FROM mail_suppression_removals WHERE workspace_id = %(workspace_id)s AND id = ANY(%(ids)s)

-- name: list_suppression_removals
SELECT id, workspace_id, address, suppression_reason, provider_message_id, suppressed_at, removed_by, removed_at,
       reason
  FROM mail_suppression_removals
 WHERE workspace_id = %(workspace_id)s AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
 ORDER BY id DESC
 LIMIT %(limit)s
