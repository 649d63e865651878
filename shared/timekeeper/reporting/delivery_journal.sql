-- The delivery journal: every write of a delivery run beside its transaction, each fenced by the
-- run's attempt (timekeeper.reporting.delivery_journal). The fence, repeated in each statement:
-- EXISTS (SELECT 1 FROM schedule_runs WHERE id = %(run_id)s AND state = 'running' AND attempts = %(attempt)s)

-- name: record_source
INSERT INTO query_delivery_sources (run_id, workspace_id, schedule_id, source_kind, format, object_key,
                                    byte_size, sha256, row_count, query_id, query_version, report_id,
                                    report_version, render_id, version_changed, acted_for, created_at,
                                    section_row_counts, snapshot_basis, snapshot_version_changed)
SELECT %(run_id)s, %(workspace_id)s, %(schedule_id)s, %(source_kind)s, %(format)s, %(object_key)s,
       %(byte_size)s, %(sha256)s, %(row_count)s, %(query_id)s, %(query_version)s, %(report_id)s,
       %(report_version)s, %(render_id)s, %(version_changed)s, %(acted_for)s, %(now)s, %(section_row_counts)s,
       %(snapshot_basis)s, %(snapshot_version_changed)s
 WHERE EXISTS (SELECT 1 FROM schedule_runs WHERE id = %(run_id)s AND state = 'running' AND attempts = %(attempt)s)
ON CONFLICT (run_id) DO UPDATE SET object_key = EXCLUDED.object_key, byte_size = EXCLUDED.byte_size,
       sha256 = EXCLUDED.sha256, row_count = EXCLUDED.row_count, acted_for = EXCLUDED.acted_for
RETURNING run_id, workspace_id, schedule_id, source_kind, format, object_key, byte_size, sha256, row_count, query_id,
          query_version, report_id, report_version, render_id, version_changed, acted_for, created_at,
          section_row_counts, snapshot_basis, snapshot_version_changed

-- name: record_skips
WITH held AS (SELECT 1 WHERE EXISTS (SELECT 1 FROM schedule_runs WHERE id = %(run_id)s AND state = 'running'
                                       AND attempts = %(attempt)s)),
     written AS (
        INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, skip_reason, attempt,
                                      updated_at)
        SELECT %(run_id)s, u.user_id, %(workspace_id)s, %(schedule_id)s, 'skipped', u.reason, %(attempt)s,
               %(now)s
          FROM unnest(%(users)s::text[], %(reasons)s::text[]) AS u (user_id, reason), held
        ON CONFLICT (run_id, user_id) DO UPDATE SET status = 'skipped', skip_reason = EXCLUDED.skip_reason,
               error = NULL, error_code = NULL, attempt = EXCLUDED.attempt, updated_at = EXCLUDED.updated_at
         WHERE query_deliveries.status = 'failed'
        RETURNING 1)
SELECT count(*) FROM held

-- name: held
SELECT 1 AS held WHERE EXISTS (SELECT 1 FROM schedule_runs WHERE id = %(run_id)s AND state = 'running'
                                 AND attempts = %(attempt)s)

-- name: claim_outbox
INSERT INTO query_delivery_outbox (communication_key, run_id, user_id, workspace_id, claimed_attempt,
                                   claimed_at)
SELECT %(run_id)s::text || ':' || u, %(run_id)s, u, %(workspace_id)s, %(attempt)s, %(now)s
  FROM unnest(%(users)s::text[]) AS u
ON CONFLICT (communication_key) DO UPDATE SET claimed_attempt = EXCLUDED.claimed_attempt,
       claimed_at = EXCLUDED.claimed_at
 WHERE query_delivery_outbox.provider_message_id IS NULL AND query_delivery_outbox.sending_at IS NULL
RETURNING user_id

-- name: unconfirmed_submissions
-- Submissions whose outcome is not known: a 'sending' claim without a recorded provider id
-- (the attempt that made it died or was taken over between the claim and the record).
SELECT user_id FROM query_delivery_outbox
 WHERE run_id = %(run_id)s AND provider_message_id IS NULL AND sending_at IS NOT NULL

-- name: claim_sending
-- The 'sending' claim of one recipient, journalled just before its submission (fenced: the
-- attempt still holds the run and the recipient's outbox claim, and no submission of it is
-- in flight or recorded). Committed with the flush wait: a lost claim could send twice.
UPDATE query_delivery_outbox SET sending_attempt = %(attempt)s, sending_at = %(now)s
 WHERE communication_key = %(run_id)s::text || ':' || %(user_id)s
   AND claimed_attempt = %(attempt)s AND provider_message_id IS NULL AND sending_at IS NULL
   AND EXISTS (SELECT 1 FROM schedule_runs WHERE id = %(run_id)s AND state = 'running' AND attempts = %(attempt)s)
RETURNING 1 AS claimed

-- name: recorded_submissions
SELECT user_id, provider_message_id FROM query_delivery_outbox
 WHERE run_id = %(run_id)s AND provider_message_id IS NOT NULL

-- name: record_sent
-- One statement, one round trip, committed on its own (the journal connection is in autocommit):
-- the relaxed CTE is what lets it skip the flush wait. Its last SELECT is the fence before the
-- next submission: the attempt still holds the run and the next recipient's claim.
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true)),
outbox AS (
    UPDATE query_delivery_outbox SET submissions = submissions + %(submitted)s,
           provider_message_id = COALESCE(provider_message_id, %(id)s),
           sent_at = COALESCE(sent_at, %(now)s), last_error = NULL
     WHERE communication_key = %(run_id)s::text || ':' || %(user_id)s AND EXISTS (SELECT FROM relaxed)
    RETURNING 1),
erased AS (
    -- The recipient was erased after this run was queued (person_erasures): the row keeps
    -- no address.
    SELECT pe.erased_at FROM person_erasures AS pe
      JOIN schedule_runs AS r ON r.id = %(run_id)s AND pe.erased_at >= r.queued_at
     WHERE pe.user_digest = encode(sha256(convert_to(%(user_id)s, 'UTF8')), 'hex')),
written AS (
    INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, address, address_erased_at,
                                  provider_message_id, link_expires_at, attempt, updated_at)
    SELECT %(run_id)s, %(user_id)s, %(workspace_id)s, %(schedule_id)s, 'sent',
           CASE WHEN EXISTS (SELECT FROM erased) THEN NULL ELSE %(address)s END, (SELECT erased_at FROM erased),
           %(id)s, %(expires)s, %(attempt)s, %(now)s
     WHERE EXISTS (SELECT FROM relaxed)
    ON CONFLICT (run_id, user_id) DO UPDATE SET status = 'sent', skip_reason = NULL,
           address = EXCLUDED.address, address_erased_at = EXCLUDED.address_erased_at,
           provider_message_id = EXCLUDED.provider_message_id,
           link_expires_at = COALESCE(EXCLUDED.link_expires_at, query_deliveries.link_expires_at),
           error = NULL, error_code = NULL, attempt = EXCLUDED.attempt, updated_at = EXCLUDED.updated_at
     WHERE query_deliveries.status <> 'sent'
    RETURNING 1),
attempted AS (
    -- This attempt's outcome for the recipient, kept beside the row's latest (a re-record of
    -- an earlier attempt's submission adds none).
    INSERT INTO query_delivery_attempts (run_id, user_id, attempt, workspace_id, status, provider_message_id, at)
    SELECT %(run_id)s, %(user_id)s, %(attempt)s, %(workspace_id)s, 'sent', %(id)s, %(now)s
     WHERE %(submitted)s = 1 AND EXISTS (SELECT FROM relaxed)
    ON CONFLICT (run_id, user_id, attempt) DO UPDATE SET status = 'sent', error_code = NULL,
           provider_message_id = EXCLUDED.provider_message_id, at = EXCLUDED.at
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM schedule_runs WHERE id = %(run_id)s AND state = 'running' AND attempts = %(attempt)s)
       AND (%(next_key)s::text IS NULL OR EXISTS (SELECT 1 FROM query_delivery_outbox
                                                   WHERE communication_key = %(next_key)s
                                                     AND claimed_attempt = %(attempt)s
                                                     AND provider_message_id IS NULL)) AS held

-- name: record_failed
-- Its last SELECT is the same fence as record_sent's.
WITH outbox AS (
    -- The provider answered with an error: the 'sending' claim is released (the message was
    -- not accepted), unless the outcome is not known (``release`` false: unconfirmed).
    UPDATE query_delivery_outbox SET submissions = submissions + CASE WHEN %(release)s THEN 1 ELSE 0 END,
           last_error = %(code)s,
           sending_at = CASE WHEN %(release)s THEN NULL ELSE sending_at END,
           sending_attempt = CASE WHEN %(release)s THEN NULL ELSE sending_attempt END
     WHERE communication_key = %(run_id)s::text || ':' || %(user_id)s RETURNING 1),
erased AS (
    -- As record_sent's: the recipient was erased after this run was queued.
    SELECT pe.erased_at FROM person_erasures AS pe
      JOIN schedule_runs AS r ON r.id = %(run_id)s AND pe.erased_at >= r.queued_at
     WHERE pe.user_digest = encode(sha256(convert_to(%(user_id)s, 'UTF8')), 'hex')),
written AS (
    INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, address, address_erased_at,
                                  error, error_code, attempt, updated_at)
    SELECT %(run_id)s, %(user_id)s, %(workspace_id)s, %(schedule_id)s, 'failed',
           CASE WHEN EXISTS (SELECT FROM erased) THEN NULL ELSE %(address)s END, (SELECT erased_at FROM erased),
           %(error)s, %(code)s, %(attempt)s, %(now)s
    ON CONFLICT (run_id, user_id) DO UPDATE SET status = 'failed', error = EXCLUDED.error,
           error_code = EXCLUDED.error_code, attempt = EXCLUDED.attempt, updated_at = EXCLUDED.updated_at
     WHERE query_deliveries.status <> 'sent'
    RETURNING 1),
attempted AS (
    -- An unconfirmed submission is the outcome of the attempt that claimed it, not this one's.
    INSERT INTO query_delivery_attempts (run_id, user_id, attempt, workspace_id, status, error_code, at)
    VALUES (%(run_id)s, %(user_id)s,
            CASE WHEN %(release)s THEN %(attempt)s
                 ELSE COALESCE((SELECT sending_attempt FROM query_delivery_outbox
                                 WHERE communication_key = %(run_id)s::text || ':' || %(user_id)s), %(attempt)s) END,
            %(workspace_id)s, 'failed', %(code)s, %(now)s)
    ON CONFLICT (run_id, user_id, attempt) DO NOTHING
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM schedule_runs WHERE id = %(run_id)s AND state = 'running' AND attempts = %(attempt)s)
       AND (%(next_key)s::text IS NULL OR EXISTS (SELECT 1 FROM query_delivery_outbox
                                                   WHERE communication_key = %(next_key)s
                                                     AND claimed_attempt = %(attempt)s
                                                     AND provider_message_id IS NULL)) AS held

-- name: keepalive
-- Touches the run's transaction so the login's idle-in-transaction timeout does not end it.
SELECT 1
