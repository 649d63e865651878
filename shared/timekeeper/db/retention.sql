-- History retention: each block deletes at most %(limit)s rows past their retention,
-- oldest first, found through the retention indexes of 0036_history_retention.sql, and
-- is committed on its own. Rows a concurrent transaction holds are skipped, never waited
-- for (FOR UPDATE SKIP LOCKED): a later pass takes them.
--
-- The shape keeps every batch index-driven at any table size: the candidates are read in
-- the retention index's order, each keep rule is a per-row subquery the planner cannot
-- turn into a hash join over the whole table (a LATERAL ... OFFSET 0, or a LIMIT 1), and
-- the deletes find their rows by key (= ANY(ARRAY(...))) rather than by a semi join. Each
-- batch's transaction first runs plan_in_index_order: once most of an index range is
-- prunable, the statistics make a bitmap scan of the whole range plus a sort look cheaper
-- than walking the index in order, and that plan checks every prunable row's keep rules
-- before its LIMIT (measured: 1.4 million buffers a batch at 2 million runs, 90 % pruned).

-- name: plan_in_index_order
-- For this transaction only: no sort, so an ORDER BY ... LIMIT is read in index order.
SET LOCAL enable_sort = off

-- name: prune_runs
-- Finished runs of one owner that finished before %(cutoff)s, with their delivery rows.
-- Always kept: each schedule's latest settled run (schedules.last_run_id), the latest run
-- of each trigger (the run pages show the last scheduled run and the last Run now), the
-- runs that make up a schedule's failure streak (its latest `consecutive_failures`
-- scheduled failures), and a delivered run while any of its links is still open
-- (query_deliveries.link_expires_at after %(now)s). A run not yet finished has no
-- finished_at and is not in the index at all.
WITH doomed AS MATERIALIZED (
    SELECT r.id
      FROM schedule_runs AS r
     CROSS JOIN LATERAL (SELECT s.last_run_id, s.consecutive_failures
                           FROM schedules AS s WHERE s.id = r.schedule_id OFFSET 0) AS s
     WHERE r.owner = %(owner)s
       AND r.finished_at IS NOT NULL
       AND r.finished_at < %(cutoff)s
       AND s.last_run_id IS DISTINCT FROM r.id
       AND (SELECT true FROM schedule_runs AS later
             WHERE later.schedule_id = r.schedule_id AND later.trigger = r.trigger
               AND later.queued_at > r.queued_at
             LIMIT 1)
       AND NOT (r.state = 'failed' AND r.trigger = 'scheduled' AND s.consecutive_failures > 0
                AND r.id = ANY(ARRAY(SELECT f.id FROM schedule_runs AS f
                                      WHERE f.schedule_id = r.schedule_id AND f.trigger = 'scheduled'
                                        AND f.state = 'failed'
                                      ORDER BY f.queued_at DESC
                                      LIMIT s.consecutive_failures)))
       AND (SELECT true FROM query_deliveries AS d
             WHERE d.run_id = r.id AND d.link_expires_at > %(now)s
             LIMIT 1) IS NULL
     ORDER BY r.finished_at
     LIMIT %(limit)s
       FOR UPDATE OF r SKIP LOCKED
), sources AS (
    DELETE FROM query_delivery_sources WHERE run_id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
), deliveries AS (
    DELETE FROM query_deliveries WHERE run_id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
), attempts AS (
    DELETE FROM query_delivery_attempts WHERE run_id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
), outbox AS (
    DELETE FROM query_delivery_outbox WHERE run_id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
), runs AS (
    DELETE FROM schedule_runs WHERE id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
)
SELECT (SELECT count(*) FROM runs) AS runs,
       (SELECT count(*) FROM sources) + (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM attempts)
       + (SELECT count(*) FROM outbox) AS delivery_rows

-- name: prune_events
-- Schedule history of one owner's schedules recorded before %(cutoff)s. Always kept: the
-- events of a run that is still kept (its history goes with it), and the pause that holds
-- a schedule paused.
WITH doomed AS MATERIALIZED (
    SELECT e.id
      FROM schedule_events AS e
     CROSS JOIN LATERAL (SELECT s.owner, s.status FROM schedules AS s WHERE s.id = e.schedule_id OFFSET 0) AS s
     WHERE e.at < %(cutoff)s
       AND s.owner = %(owner)s
       AND (e.run_id IS NULL OR (SELECT true FROM schedule_runs AS r WHERE r.id = e.run_id) IS NULL)
       AND NOT (e.kind = 'paused' AND s.status = 'paused')
     ORDER BY e.at
     LIMIT %(limit)s
)
DELETE FROM schedule_events WHERE id = ANY(ARRAY(SELECT id FROM doomed))

-- name: prune_exports
-- Exports that finished before %(cutoff)s (their files expired before that: the export
-- retention is at least the files' expiry). A queued or running export is never pruned.
WITH doomed AS MATERIALIZED (
    SELECT id FROM exports
     WHERE finished_at IS NOT NULL AND finished_at < %(cutoff)s
     ORDER BY finished_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
DELETE FROM exports WHERE id = ANY(ARRAY(SELECT id FROM doomed))

-- name: prune_failed_snapshot_rows
-- The generated rows of snapshot runs that failed (final) before %(cutoff)s: no reader sees
-- them (only published versions are read, and a failed run is never resumed). The ledger
-- row stays, marked rows_pruned_at. A published run's rows are frozen by the database
-- (0011) and are never candidates here.
WITH doomed AS MATERIALIZED (
    SELECT id FROM snapshot_runs
     WHERE state = 'failed' AND rows_pruned_at IS NULL AND updated_at < %(cutoff)s
     ORDER BY updated_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), counts AS (
    DELETE FROM snapshot_membership_counts WHERE run_id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
), aging AS (
    DELETE FROM snapshot_ar_aging WHERE run_id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
), selftest AS (
    DELETE FROM snapshot_selftest_rows WHERE run_id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
), marked AS (
    UPDATE snapshot_runs SET rows_pruned_at = %(now)s WHERE id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1
)
SELECT (SELECT count(*) FROM marked) AS runs,
       (SELECT count(*) FROM counts) + (SELECT count(*) FROM aging) + (SELECT count(*) FROM selftest) AS rows

-- name: erase_old_addresses
-- Recipient addresses of delivery rows last written before %(cutoff)s (the personal-data
-- retention): the address goes, address_erased_at = %(now)s; the row stays with its
-- outcome, counts and instants. Never a row of a run in flight: the run must be finished,
-- and a run another transaction holds (being settled, a delivery row being written for
-- it) is skipped with its rows.
WITH doomed AS MATERIALIZED (
    SELECT d.run_id, d.user_id
      FROM query_deliveries AS d
     CROSS JOIN LATERAL (SELECT r.id FROM schedule_runs AS r
                          WHERE r.id = d.run_id AND r.finished_at IS NOT NULL
                            FOR UPDATE SKIP LOCKED) AS r
     WHERE d.address IS NOT NULL
       AND d.updated_at < %(cutoff)s
     ORDER BY d.updated_at
     LIMIT %(limit)s
)
UPDATE query_deliveries AS d SET address = NULL, address_erased_at = %(now)s
 WHERE d.run_id = ANY(ARRAY(SELECT run_id FROM doomed))
   AND (d.run_id, d.user_id) IN (SELECT run_id, user_id FROM doomed)

-- name: expire_personal_data_snapshot_ar_aging
-- The personal data of aging rows whose period's month ended before %(cutoff_period)s's
-- month began (the type's retention, counted from the month end), in every version,
-- published or not: the member goes, the invoice id is replaced by a random one,
-- personal_data_erased_at = %(now)s; every other column stays, so each version's counts
-- and totals still add up. The transaction says it erases personal data (0063), which lets
-- the update through a published version's frozen rows.
WITH erasing AS MATERIALIZED (
    SELECT set_config('timekeeper.personal_data_erasure', 'on', true) AS mode
), doomed AS MATERIALIZED (
    SELECT a.run_id, a.invoice_id
      FROM snapshot_runs AS r
      JOIN snapshot_ar_aging AS a ON a.run_id = r.id AND a.member_id IS NOT NULL
     CROSS JOIN erasing
     WHERE r.owner = 'platform' AND r.snapshot_type = 'ar_aging' AND r.period < %(cutoff_period)s
       AND erasing.mode = 'on'
     LIMIT %(limit)s
)
UPDATE snapshot_ar_aging AS a
   SET member_id = NULL, invoice_id = gen_random_uuid(), personal_data_erased_at = %(now)s
  FROM doomed AS d
 WHERE a.run_id = d.run_id AND a.invoice_id = d.invoice_id
