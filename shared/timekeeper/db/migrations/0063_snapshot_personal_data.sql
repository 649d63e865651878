-- Personal data in snapshot rows: retention and erasure. PostgreSQL 15 compatible.
--
-- Of the snapshot rows only the accounts-receivable aging (snapshot_ar_aging) names a
-- person: each row is one invoice of one member (member_id, and invoice_id, which the
-- platform's invoices tie to the member). Membership counts are counts by type and status;
-- the self-test rows are a synthetic sequence.
--
-- A row's personal data is removed by pseudonymising it, never by deleting the row: the
-- member goes (member_id NULL), the invoice id is replaced by a fresh random one (so the
-- row no longer leads to the invoice, and so to the member), personal_data_erased_at says
-- when. Every other column stays, so a published version's count, total outstanding and
-- bucket totals (its validation basis) still add up from its rows, and every report over
-- it shows the same figures.
--
-- A published version's rows never change (0011): the trigger now lets exactly this
-- through, and only when the transaction says it is erasing personal data
-- (timekeeper.personal_data_erasure = on, set locally by the erasure function and the
-- retention pass): the statement's rows must keep every non-personal column as it was
-- (the old and the new rows are equal as multisets of those columns) and end erased.

ALTER TABLE snapshot_ar_aging ALTER COLUMN member_id DROP NOT NULL;
ALTER TABLE snapshot_ar_aging ADD COLUMN personal_data_erased_at timestamptz;
ALTER TABLE snapshot_ar_aging ADD CONSTRAINT snapshot_ar_aging_erased
    CHECK ((member_id IS NULL) = (personal_data_erased_at IS NOT NULL));

-- An erasure finds a member's rows in every version without reading the workspace's.
CREATE INDEX snapshot_ar_aging_member_idx ON snapshot_ar_aging (workspace_id, member_id)
    WHERE member_id IS NOT NULL;
-- The retention pass finds an old version's rows that still name someone through this
-- index alone: a version already pseudonymised has no entry left, so a pass over the old
-- versions costs one probe each, not a read of their rows.
CREATE INDEX snapshot_ar_aging_named_idx ON snapshot_ar_aging (run_id) WHERE member_id IS NOT NULL;

CREATE OR REPLACE FUNCTION timekeeper_snapshot_rows_frozen() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    published uuid;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT r.id INTO published FROM changed_new c JOIN snapshot_runs r ON r.id = c.run_id
         WHERE r.state = 'published' LIMIT 1;
    END IF;
    IF published IS NULL AND TG_OP IN ('UPDATE', 'DELETE') THEN
        SELECT r.id INTO published FROM changed_old c JOIN snapshot_runs r ON r.id = c.run_id
         WHERE r.state = 'published' LIMIT 1;
    END IF;
    IF published IS NOT NULL AND TG_OP = 'UPDATE' AND TG_TABLE_NAME = 'snapshot_ar_aging'
       AND current_setting('timekeeper.personal_data_erasure', true) = 'on' THEN
        -- Personal data erased, nothing else changed: allowed.
        IF NOT EXISTS (SELECT 1 FROM changed_new WHERE member_id IS NOT NULL OR personal_data_erased_at IS NULL)
           AND NOT EXISTS (
               (SELECT run_id, workspace_id, due_date, days_past_due, bucket, outstanding_minor, currency
                  FROM changed_old
                EXCEPT ALL
                SELECT run_id, workspace_id, due_date, days_past_due, bucket, outstanding_minor, currency
                  FROM changed_new)
               UNION ALL
               (SELECT run_id, workspace_id, due_date, days_past_due, bucket, outstanding_minor, currency
                  FROM changed_new
                EXCEPT ALL
                SELECT run_id, workspace_id, due_date, days_past_due, bucket, outstanding_minor, currency
                  FROM changed_old)) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF published IS NOT NULL THEN
        RAISE EXCEPTION 'snapshot version % is published: its rows never change', published
            USING ERRCODE = 'integrity_constraint_violation', TABLE = TG_TABLE_NAME;
    END IF;
    RETURN NULL;
END
$$;

-- Erase one member of one workspace from every snapshot version's rows (published or not):
-- the rows are pseudonymised as above. Returns the rows changed; a repeat changes none.
CREATE FUNCTION timekeeper_erase_member_snapshot_rows(p_workspace_id uuid, p_member_id uuid, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_rows integer;
BEGIN
    PERFORM set_config('timekeeper.personal_data_erasure', 'on', true);
    UPDATE snapshot_ar_aging
       SET member_id = NULL, invoice_id = gen_random_uuid(), personal_data_erased_at = p_now
     WHERE workspace_id = p_workspace_id AND member_id = p_member_id;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    PERFORM set_config('timekeeper.personal_data_erasure', 'off', true);
    RETURN v_rows;
END
$$;
REVOKE ALL ON FUNCTION timekeeper_erase_member_snapshot_rows(uuid, uuid, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION timekeeper_erase_member_snapshot_rows(uuid, uuid, timestamptz)
    TO timekeeper_api, timekeeper_worker;
