-- Published snapshot rows are catalogue entities (one per snapshot type, joined to their
-- runs to show the current version): user-defined queries read them, so they stand behind
-- the query wall like every catalogue table (the grant to timekeeper_query and the policy
-- showing only the transaction's workspace). PostgreSQL 15 compatible.
SELECT timekeeper_allow_queries(t)
  FROM unnest(ARRAY['snapshot_runs', 'snapshot_membership_counts', 'snapshot_ar_aging',
                    'snapshot_selftest_rows']::regclass[]) AS t;
