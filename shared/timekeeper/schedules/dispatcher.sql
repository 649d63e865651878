-- name: claim_due_schedules
-- Due active schedules of one owner in one partition's slot range [slot_from, slot_to),
-- oldest first, skipping rows another pass holds. When a full batch gives one workspace
-- more than an equal share, the dispatcher claims again with claim_due_schedules_fairly
-- in the same transaction. Every predicate is a key of
-- schedules_claim_idx (owner, next_due_at, dispatch_slot): the slot bounds are tested on
-- the index entries, so the table is visited only for the partition's own schedules and
-- the index order serves the ORDER BY (no sort).
-- A business-day calendar rule's text carries its workspace's closed dates after a newline
-- (a jsonb's text never holds a raw newline): the rule the claim evaluates is the rule with
-- that holiday set, and the pass's rule cache is keyed by both (migration 0032).
SELECT id, workspace_id, work_kind,
       CASE WHEN recurrence -> 'calendar' ? 'business_day'
            THEN recurrence::text || E'\n' || coalesce(
                     (SELECT string_agg(c.closed_on::text, ',' ORDER BY c.closed_on)
                        FROM workspace_closures c WHERE c.workspace_id = schedules.workspace_id), '')
            ELSE recurrence::text END AS rule_text,
       next_due_at, definition_version
  FROM schedules
 WHERE owner = %(owner)s
   AND status = 'active'
   AND next_due_at <= %(now)s
   AND dispatch_slot >= %(slot_from)s AND dispatch_slot < %(slot_to)s
 ORDER BY next_due_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: claim_due_schedules_fairly
-- A fair claim: at most `limit` due active schedules of one owner in one partition's slot
-- range [slot_from, slot_to), interleaved by workspace, skipping rows another pass holds.
--   1. active_workspaces: distinct workspaces with schedules, by a skip scan of the leading
--      column of schedules_workspace_idx (workspace_id, owner, next_due_at) from `start` (a
--      random workspace id) upwards, then from the lowest one
--      (one index descent per workspace, never per schedule, and at most 2 * `limit`
--      descents: the cost is independent of any backlog and of how many workspaces there
--      are; a batch that does not reach a workspace leaves it to the fill and to the next
--      batches' other starts). The index is the one the listing reads: an advance of
--      next_due_at writes an entry in it anyway, so the fair claim adds none (migration 0079).
--   2. due_workspaces: those with a due active schedule of the owner in the slot range (one
--      descent each, which also gives the oldest due instant; the status and the slot are
--      tested on the table row), the longest waiting first, at most `limit` of them, with
--      their weight (workspaces.claim_weight, default 1).
--   3. fair: each due workspace's share, ceil(limit * weight / sum of weights), taken by a
--      per-workspace ordered index scan (oldest first), locked SKIP LOCKED; ranked round
--      robin: a workspace's n-th schedule at (n - 1) / weight, so weights 2:1 interleave
--      two to one; cut at `limit` (rounding up may exceed it by less than one per workspace).
--   4. fill: when shares went unused (a workspace had fewer due than its share), the rest
--      of the batch by due instant over every workspace (schedules_claim_idx), skipping
--      what fair took (a row this transaction locked is not skipped by SKIP LOCKED). With
--      one due workspace its share is the whole batch: the batch is full as before, and
--      fairness never leaves capacity idle.
-- Rows come back in publish order: the round robin, then the fill.
-- A business-day calendar rule's text carries its workspace's closed dates after a newline
-- (a jsonb's text never holds a raw newline): the rule the claim evaluates is the rule with
-- that holiday set, and the pass's rule cache is keyed by both (migration 0032).
WITH RECURSIVE upper_walk(workspace_id, step) AS (
    SELECT (SELECT workspace_id FROM schedules
             WHERE workspace_id >= %(start)s
             ORDER BY workspace_id LIMIT 1), 1
    UNION ALL
    SELECT (SELECT s.workspace_id FROM schedules AS s
             WHERE s.workspace_id > a.workspace_id
             ORDER BY s.workspace_id LIMIT 1), a.step + 1
      FROM upper_walk AS a
     WHERE a.workspace_id IS NOT NULL AND a.step < %(limit)s
), lower_walk(workspace_id, step) AS (
    SELECT (SELECT workspace_id FROM schedules
             WHERE workspace_id < %(start)s
             ORDER BY workspace_id LIMIT 1), 1
    UNION ALL
    SELECT (SELECT s.workspace_id FROM schedules AS s
             WHERE s.workspace_id > a.workspace_id AND s.workspace_id < %(start)s
             ORDER BY s.workspace_id LIMIT 1), a.step + 1
      FROM lower_walk AS a
     WHERE a.workspace_id IS NOT NULL AND a.step < %(limit)s
), active_workspaces AS (
    SELECT workspace_id FROM upper_walk WHERE workspace_id IS NOT NULL
    UNION ALL
    SELECT workspace_id FROM lower_walk WHERE workspace_id IS NOT NULL
), due_workspaces AS (
    SELECT a.workspace_id, d.oldest, coalesce((SELECT w.claim_weight FROM workspaces AS w
                                                WHERE w.id = a.workspace_id), 1) AS weight
      FROM active_workspaces AS a
     CROSS JOIN LATERAL (SELECT s.next_due_at AS oldest FROM schedules AS s
                          WHERE s.workspace_id = a.workspace_id AND s.owner = %(owner)s AND s.status = 'active'
                            AND s.next_due_at <= %(now)s
                            AND s.dispatch_slot >= %(slot_from)s AND s.dispatch_slot < %(slot_to)s
                          ORDER BY s.next_due_at LIMIT 1) AS d
     ORDER BY d.oldest, a.workspace_id
     LIMIT %(limit)s
), shares AS (
    SELECT workspace_id, weight,
           ceil(%(limit)s::numeric * weight / sum(weight) OVER ())::integer AS share
      FROM due_workspaces
), fair AS (
    SELECT c.id, c.workspace_id, c.work_kind, c.recurrence, c.next_due_at, c.definition_version,
           (row_number() OVER (PARTITION BY c.workspace_id ORDER BY c.next_due_at, c.id) - 1)::float8
               / w.weight AS turn
      FROM shares AS w
     CROSS JOIN LATERAL (SELECT s.id, s.workspace_id, s.work_kind, s.recurrence, s.next_due_at,
                                s.definition_version
                           FROM schedules AS s
                          WHERE s.workspace_id = w.workspace_id AND s.owner = %(owner)s AND s.status = 'active'
                            AND s.next_due_at <= %(now)s
                            AND s.dispatch_slot >= %(slot_from)s AND s.dispatch_slot < %(slot_to)s
                          ORDER BY s.next_due_at
                          LIMIT w.share
                            FOR UPDATE OF s SKIP LOCKED) AS c
     ORDER BY turn, c.next_due_at, c.workspace_id
     LIMIT %(limit)s
), fill AS (
    SELECT id, workspace_id, work_kind, recurrence, next_due_at, definition_version
      FROM schedules
     WHERE owner = %(owner)s
       AND status = 'active'
       AND next_due_at <= %(now)s
       AND dispatch_slot >= %(slot_from)s AND dispatch_slot < %(slot_to)s
       AND id NOT IN (SELECT id FROM fair)
     ORDER BY next_due_at
     LIMIT greatest(%(limit)s - (SELECT count(*) FROM fair), 0)
       FOR UPDATE SKIP LOCKED
), claimed AS (
    SELECT id, workspace_id, work_kind, recurrence, next_due_at, definition_version, 0 AS part, turn
      FROM fair
    UNION ALL
    SELECT id, workspace_id, work_kind, recurrence, next_due_at, definition_version, 1, 0
      FROM fill
)
SELECT id, workspace_id, work_kind,
       CASE WHEN recurrence -> 'calendar' ? 'business_day'
            THEN recurrence::text || E'\n' || coalesce(
                     (SELECT string_agg(c.closed_on::text, ',' ORDER BY c.closed_on)
                        FROM workspace_closures c WHERE c.workspace_id = claimed.workspace_id), '')
            ELSE recurrence::text END AS rule_text,
       next_due_at, definition_version
  FROM claimed
 ORDER BY part, turn, next_due_at, workspace_id

-- name: insert_runs
-- One statement per claimed batch. A conflicting occurrence key means the occurrence
-- already has its run: nothing is inserted for it. Queued runs are inserted recorded as
-- accepted by the queue, and the same statement adds the batch's pending-offer row
-- naming them (`pending_id`, NULL when none is queued): the dispatcher deletes it after
-- the send, and a row left behind makes the next pass offer them again (migration 0013).
-- The caller sends each run's id (time-ordered, UUID version 7, so a batch's primary-key
-- entries land on the index's last pages instead of one random page each); each inserted
-- run comes back as the 1-based position of its entry in the arrays, so the caller builds
-- its message from what it sent instead of reading ids and names back.
-- `state` is 'queued', or the outcome of a run recorded skipped without being offered:
-- 'skipped_stale' (too old for its kind's staleness bound) or 'skipped_dst_gap' (a local
-- time in a spring-forward gap of a rule whose DST gap choice is skip). `due_at` is the
-- instant a flexible window gave the run (NULL: due at its occurrence).
WITH inserted AS (
    INSERT INTO schedule_runs (
        id, schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at, due_at,
        occurrence_local, dst_shifted, trigger, definition_version, state, queued_at,
        offered_at, offer_count, published_at, publish_count, skipped_backlog, first_skipped_at,
        finished_at, outcome_code)
    SELECT v.id, v.schedule_id, v.workspace_id, %(owner)s, v.work_kind, v.occurrence_key, v.occurrence_at,
           v.due_at, v.occurrence_local, v.dst_shifted, 'scheduled', v.definition_version,
           CASE WHEN v.state = 'queued' THEN 'queued' ELSE 'skipped' END, %(now)s,
           CASE WHEN v.state = 'queued' THEN %(now)s::timestamptz END,
           CASE WHEN v.state = 'queued' THEN 1 ELSE 0 END,
           CASE WHEN v.state = 'queued' THEN %(now)s::timestamptz END,
           CASE WHEN v.state = 'queued' THEN 1 ELSE 0 END,
           v.skipped_backlog, v.first_skipped_at,
           CASE WHEN v.state <> 'queued' THEN %(now)s::timestamptz END,
           NULLIF(v.state, 'queued')
      FROM unnest(%(id)b::uuid[], %(schedule_id)b::uuid[], %(workspace_id)b::uuid[], %(work_kind)b::text[],
                  %(occurrence_key)b::text[], %(occurrence_at)b::timestamptz[], %(due_at)b::timestamptz[],
                  %(occurrence_local)b::timestamp[], %(dst_shifted)b::boolean[],
                  %(definition_version)b::integer[], %(state)b::text[], %(skipped_backlog)b::integer[],
                  %(first_skipped_at)b::timestamptz[])
           AS v(id, schedule_id, workspace_id, work_kind, occurrence_key, occurrence_at, due_at, occurrence_local,
                dst_shifted, definition_version, state, skipped_backlog, first_skipped_at)
    ON CONFLICT ON CONSTRAINT schedule_runs_occurrence_key DO NOTHING
    RETURNING id, state
), pending AS (
    INSERT INTO schedule_pending_offers (owner, offered_at, run_ids)
    SELECT %(owner)s, %(now)s, array_agg(id) FROM inserted WHERE state = 'queued' HAVING count(*) > 0
    RETURNING id
)
SELECT v.entry, i.state, (SELECT id FROM pending) AS pending_id
  FROM inserted AS i
  JOIN unnest(%(id)b::uuid[]) WITH ORDINALITY AS v(id, entry) ON v.id = i.id

-- name: advance_schedules
UPDATE schedules AS s
   SET next_due_at = v.next_due_at,
       status = CASE WHEN v.next_due_at IS NULL THEN 'disabled' ELSE s.status END,
       pause_reason = CASE WHEN v.next_due_at IS NULL THEN 'recurrence_ended' ELSE s.pause_reason END,
       updated_at = %(now)s
  FROM unnest(%(id)b::uuid[], %(next_due_at)b::timestamptz[]) AS v(id, next_due_at)
 WHERE s.id = v.id

-- name: pause_invalid_definitions
UPDATE schedules
   SET status = 'paused', pause_reason = 'definition_invalid', next_due_at = NULL, updated_at = %(now)s
 WHERE id = ANY(%(ids)s::uuid[])

-- name: stranded_runs
-- Runs to offer again, locked: released or never-published offers (the queue never
-- accepted their message: offered again at once), the queued runs of a claim batch whose
-- pending-offer row is still there (the dispatcher died between the claim's commit and
-- the record; the row is taken, one per statement), accepted offers that never started
-- after `reoffer_after` (the message was lost or dead-lettered), and abandoned starts
-- (running, lease long expired: the consumer was killed and the message is gone), and
-- exhausted starts (running, lease expired, attempts at the limit: settled at once). Each
-- kind is its own index range. The caller offers them again or, when their attempts or
-- accepted offers are exhausted, settles them failed. A pending batch's runs were counted
-- as accepted when inserted: `publish_count` is returned without that count, and
-- `pending` says which runs carry it.
WITH pending_batch AS (
    DELETE FROM schedule_pending_offers
     WHERE id = (SELECT id FROM schedule_pending_offers
                  WHERE owner = %(owner)s AND offered_at <= %(unpublished_before)s
                  ORDER BY offered_at, id
                  LIMIT 1
                    FOR UPDATE SKIP LOCKED)
    RETURNING run_ids
), pending AS (
    SELECT id FROM schedule_runs
     WHERE id = ANY((SELECT run_ids FROM pending_batch)::uuid[]) AND state = 'queued'
       AND published_at IS NOT NULL
       FOR UPDATE SKIP LOCKED
), unpublished AS (
    SELECT id FROM schedule_runs
     WHERE owner = %(owner)s AND state = 'queued' AND published_at IS NULL
       AND (offered_at IS NULL OR offered_at <= %(unpublished_before)s)
     ORDER BY offered_at NULLS FIRST
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), stranded AS (
    SELECT id FROM schedule_runs
     WHERE owner = %(owner)s AND state = 'queued' AND published_at <= %(stale_before)s
     ORDER BY published_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), abandoned AS (
    SELECT id FROM schedule_runs
     WHERE owner = %(owner)s AND state = 'running' AND lease_until <= %(stale_before)s
       AND (offered_at IS NULL OR offered_at <= %(stale_before)s)
     ORDER BY lease_until
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), exhausted AS (
    SELECT id FROM schedule_runs
     WHERE owner = %(owner)s AND state = 'running' AND lease_until <= %(now)s
       AND attempts >= %(max_attempts)s
     ORDER BY lease_until
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
SELECT r.id, r.schedule_id, r.workspace_id, r.work_kind, r.attempts,
       r.publish_count - (p.id IS NOT NULL)::integer AS publish_count,
       p.id IS NOT NULL AS pending,
       r.published_at IS NULL OR p.id IS NOT NULL AS unpublished, r.released_at IS NOT NULL AS was_released
  FROM schedule_runs AS r
  LEFT JOIN pending AS p ON p.id = r.id
 WHERE r.id IN (SELECT id FROM pending UNION ALL SELECT id FROM unpublished UNION ALL SELECT id FROM stranded
                UNION ALL SELECT id FROM abandoned UNION SELECT id FROM exhausted)
 ORDER BY r.id

-- name: offer_again
-- `pending`: runs of a pending batch, whose count of accepted offers is taken back.
UPDATE schedule_runs
   SET offered_at = %(now)s, published_at = NULL, offer_count = offer_count + 1,
       publish_count = publish_count - (id = ANY(%(pending)b::uuid[]))::integer
 WHERE id = ANY(%(ids)b::uuid[])

-- name: probe_work
-- One round trip that tells an idle pass it has nothing to do (the common minute).
-- A partition's probe looks at its own slot range; the owner-wide work (re-offers,
-- notifications) is probed only by the partition that does it (`owner_wide`).
SELECT EXISTS (SELECT 1 FROM schedules
                WHERE owner = %(owner)s AND status = 'active' AND next_due_at <= %(now)s
                  AND dispatch_slot >= %(slot_from)s AND dispatch_slot < %(slot_to)s) AS due,
       %(owner_wide)s AND
       (EXISTS (SELECT 1 FROM schedule_runs
                 WHERE owner = %(owner)s AND state = 'queued' AND published_at IS NULL
                   AND offered_at IS NULL)
        OR EXISTS (SELECT 1 FROM schedule_runs
                    WHERE owner = %(owner)s AND state = 'queued' AND published_at IS NULL
                      AND offered_at <= %(unpublished_before)s)
        OR EXISTS (SELECT 1 FROM schedule_pending_offers
                    WHERE owner = %(owner)s AND offered_at <= %(unpublished_before)s)
        OR EXISTS (SELECT 1 FROM schedule_runs
                    WHERE owner = %(owner)s AND state = 'queued' AND published_at <= %(stale_before)s))
           AS reofferable,
       %(owner_wide)s AND (EXISTS (SELECT 1 FROM schedule_runs
                WHERE owner = %(owner)s AND state = 'running' AND lease_until <= %(stale_before)s
                  AND (offered_at IS NULL OR offered_at <= %(stale_before)s))
       OR EXISTS (SELECT 1 FROM schedule_runs
                   WHERE owner = %(owner)s AND state = 'running' AND lease_until <= %(now)s
                     AND attempts >= %(max_attempts)s)) AS abandoned,
       %(owner_wide)s AND EXISTS (SELECT 1 FROM schedule_notifications
                                   WHERE owner = %(owner)s AND sent_at IS NULL AND topic) AS notices
