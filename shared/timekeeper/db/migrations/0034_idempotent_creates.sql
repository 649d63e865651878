-- A creating request (a schedule, a saved query or a version of it, a report, a query
-- schedule) repeated with its Idempotency-Key answers what the first one answered: the
-- key's row keeps that response (status, body, Location) once the creation commits, in
-- the creation's own transaction. A repeat locks the row first, so two copies of one
-- request sent at once create one resource: the second waits for the first and replays it.
ALTER TABLE idempotency_keys
    ADD COLUMN response_status integer CHECK (response_status BETWEEN 200 AND 299),
    ADD COLUMN response_body jsonb,
    ADD COLUMN response_location text CHECK (length(response_location) <= 2000),
    ADD CONSTRAINT idempotency_keys_response_whole CHECK ((response_status IS NULL) = (response_body IS NULL));

-- The API records a creation's response once (and locks the row to wait for a twin).
GRANT UPDATE (response_status, response_body, response_location) ON idempotency_keys TO timekeeper_api;
