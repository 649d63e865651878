-- The delivery sender's 'sending' claim: journalled (committed and flushed) just before a
-- message is handed to the mail provider, cleared when the provider answered with an error.
-- PostgreSQL 15 compatible.
--
-- A row with sending_at set and no provider_message_id is a submission whose outcome is not
-- known: the process that made it died (or was taken over) between the claim and the
-- record of the provider's answer. A later attempt never submits it again; it records the
-- recipient failed / unconfirmed (timekeeper.reporting.sending, docs/delivery.md).

ALTER TABLE query_delivery_outbox
    ADD COLUMN sending_attempt integer,
    ADD COLUMN sending_at timestamptz;

-- The recipient's outcome when a later attempt finds such a claim: failed / unconfirmed.
ALTER TABLE query_deliveries DROP CONSTRAINT query_deliveries_error_code_check,
    ADD CONSTRAINT query_deliveries_error_code_check
    CHECK (error_code IN ('rejected', 'invalid_address', 'throttled', 'provider_error', 'submission_error',
                          'unconfirmed'));
ALTER TABLE query_delivery_attempts DROP CONSTRAINT query_delivery_attempts_error_code_check,
    ADD CONSTRAINT query_delivery_attempts_error_code_check
    CHECK (error_code IN ('rejected', 'invalid_address', 'throttled', 'provider_error', 'submission_error',
                          'unconfirmed'));
