-- Erasing a person reaches the tables added since it was written. PostgreSQL 15 compatible.
--
-- timekeeper_erase_person (migration 0041) now also deletes, in the same transaction:
-- * the suppression-removal records (mail_suppression_removals) of the person's addresses
--   or of a message of theirs: an admin's record of taking their address off the list
--   holds the address;
-- * their opt-outs of a workspace's notice e-mails (notice_mail_opt_outs), beside their
--   opt-outs of query schedules' messages;
-- and it finds the person's addresses in the platform directory too (users.email, in every
-- workspace), not only in the delivery rows: the retention pass may have erased a delivery
-- row's address while a suppression of it, or its removal record, stays.
-- The counts it returns keep their names: `opt_outs` counts both kinds of opt-out,
-- `suppressions` the suppression entries and the removal records deleted.
CREATE OR REPLACE FUNCTION timekeeper_erase_person(p_user_id text, p_actor text, p_now timestamptz)
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

    -- Suppressions and their removal records first: the delivery rows still name the
    -- addresses the person was sent at. Their addresses: those, and the platform
    -- directory's current address of the person (a delivery row's address may already be
    -- erased by the retention pass while a suppression of it stays).
    WITH addresses AS (
        SELECT DISTINCT d.workspace_id, lower(d.address) AS address
          FROM query_deliveries d
         WHERE d.user_id = p_user_id AND d.address IS NOT NULL),
    directory AS (
        SELECT lower(u.email) AS address FROM users u WHERE u.id = p_user_id AND u.email IS NOT NULL),
    messages AS (
        SELECT e.provider_message_id FROM message_events e WHERE e.user_id = p_user_id),
    removals AS (
        DELETE FROM mail_suppression_removals s
         WHERE EXISTS (SELECT 1 FROM addresses a WHERE a.workspace_id = s.workspace_id AND a.address = s.address)
            OR EXISTS (SELECT 1 FROM directory y WHERE y.address = s.address)
            OR EXISTS (SELECT 1 FROM messages m WHERE m.provider_message_id = s.provider_message_id)
        RETURNING 1),
    suppressions AS (
        DELETE FROM mail_suppressions s
         WHERE EXISTS (SELECT 1 FROM addresses a WHERE a.workspace_id = s.workspace_id AND a.address = s.address)
            OR EXISTS (SELECT 1 FROM directory y WHERE y.address = s.address)
            OR EXISTS (SELECT 1 FROM messages m WHERE m.provider_message_id = s.provider_message_id)
        RETURNING 1)
    SELECT (SELECT count(*) FROM removals) + (SELECT count(*) FROM suppressions) INTO v_suppressions;

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

    WITH gone AS (DELETE FROM mail_opt_outs o WHERE o.user_id = p_user_id RETURNING 1),
    notices AS (DELETE FROM notice_mail_opt_outs o WHERE o.user_id = p_user_id RETURNING 1)
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM notices) INTO v_opt_outs;

    WITH erased AS (
        UPDATE query_deliveries d SET address = NULL, address_erased_at = p_now
         WHERE d.user_id = p_user_id AND d.address IS NOT NULL
        RETURNING 1)
    SELECT count(*) INTO v_addresses FROM erased;

    RETURN QUERY SELECT v_digest, v_lists, v_opt_outs, v_addresses, v_suppressions;
END
$$;

