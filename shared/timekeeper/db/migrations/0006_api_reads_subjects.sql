-- The HTTP API checks a schedule's subject when it is created or changed (a work kind
-- declares the subject it needs: batch.roll a recurring batch, batch.auto_close a batch),
-- so its walled role reads those tables. Row-level security (0003) keeps every other
-- workspace's rows invisible: another workspace's subject is reported as an unknown one.
GRANT SELECT ON recurring_batches, batches TO timekeeper_api;
