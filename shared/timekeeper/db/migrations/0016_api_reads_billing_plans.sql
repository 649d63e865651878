-- billing.prepare declares its optional subject: a billing plan of the schedule's
-- workspace. The HTTP API checks it when a schedule is created or changed, so its walled
-- role reads that table too; row-level security (0003) keeps every other workspace's
-- plans invisible, so another workspace's plan is reported as an unknown one.
GRANT SELECT ON billing_plans TO timekeeper_api;
