-- A fair claim: the dispatcher's claim interleaves the workspaces with due work instead of
-- taking the oldest due schedules of whichever workspace holds the most. PostgreSQL 15
-- compatible.
--
-- claim_weight: a workspace's share of a claim batch relative to the other workspaces with
-- due work in the same pass (its tier; default 1, equal shares). A workspace of weight 2
-- beside one of weight 1 gets two thirds of a batch while both have more than their share.
--
-- schedules_fair_claim_idx serves the claim's per-workspace scans: the distinct workspaces
-- with active schedules of an owner (a skip scan, one descent per workspace), each one's
-- oldest due schedule, and each one's share in due order. The slot is tested on the index
-- entries like schedules_claim_idx's (which stays: the fill by due instant and the idle
-- probe use it).

ALTER TABLE workspaces ADD COLUMN claim_weight smallint NOT NULL DEFAULT 1
    CHECK (claim_weight BETWEEN 1 AND 100);

CREATE INDEX schedules_fair_claim_idx ON schedules (owner, workspace_id, next_due_at, dispatch_slot)
    WHERE status = 'active';
