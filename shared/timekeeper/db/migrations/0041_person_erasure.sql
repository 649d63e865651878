-- Erasing a person: staff remove what Timekeeper holds of one platform user, in every
-- workspace, at the person's request. PostgreSQL 15 compatible.
--
-- * person_erasures: one row per erased person, keyed by the SHA-256 digest of the user id
--   (hex), never the id: its erased_at is the instant of the latest erasure. A delivery
--   attempt of a run queued before that instant, still sending when the erasure committed,
--   writes its recipient row without the address (delivery_journal.sql's record_sent and
--   record_failed read this table), so no address comes back after the erasure.
-- * timekeeper_erase_person: in one transaction, in every workspace, take the person off
--   every query schedule's recipient list (an `updated` history event per schedule, reason
--   person_erased, with the list before and after), delete their opt-outs, remove every
--   suppression-list entry of an address they were sent at or of a message of theirs that
--   bounced or complained, and erase the address of every delivery row of theirs (the row
--   stays with its outcome: counts and reports still add up). Repeating it changes nothing
--   but the erasure's instant. It runs as the migration's owner (the API's login cannot see
--   other workspaces' rows); the API calls it from the staff route only.
-- * the operations actions gain `erase` (target: the digest, prefixed sha256:).
CREATE TABLE person_erasures (
    user_digest  text PRIMARY KEY CHECK (user_digest ~ '^[0-9a-f]{64}$'),
    erased_at    timestamptz NOT NULL
);
GRANT SELECT ON person_erasures TO timekeeper_api;

-- The person's rows, found without reading the tables whole.
CREATE INDEX query_deliveries_user_address_idx ON query_deliveries (user_id) WHERE address IS NOT NULL;
CREATE INDEX query_schedule_recipients_user_idx ON query_schedule_recipients (user_id);
CREATE INDEX mail_opt_outs_user_idx ON mail_opt_outs (user_id);

ALTER TABLE operations_actions DROP CONSTRAINT operations_actions_action_check;
ALTER TABLE operations_actions ADD CONSTRAINT operations_actions_action_check
    CHECK (action IN ('redrive', 'resume', 'erase'));

CREATE FUNCTION timekeeper_erase_person(p_user_id text, p_actor text, p_now timestamptz)
RETURNS TABLE (user_digest text, recipient_lists integer, opt_outs integer, delivery_addresses integer,
               suppressions integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_digest text := encode(sha256(convert_to(p_user_id, 'UTF8')), 'hex');
    v_lists integer;
    v_opt_outs integer;
    v_addresses integer;
    v_suppressions integer;
BEGIN
    INSERT INTO person_erasures (user_digest, erased_at) VALUES (v_digest, p_now)
        ON CONFLICT ON CONSTRAINT person_erasures_pkey DO UPDATE SET erased_at = EXCLUDED.erased_at;

    -- Suppressions first: the delivery rows still name the addresses the person was sent at.
    WITH addresses AS (
        SELECT DISTINCT d.workspace_id, lower(d.address) AS address
          FROM query_deliveries d
         WHERE d.user_id = p_user_id AND d.address IS NOT NULL),
    gone AS (
        DELETE FROM mail_suppressions s
         WHERE EXISTS (SELECT 1 FROM addresses a WHERE a.workspace_id = s.workspace_id AND a.address = s.address)
            OR EXISTS (SELECT 1 FROM message_events e
                        WHERE e.provider_message_id = s.provider_message_id AND e.user_id = p_user_id)
        RETURNING 1)
    SELECT count(*) INTO v_suppressions FROM gone;

    WITH removed AS (
        DELETE FROM query_schedule_recipients r WHERE r.user_id = p_user_id
        RETURNING r.workspace_id, r.schedule_id),
    events AS (
        INSERT INTO schedule_events (schedule_id, workspace_id, run_id, kind, actor, reason, detail, at)
        SELECT m.schedule_id, m.workspace_id, NULL, 'updated', p_actor, 'person_erased',
               jsonb_build_object('changes', jsonb_build_object('recipients', jsonb_build_object(
                   -- (the statement's snapshot: the list as it was before the removal)
                   'from', (SELECT to_jsonb(array_agg(q.user_id ORDER BY q.user_id))
                              FROM query_schedule_recipients q WHERE q.schedule_id = m.schedule_id),
                   'to', coalesce((SELECT to_jsonb(array_agg(q.user_id ORDER BY q.user_id))
                                     FROM query_schedule_recipients q
                                    WHERE q.schedule_id = m.schedule_id AND q.user_id <> p_user_id),
                                  '[]'::jsonb)))),
               p_now
          FROM removed m
        RETURNING 1)
    SELECT count(*) INTO v_lists FROM events;

    WITH gone AS (DELETE FROM mail_opt_outs o WHERE o.user_id = p_user_id RETURNING 1)
    SELECT count(*) INTO v_opt_outs FROM gone;

    WITH erased AS (
        UPDATE query_deliveries d SET address = NULL, address_erased_at = p_now
         WHERE d.user_id = p_user_id AND d.address IS NOT NULL
        RETURNING 1)
    SELECT count(*) INTO v_addresses FROM erased;

    RETURN QUERY SELECT v_digest, v_lists, v_opt_outs, v_addresses, v_suppressions;
END
$$;

REVOKE ALL ON FUNCTION timekeeper_erase_person(text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION timekeeper_erase_person(text, text, timestamptz) TO timekeeper_api;
