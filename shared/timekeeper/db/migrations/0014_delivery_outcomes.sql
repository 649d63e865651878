-- Scheduled delivery: every recipient's outcome settled to what happened.
--
-- * error_code: a failed recipient's machine-readable reason (``rejected`` and
--   ``invalid_address`` are permanent provider refusals, never retried; ``throttled``,
--   ``provider_error`` and ``submission_error`` are retried). ``error`` holds a fixed,
--   sanitized message: never the provider's own text, which can name e-mail addresses.
-- * skip_reason ``removed``: a recipient whose submission failed and who was taken off
--   the schedule before the retry.
ALTER TABLE query_deliveries ADD COLUMN error_code text
    CHECK (error_code IN ('rejected', 'invalid_address', 'throttled', 'provider_error', 'submission_error'));
ALTER TABLE query_deliveries DROP CONSTRAINT query_deliveries_skip_reason_check;
ALTER TABLE query_deliveries ADD CONSTRAINT query_deliveries_skip_reason_check
    CHECK (skip_reason IN ('deactivated', 'no_address', 'left_workspace', 'no_access', 'removed'));

-- Errors recorded before this rule held the provider's text: replace it.
UPDATE query_deliveries SET error_code = 'submission_error',
       error = 'the submission failed (recorded before errors were sanitized)'
 WHERE error IS NOT NULL;
UPDATE query_delivery_outbox SET last_error = 'submission_error' WHERE last_error IS NOT NULL;
