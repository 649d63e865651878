-- Partitioned dispatch. PostgreSQL 15 compatible.
--
-- A pipeline's dispatcher runs as K partitions (the topology's dispatch_partitions), each
-- claiming the schedules whose dispatch slot lies in its contiguous share of the 32,768
-- slots. The slot is a stable hash of the schedule id: the first 15 bits of the MD5 of its
-- text form, the same for every K, so changing K moves whole slot ranges between
-- partitions and never a schedule's slot.
--
-- The claim index gains the slot as its last key column: a partition's claim reads the
-- due entries of the owner in next_due_at order (as before) and tests the slot range on
-- each index entry, visiting the table only for the schedules it owns. The claim keeps its
-- order and its cost does not grow with the number of schedules.
ALTER TABLE schedules
    ADD COLUMN dispatch_slot smallint NOT NULL
        GENERATED ALWAYS AS ((('x' || substr(md5(id::text), 1, 4))::bit(16)::integer >> 1)::smallint) STORED;

DROP INDEX schedules_claim_idx;
CREATE INDEX schedules_claim_idx ON schedules (owner, next_due_at, dispatch_slot) WHERE status = 'active';
